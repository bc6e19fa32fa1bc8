package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestInstallPluginNixl runs the built binary: the plugin files are copied
// from --from into --dir (or $NIXL_PLUGIN_DIR) byte for byte with their
// mode, and bad invocations are usage errors naming what is wrong.
func TestInstallPluginNixl(t *testing.T) {
	from, dir := t.TempDir(), t.TempDir()
	for i, f := range nixlPluginFiles {
		require.NoError(t, os.WriteFile(filepath.Join(from, f), []byte{byte(i), 0, 0xff}, 0o755))
	}
	out, err := exec.Command(bin, "install-plugin", "nixl", "--dir", dir, "--from", from).CombinedOutput()
	require.NoError(t, err, "%s", out)
	assert.Contains(t, string(out), "MOONCAKE_GO")
	for i, f := range nixlPluginFiles {
		b, err := os.ReadFile(filepath.Join(dir, f))
		require.NoError(t, err)
		assert.Equal(t, []byte{byte(i), 0, 0xff}, b)
		st, err := os.Stat(filepath.Join(dir, f))
		require.NoError(t, err)
		assert.Equal(t, os.FileMode(0o755), st.Mode().Perm())
	}

	env := exec.Command(bin, "install-plugin", "nixl", "--from", from)
	env.Env = append(os.Environ(), "NIXL_PLUGIN_DIR="+t.TempDir())
	out, err = env.CombinedOutput()
	require.NoError(t, err, "%s", out)

	half := t.TempDir() // the plugin without its library
	require.NoError(t, os.WriteFile(filepath.Join(half, nixlPluginFiles[0]), []byte{1}, 0o755))
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"install-plugin", "ucx", "--dir", dir}, `unknown plugin "ucx"`},
		{[]string{"install-plugin", "nixl", "--dir", filepath.Join(dir, "missing")}, "is not a folder"},
		{[]string{"install-plugin", "nixl", "--dir", dir, "--from", t.TempDir()}, "libplugin_MOONCAKE_GO.so not found"},
		{[]string{"install-plugin", "nixl", "--dir", dir, "--from", half}, "but not libmooncake.so"},
	} {
		cmd := exec.Command(bin, c.args...)
		cmd.Env = append(os.Environ(), "NIXL_PLUGIN_DIR=")
		out, err := cmd.CombinedOutput()
		var ee *exec.ExitError
		require.ErrorAs(t, err, &ee, "%v: %s", c.args, out)
		assert.Equal(t, 2, ee.ExitCode(), "%v", c.args)
		assert.Contains(t, string(out), c.want)
	}
	empty := t.TempDir()
	cmd := exec.Command(bin, "install-plugin", "nixl", "--from", half)
	cmd.Env = append(os.Environ(), "NIXL_PLUGIN_DIR="+empty)
	out, err = cmd.CombinedOutput()
	require.Error(t, err)
	entries, _ := os.ReadDir(empty)
	assert.Empty(t, entries, "nothing installed: %s", out)
	cmd = exec.Command(bin, "install-plugin", "nixl", "--from", from)
	cmd.Env = append(os.Environ(), "NIXL_PLUGIN_DIR="+filepath.Join(empty, "missing"))
	out, _ = cmd.CombinedOutput()
	assert.Contains(t, string(out), "NIXL_PLUGIN_DIR "+filepath.Join(empty, "missing")+" is not a folder")
}
