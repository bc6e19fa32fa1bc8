package abitest

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// libFile is the library the tests use, or skips like load does.
func libFile(t *testing.T) string {
	t.Helper()
	path := os.Getenv(EnvLibrary)
	if path == "" {
		path = filepath.Join(repoRoot(), "build", "libmooncake.so")
	}
	if _, err := os.Stat(path); err != nil {
		t.Skipf("libmooncake.so not built (%v): run `make lib` from the repository root, or set %s to a built library", err, EnvLibrary)
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		t.Fatal(err)
	}
	return abs
}

// buildAndRun compiles testdata/src with compiler (warnings are errors)
// against the headers, links it to the library by its path (the binary then
// needs the library by soname, found through an rpath), and runs it.
func buildAndRun(t *testing.T, compiler string, flags []string, src string, args ...string) string {
	t.Helper()
	cc, err := exec.LookPath(compiler)
	if err != nil {
		t.Skipf("%s not installed: %v", compiler, err)
	}
	lib := libFile(t)
	bin := filepath.Join(t.TempDir(), strings.TrimSuffix(src, filepath.Ext(src)))
	cmd := append(flags, "-Wall", "-Wextra", "-Werror", "-pedantic",
		"-I", filepath.Join(repoRoot(), "abi", "include"),
		"-o", bin, filepath.Join("testdata", src), lib, "-Wl,-rpath,"+filepath.Dir(lib))
	if out, err := exec.Command(cc, cmd...).CombinedOutput(); err != nil {
		t.Fatalf("%s %s: %v\n%s", compiler, strings.Join(cmd, " "), err, out)
	}
	out, err := exec.Command(bin, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %v\n%s", bin, err, out)
	}
	return string(out)
}

// TestCCaller runs a plain C program against the library: the headers
// compile as C11 without warnings, the prototypes link, and a transfer and
// some error paths behave from C.
func TestCCaller(t *testing.T) {
	out := buildAndRun(t, "gcc", []string{"-std=c11"}, "smoke.c", metaServer(t))
	if !strings.Contains(out, "smoke: ok") {
		t.Fatalf("output: %s", out)
	}
}

// TestCXXHeaders compiles the headers as C++11 and checks the struct sizes
// the Go and Python bindings assume.
func TestCXXHeaders(t *testing.T) {
	buildAndRun(t, "g++", []string{"-std=c++11"}, "header.cc")
}

// TestExportedSymbols checks the dynamic symbol table holds the mc_*
// functions of the headers and nothing else (the version script), and the
// soname.
func TestExportedSymbols(t *testing.T) {
	lib := libFile(t)
	nm, err := exec.LookPath("nm")
	if err != nil {
		t.Skipf("nm not installed: %v", err)
	}
	out, err := exec.Command(nm, "-D", "--defined-only", lib).Output()
	if err != nil {
		t.Fatalf("nm: %v", err)
	}
	got := map[string]bool{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		name := f[len(f)-1]
		if !strings.HasPrefix(name, "mc_") {
			t.Errorf("exported symbol %q is not mc_*", line)
		}
		got[name] = true
	}
	for _, want := range []string{
		"mc_abi_version", "mc_last_error", "mc_te_abi_version", "mc_te_create", "mc_te_destroy",
		"mc_te_install_transport", "mc_te_register_local_memory", "mc_te_unregister_local_memory",
		"mc_te_open_segment", "mc_te_close_segment", "mc_te_allocate_batch", "mc_te_submit",
		"mc_te_get_status", "mc_te_free_batch",
	} {
		if !got[want] {
			t.Errorf("%s is not exported", want)
		}
	}
	if re, err := exec.LookPath("readelf"); err == nil {
		out, err := exec.Command(re, "-d", lib).Output()
		if err != nil {
			t.Fatalf("readelf: %v", err)
		}
		if !strings.Contains(string(out), "Library soname: [libmooncake.so]") {
			t.Errorf("soname is not libmooncake.so:\n%s", out)
		}
	}
}
