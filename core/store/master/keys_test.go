package master

import (
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mooncake-go/mooncake/core/store"
)

// binaryKeys are keys that are not UTF-8 or hold NUL and other control
// bytes: the master treats every key as bytes.
var binaryKeys = []string{"\xff\xfe", "a\x00b", "\x00", "\x80tail", "ok\xc3", strings.Repeat("\xff", MaxKeyLen)}

// TestBinaryKeys: every key operation works byte for byte on keys that are
// not UTF-8, and empty or too long keys are refused saying why.
func TestBinaryKeys(t *testing.T) {
	m, _ := newTestMaster(t, nil)
	mustMount(t, m, "c1", testSeg("a", 1<<20))
	for _, k := range binaryKeys {
		mustPut(t, m, "c1", k, 64, 1)
	}
	// A key that differs from another only in a byte that is not UTF-8 is
	// another key (no U+FFFD folding).
	mustPut(t, m, "c1", "\xff\xfd", 64, 1)
	for _, k := range binaryKeys {
		ok, err := m.ExistKey(k)
		require.NoError(t, err, "%q", k)
		assert.True(t, ok, "%q", k)
		n, err := m.GetSize(k)
		require.NoError(t, err, "%q", k)
		assert.Equal(t, uint64(64), n, "%q", k)
		in, err := m.Stat(k)
		require.NoError(t, err, "%q", k)
		assert.Equal(t, k, in.Key)
	}
	got, total, err := m.ListKeys("\xff", 0)
	require.NoError(t, err)
	require.Equal(t, 3, total)
	assert.Equal(t, []string{"\xff\xfd", "\xff\xfe", strings.Repeat("\xff", MaxKeyLen)}, []string{got[0].Key, got[1].Key, got[2].Key})
	require.NoError(t, m.Remove("\xff\xfe", true))
	ok, err := m.ExistKey("\xff\xfe")
	require.NoError(t, err)
	assert.False(t, ok)
	ok, err = m.ExistKey("\xff\xfd")
	require.NoError(t, err)
	assert.True(t, ok)

	for _, tc := range []struct {
		key  string
		want *store.Error
		msg  string
	}{
		{"", store.ErrInvalidParams, "key is empty"},
		{strings.Repeat("\xff", MaxKeyLen+1), store.ErrInvalidKey, "key of 4097 bytes is longer than the limit of 4096 bytes"},
	} {
		_, err := m.PutStart("c1", tc.key, 64, ReplicaConfig{ReplicaNum: 1})
		require.ErrorIs(t, err, tc.want)
		assert.Contains(t, err.Error(), tc.msg)
		for name, op := range map[string]func() error{
			"exist":  func() error { _, err := m.ExistKey(tc.key); return err },
			"get":    func() error { _, _, err := m.GetReplicaList(tc.key); return err },
			"remove": func() error { return m.Remove(tc.key, true) },
			"size":   func() error { _, err := m.GetSize(tc.key); return err },
		} {
			err := op()
			require.ErrorIs(t, err, tc.want, name)
			assert.Contains(t, err.Error(), tc.msg, name)
		}
	}
}

// TestRemoveByRegexBinaryKeys: regular expressions are UTF-8 text; a key
// byte that is not UTF-8 matches as U+FFFD ("." and \x{FFFD}), NUL is
// \x00, and an expression that is not UTF-8 is refused.
func TestRemoveByRegexBinaryKeys(t *testing.T) {
	setup := func(t *testing.T) *Master {
		m, _ := newTestMaster(t, nil)
		mustMount(t, m, "c1", testSeg("a", 1<<20))
		for _, k := range []string{"\xff\xfe", "a\x00b", "x\xffy", "plain", "\uFFFD"} {
			mustPut(t, m, "c1", k, 64, 1)
		}
		return m
	}
	for _, tc := range []struct {
		expr string
		n    int
		left []string
	}{
		{`^\x{FFFD}\x{FFFD}$`, 1, []string{"\uFFFD", "a\x00b", "plain", "x\xffy"}},
		{`^x.y$`, 1, []string{"\uFFFD", "a\x00b", "plain", "\xff\xfe"}},
		{`\x{FFFD}`, 3, []string{"a\x00b", "plain"}}, // a real U+FFFD matches too
		{`^a\x00b$`, 1, []string{"\uFFFD", "plain", "x\xffy", "\xff\xfe"}},
		{`\xff`, 0, []string{"\uFFFD", "a\x00b", "plain", "x\xffy", "\xff\xfe"}}, // U+00FF, not the byte
	} {
		t.Run(tc.expr, func(t *testing.T) {
			m := setup(t)
			n, err := m.RemoveByRegex(tc.expr, true)
			require.NoError(t, err)
			assert.Equal(t, tc.n, n)
			want := slices.Clone(tc.left)
			slices.Sort(want) // byte order, as keysOf
			assert.Equal(t, want, keysOf(m))
		})
	}
	m := setup(t)
	_, err := m.RemoveByRegex("\xff", true)
	require.ErrorIs(t, err, store.ErrInvalidParams)
	assert.Contains(t, err.Error(), "not UTF-8")
}
