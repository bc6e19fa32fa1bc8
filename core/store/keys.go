package store

import (
	"strconv"
	"strings"
	"unicode/utf8"
)

// MaxKeyLen is the longest object key, in bytes. Upstream Mooncake sets no
// limit of its own (its keys are std::string, bounded only by the RPC
// message size); ours bounds what one key costs the master and every log
// line naming it. The C ABI's MC_STORE_MAX_KEY_LEN and the disk tier's
// file header use the same value.
const MaxKeyLen = 4096

// CheckKey validates an object key. A key is any 1..MaxKeyLen bytes: any
// byte value, NUL included, not necessarily UTF-8 (as upstream's
// std::string keys). Errors: INVALID_PARAMS for an empty key, INVALID_KEY
// for one longer than MaxKeyLen, each saying so.
func CheckKey(key string) error {
	if key == "" {
		return Errorf(InvalidParams, "key is empty (a key is 1 to %d bytes)", MaxKeyLen)
	}
	if len(key) > MaxKeyLen {
		return Errorf(InvalidKey, "key of %d bytes is longer than the limit of %d bytes", len(key), MaxKeyLen)
	}
	return nil
}

// KeyText returns key as an operator reads it: unchanged when it is UTF-8
// made of printable characters with no '"' or '\\', otherwise Go-quoted
// ("\xff\xfe", "a\x00b"), so that a key whose bytes are not printable
// never reaches a terminal raw and a quoted form is never taken for a
// plain key. ParseKeyText reverses it.
func KeyText(key string) string {
	if key != "" && utf8.ValidString(key) && !strings.ContainsAny(key, "\"\\") {
		plain := true
		for _, r := range key {
			if !strconv.IsPrint(r) {
				plain = false
				break
			}
		}
		if plain {
			return key
		}
	}
	return strconv.Quote(key)
}

// ParseKeyText reads a key as KeyText prints it: text that starts with '"'
// is a Go-quoted string and is unquoted; any other text is the key itself.
// Errors: INVALID_PARAMS naming the text when it starts with '"' but is
// not a valid Go-quoted string.
func ParseKeyText(text string) (string, error) {
	if !strings.HasPrefix(text, `"`) {
		return text, nil
	}
	key, err := strconv.Unquote(text)
	if err != nil {
		return "", Errorf(InvalidParams, "key %s starts with '\"' but is not a Go-quoted string (%v); quote it again to name a key that starts with '\"'", text, err)
	}
	return key, nil
}

// ValidText returns s with every byte sequence that is not UTF-8 replaced
// by its \xNN escape, for messages that travel in proto string fields
// (which must be UTF-8) or reach a terminal. UTF-8 text is returned as is.
func ValidText(s string) string {
	if utf8.ValidString(s) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && n == 1 {
			b.WriteString(`\x`)
			b.WriteString(strconv.FormatUint(uint64(s[i])>>4, 16))
			b.WriteString(strconv.FormatUint(uint64(s[i])&15, 16))
		} else {
			b.WriteString(s[i : i+n])
		}
		i += n
	}
	return b.String()
}
