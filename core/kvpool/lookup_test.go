package kvpool

import (
	"context"
	"errors"
	"strings"
	"testing"
)

// memExister is an in-memory Exister: a set of keys, counting calls, with
// an optional injected error or a reply of the wrong length.
type memExister struct {
	keys  map[string]bool
	calls int
	err   error
	short bool
}

func (m *memExister) BatchIsExist(ctx context.Context, keys []string) ([]bool, error) {
	m.calls++
	if m.err != nil {
		return nil, m.err
	}
	out := make([]bool, len(keys))
	for i, k := range keys {
		out[i] = m.keys[k]
	}
	if m.short {
		out = out[:len(out)-1]
	}
	return out, nil
}

func TestLongestPrefix(t *testing.T) {
	set := func(ks ...string) map[string]bool {
		m := map[string]bool{}
		for _, k := range ks {
			m[k] = true
		}
		return m
	}
	tests := []struct {
		name    string
		present map[string]bool
		keys    []string
		want    int
		calls   int
	}{
		{"no keys, no call", set("a"), nil, 0, 0},
		{"all hit", set("a", "b", "c"), []string{"a", "b", "c"}, 3, 1},
		{"first misses", set("b", "c"), []string{"a", "b", "c"}, 0, 1},
		{"stops at first miss", set("a", "b", "d"), []string{"a", "b", "c", "d"}, 2, 1},
		{"none", set(), []string{"a"}, 0, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ex := &memExister{keys: tt.present}
			got, err := LongestPrefix(t.Context(), ex, tt.keys)
			if err != nil || got != tt.want || ex.calls != tt.calls {
				t.Fatalf("LongestPrefix = %d, %v after %d calls; want %d after %d", got, err, ex.calls, tt.want, tt.calls)
			}
		})
	}
}

func TestLongestPrefixErrors(t *testing.T) {
	cause := errors.New("rpc down")
	_, err := LongestPrefix(t.Context(), &memExister{err: cause}, []string{"k1", "k2"})
	if !errors.Is(err, cause) || !strings.Contains(err.Error(), `2 keys from "k1"`) {
		t.Fatalf("error = %v, want it to wrap the cause and name the keys", err)
	}
	_, err = LongestPrefix(t.Context(), &memExister{keys: map[string]bool{}, short: true}, []string{"k1", "k2"})
	if err == nil || !strings.Contains(err.Error(), "answered 1") {
		t.Fatalf("short reply: error = %v", err)
	}
}
