package config

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/mooncake-go/mooncake/core/testutil/leakcheck"
)

func TestMain(m *testing.M) { leakcheck.Main(m) }

// td is a path under testdata.
func td(name string) string { return filepath.Join("testdata", filepath.FromSlash(name)) }

// readExtra returns a testdata JSON file as extra-config input.
func readExtra(t *testing.T, name string) json.RawMessage {
	t.Helper()
	b, err := os.ReadFile(td(name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// readEnv parses the shell snippets in testdata: "export NAME=value" and
// "NAME=value \" lines, with optional double quotes around the value.
func readEnv(t *testing.T, name string) map[string]string {
	t.Helper()
	f, err := os.Open(td(name))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	env := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		line = strings.TrimSpace(strings.TrimSuffix(line, `\`))
		line = strings.TrimPrefix(line, "export ")
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok {
			t.Fatalf("%s: bad line %q", name, line)
		}
		if uq, err := strconv.Unquote(v); err == nil {
			v = uq
		}
		env[k] = v
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return env
}

// mustLoad loads and fails the test on error.
func mustLoad(t *testing.T, opts LoadOptions) (Config, Report) {
	t.Helper()
	c, r, err := Load(opts)
	if err != nil {
		t.Fatalf("Load: %v\nreport: %v", err, r)
	}
	return c, r
}

// diffConfig lists differing fields of two configs, or "".
func diffConfig(got, want Config) string {
	var out []string
	gv, wv := reflect.ValueOf(got), reflect.ValueOf(want)
	for i := range gv.NumField() {
		g, w := gv.Field(i).Interface(), wv.Field(i).Interface()
		if !reflect.DeepEqual(g, w) {
			out = append(out, fmt.Sprintf("%s: got %#v, want %#v", gv.Type().Field(i).Name, g, w))
		}
	}
	return strings.Join(out, "\n")
}

// mem is an in-memory file system for LoadOptions.ReadFile.
type mem map[string]string

func (m mem) read(name string) ([]byte, error) {
	s, ok := m[name]
	if !ok {
		return nil, &os.PathError{Op: "open", Path: name, Err: os.ErrNotExist}
	}
	return []byte(s), nil
}
