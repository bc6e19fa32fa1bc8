package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"
)

// nixlPluginFiles are what `install-plugin nixl` copies: NIXL's backend
// plugin (the backend name, MOONCAKE_GO, is its file name) and the library
// it links, found through the plugin's RUNPATH ($ORIGIN) beside it.
var nixlPluginFiles = []string{"libplugin_MOONCAKE_GO.so", "libmooncake.so"}

// pluginSources are the folders searched for the plugin files when --from
// is not given: beside the wheel's package (this binary is
// mooncake_go/bin/mooncake there, the files in mooncake_go/), then a
// source checkout's build/ (this binary is bin/mooncake).
func pluginSources() []string {
	exe, err := os.Executable()
	if err != nil {
		return nil
	}
	if r, err := filepath.EvalSymlinks(exe); err == nil {
		exe = r
	}
	dir := filepath.Dir(exe)
	return []string{filepath.Join(dir, ".."), filepath.Join(dir, "..", "build")}
}

func installPluginCmd() *cobra.Command {
	var dir, fromDir string
	c := &cobra.Command{
		Use:   "install-plugin nixl --dir DIR",
		Short: "Install an engine plugin: `nixl` copies NIXL's backend plugin libplugin_MOONCAKE_GO.so (backend name MOONCAKE_GO) and libmooncake.so into DIR",
		Long: `install-plugin nixl copies libplugin_MOONCAKE_GO.so and the libmooncake.so it
links into DIR, where NIXL looks for backend plugins: the folder named by
NIXL_PLUGIN_DIR (it replaces NIXL's default folder, so NIXL then sees only
the plugins in it), or NIXL's own plugin folder (in its wheel:
site-packages/.nixl_cu12.mesonpy.libs/plugins) to keep UCX and the others
beside ours. Without --dir, DIR is $NIXL_PLUGIN_DIR. The files come from
--from, else from beside this binary's package (the wheel's mooncake_go/,
a checkout's build/ after make nixl-plugin).`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if args[0] != "nixl" {
				return &exitError{2, fmt.Sprintf("mooncake install-plugin: unknown plugin %q (built: nixl)", args[0])}
			}
			from := "--dir"
			if dir == "" {
				dir, from = os.Getenv("NIXL_PLUGIN_DIR"), "NIXL_PLUGIN_DIR"
			}
			if dir == "" {
				return &exitError{2, "mooncake install-plugin nixl: no --dir and NIXL_PLUGIN_DIR is not set: name the folder NIXL loads plugins from"}
			}
			if st, err := os.Stat(dir); err != nil || !st.IsDir() {
				return &exitError{2, fmt.Sprintf("mooncake install-plugin nixl: %s %s is not a folder", from, dir)}
			}
			srcs := pluginSources()
			if fromDir != "" {
				srcs = []string{fromDir}
			}
			src := ""
			for _, s := range srcs {
				if _, err := os.Stat(filepath.Join(s, nixlPluginFiles[0])); err == nil {
					src = s
					break
				}
			}
			if src == "" {
				return &exitError{2, fmt.Sprintf("mooncake install-plugin nixl: %s not found in %v (build it with make nixl-plugin, or pass --from)", nixlPluginFiles[0], srcs)}
			}
			// Both files or none: the plugin without the library beside it
			// fails to load in NIXL with only an INFO line.
			for _, f := range nixlPluginFiles[1:] {
				if _, err := os.Stat(filepath.Join(src, f)); err != nil {
					return &exitError{2, fmt.Sprintf("mooncake install-plugin nixl: %s has %s but not %s, which it loads from its own folder; nothing installed", src, nixlPluginFiles[0], f)}
				}
			}
			for _, f := range nixlPluginFiles {
				if err := copyFile(filepath.Join(src, f), filepath.Join(dir, f)); err != nil {
					return &exitError{1, "mooncake install-plugin nixl: " + err.Error()}
				}
				fmt.Fprintf(cmd.OutOrStdout(), "installed %s\n", filepath.Join(dir, f))
			}
			fmt.Fprintln(cmd.OutOrStdout(), `NIXL backend name: "MOONCAKE_GO" (agent.create_backend("MOONCAKE_GO", {"ip_addr": ...}))`)
			return nil
		},
	}
	c.Flags().StringVar(&dir, "dir", "", "folder NIXL loads backend plugins from (default $NIXL_PLUGIN_DIR)")
	c.Flags().StringVar(&fromDir, "from", "", "folder holding libplugin_MOONCAKE_GO.so and libmooncake.so (default: beside this binary's package)")
	return c
}

// copyFile copies src to dst through a temporary file in dst's folder and
// a rename, so a process loading dst never sees half a file; the mode is
// src's.
func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	st, err := in.Stat()
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(dst), ".mooncake-install-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := io.Copy(tmp, in); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Chmod(st.Mode().Perm()); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), dst)
}
