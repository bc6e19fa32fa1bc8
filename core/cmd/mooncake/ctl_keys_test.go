package main

import (
	"strings"
	"testing"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mooncake-go/mooncake/core/store/master"
	"github.com/mooncake-go/mooncake/core/store/server"
)

// TestCtlBinaryKeys: keys are bytes; `ctl keys` and `ctl stat` print keys
// that are not printable UTF-8 Go-quoted (never raw), and KEY arguments and
// --prefix take that quoted form, or the raw bytes, back.
func TestCtlBinaryKeys(t *testing.T) {
	p, err := server.Start(server.ProcessConfig{Master: master.Config{ClientTTL: time.Hour}, RPCAddr: "127.0.0.1:0"})
	require.NoError(t, err)
	t.Cleanup(p.Close)
	keys := []string{"\xff\xfe", "a\x00b", "a\x00c", "tab\there", "q\"uote", "plain", "日本"}
	p.Server.Do(func(m *master.Master) {
		require.NoError(t, m.MountSegment(master.Segment{ID: "seg", Name: "node", Base: 1 << 32, Size: 1 << 20, Protocol: "tcp"}, "c1"))
		for _, k := range keys {
			_, err := m.PutStart("c1", k, 10, master.ReplicaConfig{ReplicaNum: 1})
			require.NoError(t, err, "put %q", k)
			require.NoError(t, m.PutEnd("c1", k))
		}
	})
	addr := p.RPCAddr

	lines := ctlOK(t, addr, "keys")
	out := strings.Join(lines, "\n")
	require.True(t, utf8.ValidString(out), "ctl keys printed bytes that are not UTF-8: %q", out)
	for _, l := range lines {
		for _, r := range l {
			require.True(t, unicode.IsPrint(r), "ctl keys printed %U raw: %q", r, l)
		}
	}
	require.Len(t, lines, 1+len(keys), out)
	var printed []string
	for _, l := range lines[1:] {
		printed = append(printed, strings.Fields(l)[0])
	}
	// Key order is byte order; each key is plain or Go-quoted.
	assert.Equal(t, []string{`"a\x00b"`, `"a\x00c"`, "plain", `"q\"uote"`, `"tab\there"`, "日本", `"\xff\xfe"`}, printed)

	// The printed form and the raw bytes both name the key.
	for _, arg := range []string{`"\xff\xfe"`, "\xff\xfe"} {
		st := ctlOK(t, addr, "stat", arg)
		assert.Equal(t, []string{"key", `"\xff\xfe"`}, strings.Fields(st[0]), "stat %q", arg)
		assert.Equal(t, "10", row(t, st, "size")[1])
	}
	lines = ctlOK(t, addr, "keys", "--prefix", `"a\x00"`)
	require.Len(t, lines, 3, strings.Join(lines, "\n"))
	assert.Equal(t, `"a\x00b"`, strings.Fields(lines[1])[0])
	assert.Equal(t, `"a\x00c"`, strings.Fields(lines[2])[0])

	assert.Equal(t, []string{`removed "a\x00b"`}, ctlOK(t, addr, "remove", `"a\x00b"`))
	assert.Equal(t, []string{"removed 1 keys"}, ctlOK(t, addr, "remove-regex", `^a\x00c$`))
	assert.Equal(t, []string{`removed "q\"uote"`}, ctlOK(t, addr, "remove", `"q\"uote"`))
	p.Server.Do(func(m *master.Master) {
		for _, k := range []string{"a\x00b", "a\x00c", "q\"uote"} {
			ok, err := m.ExistKey(k)
			require.NoError(t, err)
			assert.False(t, ok, "%q still exists", k)
		}
	})

	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"stat", `"\xff`}, 2, "not a Go-quoted string"},
		{[]string{"keys", "--prefix", `"x`}, 2, "--prefix"},
		{[]string{"stat", ""}, 1, "key is empty"},
		{[]string{"remove", strings.Repeat("\xff", master.MaxKeyLen+1)}, 1, "longer than the limit of 4096 bytes"},
	} {
		r := mooncake(t, 30*time.Second, append([]string{"ctl", "--master", addr}, tc.args...)...)
		line := oneLine(t, r.stderr)
		assert.Equal(t, tc.code, r.code, "%q: %s", tc.args, line)
		assert.Contains(t, line, tc.want, "%q", tc.args)
		assert.True(t, utf8.ValidString(line), "%q: stderr not UTF-8: %q", tc.args, line)
	}
}
