package abitest

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
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

// TestCHeaders compiles every header as C11 (drafts included) and runs
// the store smoke program against a master in this process: setup,
// registration, copying and zero-copy puts and gets, batches and error
// paths from plain C.
func TestCHeaders(t *testing.T) {
	m := startMaster(t)
	out := buildAndRun(t, "gcc", []string{"-std=c11"}, "store_smoke.c", m.MetadataURL, m.RPCAddr)
	if !strings.Contains(out, "store_smoke: ok") {
		t.Fatalf("output: %s", out)
	}
}

// declRE matches a function declaration's first line in a header.
var declRE = regexp.MustCompile(`(?m)^(?:const\s+)?\w+\*?\s+\**(mc_\w+)\(`)

// headerFuncs returns the functions each header declares, and whether the
// header is a draft (ABI major 0: declared, not implemented).
func headerFuncs(t *testing.T) (funcs map[string][]string, draft map[string]bool) {
	t.Helper()
	funcs, draft = map[string][]string{}, map[string]bool{}
	for _, hdr := range headers {
		src, err := os.ReadFile(filepath.Join(repoRoot(), "abi", "include", "mooncake", hdr))
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range declRE.FindAllStringSubmatch(string(src), -1) {
			funcs[hdr] = append(funcs[hdr], m[1])
		}
		if len(funcs[hdr]) == 0 {
			t.Fatalf("%s declares no mc_ function", hdr)
		}
		consts := map[string]int64{}
		if err := readDefines(filepath.Join(repoRoot(), "abi", "include", "mooncake", hdr), consts); err != nil {
			t.Fatal(err)
		}
		for name, v := range consts {
			if strings.HasSuffix(name, "_ABI_VERSION_MAJOR") && v == 0 {
				draft[hdr] = true
			}
		}
	}
	return funcs, draft
}

// TestExportedSymbols checks the dynamic symbol table against the headers:
// every function of a header that is not a draft is exported, no function
// of a draft header is (not even a stub), nothing else is (the version
// script), and the soname.
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
	funcs, draft := headerFuncs(t)
	declared := map[string]bool{}
	for _, hdr := range headers {
		for _, fn := range funcs[hdr] {
			declared[fn] = true
			switch {
			case draft[hdr] && got[fn]:
				t.Errorf("%s is exported, but %s is a draft (ABI major 0)", fn, hdr)
			case !draft[hdr] && !got[fn]:
				t.Errorf("%s (%s) is not exported", fn, hdr)
			}
		}
	}
	for name := range got {
		if !declared[name] {
			t.Errorf("%s is exported but no header declares it", name)
		}
	}
	for _, want := range []string{"mc_abi_version", "mc_last_error", "mc_buf_free", "mc_te_create", "mc_store_setup"} {
		if !got[want] {
			t.Errorf("%s is not exported", want)
		}
	}
	for _, hdr := range []string{"vllm.h", "sglang.h", "lmcache.h", "nixl.h", "trtllm.h"} {
		if !draft[hdr] {
			t.Logf("%s is no longer a draft", hdr)
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

// TestHeaderCodes checks the status codes of all headers: distinct values,
// each in the range common.h gives its header.
func TestHeaderCodes(t *testing.T) {
	ranges := map[string][2]int64{ // prefix -> [lo, hi]
		"MC_VLLM_ERR_":    {-3099, -3000},
		"MC_SGLANG_ERR_":  {-3199, -3100},
		"MC_LMCACHE_ERR_": {-3299, -3200},
		"MC_NIXL_ERR_":    {-3399, -3300},
		"MC_TRTLLM_ERR_":  {-3499, -3400},
		"MC_P2P_ERR_":     {-3599, -3500},
	}
	// Upstream store values that no TE code has (store.h, common.h).
	upstreamStore := map[int64]bool{-10: true, -400: true, -500: true, -600: true, -601: true, -700: true,
		-701: true, -702: true, -703: true, -704: true, -705: true, -706: true, -707: true, -800: true,
		-900: true, -901: true}
	seen := map[int64]string{}
	for _, hdr := range headers {
		consts := map[string]int64{}
		if err := readDefines(filepath.Join(repoRoot(), "abi", "include", "mooncake", hdr), consts); err != nil {
			t.Fatal(err)
		}
		for name, v := range consts {
			if !strings.Contains(name, "_ERR_") {
				continue
			}
			if other, dup := seen[v]; dup {
				t.Errorf("%s (%s) and %s both have value %d", name, hdr, other, v)
			}
			seen[v] = name
			switch {
			case strings.HasPrefix(name, "MC_STORE_ERR_"):
				if !upstreamStore[v] && (v < -1999 || v > -1100) {
					t.Errorf("%s = %d: neither an upstream store value nor in -1999..-1100", name, v)
				}
			case strings.HasPrefix(name, "MC_ERR_"):
				if v > -1 || v < -1099 {
					t.Errorf("%s = %d: outside common.h's -1099..-1", name, v)
				}
			default:
				matched := false
				for prefix, r := range ranges {
					if strings.HasPrefix(name, prefix) {
						matched = true
						if v < r[0] || v > r[1] {
							t.Errorf("%s = %d: outside %d..%d", name, v, r[0], r[1])
						}
					}
				}
				if !matched {
					t.Errorf("%s (%s): no range for its prefix", name, hdr)
				}
			}
		}
	}
}
