package store

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestCheckKey(t *testing.T) {
	for _, k := range []string{"k", "\xff\xfe", "a\x00b", "\x00", strings.Repeat("\xff", MaxKeyLen)} {
		assert.NoError(t, CheckKey(k), "%q", k)
	}
	err := CheckKey("")
	require.ErrorIs(t, err, ErrInvalidParams)
	assert.Contains(t, err.Error(), "key is empty")
	err = CheckKey(strings.Repeat("k", MaxKeyLen+1))
	require.ErrorIs(t, err, ErrInvalidKey)
	assert.Contains(t, err.Error(), "key of 4097 bytes is longer than the limit of 4096 bytes")
}

func TestKeyText(t *testing.T) {
	for _, tc := range []struct{ key, text string }{
		{"plain/key-1", "plain/key-1"},
		{"with space", "with space"},
		{"日本", "日本"},
		{"\xff\xfe", `"\xff\xfe"`},
		{"a\x00b", `"a\x00b"`},
		{"tab\there", `"tab\there"`},
		{"nl\n", `"nl\n"`},
		{`q"uote`, `"q\"uote"`},
		{`"quoted"`, `"\"quoted\""`},
		{`back\slash`, `"back\\slash"`},
		{"\u200b", `"\u200b"`}, // not printable
		{"", `""`},
	} {
		got := KeyText(tc.key)
		assert.Equal(t, tc.text, got, "%q", tc.key)
		assert.True(t, utf8.ValidString(got))
		back, err := ParseKeyText(got)
		require.NoError(t, err, "%q", got)
		assert.Equal(t, tc.key, back, "round trip of %q", tc.key)
	}
	raw, err := ParseKeyText("\xff\xfe")
	require.NoError(t, err)
	assert.Equal(t, "\xff\xfe", raw, "raw bytes are the key itself")
	_, err = ParseKeyText(`"\xff`)
	require.ErrorIs(t, err, ErrInvalidParams)
	assert.Contains(t, err.Error(), "not a Go-quoted string")
}

func TestValidText(t *testing.T) {
	assert.Equal(t, "plain 日本", ValidText("plain 日本"))
	assert.Equal(t, `key \xff\xfe: x`, ValidText("key \xff\xfe: x"))
	assert.Equal(t, `ok\xc3`, ValidText("ok\xc3"))
	assert.True(t, utf8.ValidString(ValidText("\x80\xbf\xc0")))
}
