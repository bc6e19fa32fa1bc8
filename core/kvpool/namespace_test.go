package kvpool

import (
	"encoding/binary"
	"errors"
	"strings"
	"testing"

	"github.com/mooncake-go/mooncake/core/testutil/leakcheck"
)

func TestMain(m *testing.M) { leakcheck.Main(m) }

func baseNS() Namespace {
	return Namespace{Model: "llama3-8b", DType: "bfloat16", Layout: "vllm-flashinfer", TPRank: 1, TPSize: 4, BlockTokens: 16}
}

func TestPrefix(t *testing.T) {
	tests := []struct {
		name string
		mod  func(*Namespace)
		want string
	}{
		{"plain", func(*Namespace) {}, "mc/v1/llama3-8b/bfloat16/vllm-flashinfer/tp1of4/pp0of1/bt16/"},
		{"mla drops the tp rank", func(n *Namespace) { n.SharedMLA = true }, "mc/v1/llama3-8b/bfloat16/vllm-flashinfer/mla/pp0of1/bt16/"},
		{"pipeline", func(n *Namespace) { n.PPRank, n.PPSize = 2, 4 }, "mc/v1/llama3-8b/bfloat16/vllm-flashinfer/tp1of4/pp2of4/bt16/"},
		{"tenant", func(n *Namespace) { n.Tenant = "acme" }, "mc/v1/llama3-8b/bfloat16/vllm-flashinfer/tp1of4/pp0of1/bt16/t=acme/"},
		{"escaped model path", func(n *Namespace) { n.Model = "/models/Qwen/Qwen3 32B@v1%" },
			"mc/v1/%2Fmodels%2FQwen%2FQwen3%2032B%40v1%25/bfloat16/vllm-flashinfer/tp1of4/pp0of1/bt16/"},
		{"escaped tenant and non-ascii", func(n *Namespace) { n.Tenant = "a/b=é" },
			"mc/v1/llama3-8b/bfloat16/vllm-flashinfer/tp1of4/pp0of1/bt16/t=a%2Fb%3D%C3%A9/"},
		{"unreserved kept", func(n *Namespace) { n.Layout = "sglang-page_first.v2~x" },
			"mc/v1/llama3-8b/bfloat16/sglang-page_first.v2~x/tp1of4/pp0of1/bt16/"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n := baseNS()
			tt.mod(&n)
			if err := n.Validate(); err != nil {
				t.Fatal(err)
			}
			if got := n.Prefix(); got != tt.want {
				t.Fatalf("Prefix() = %q\nwant       %q", got, tt.want)
			}
		})
	}
}

// TestPrefixDistinct checks that namespaces differing in any field, even
// by moving a separator between fields, get different prefixes.
func TestPrefixDistinct(t *testing.T) {
	mods := []func(*Namespace){
		func(*Namespace) {},
		func(n *Namespace) { n.Model = "llama3-8b/bfloat16"; n.DType = "x" },
		func(n *Namespace) { n.Model = "llama3-8b"; n.DType = "bfloat16/x" },
		func(n *Namespace) { n.DType = "float16" },
		func(n *Namespace) { n.Layout = "vllm-flash-attn" },
		func(n *Namespace) { n.TPRank = 0 },
		func(n *Namespace) { n.TPSize = 8 },
		func(n *Namespace) { n.SharedMLA = true },
		func(n *Namespace) { n.PPSize = 2 },
		func(n *Namespace) { n.PPSize, n.PPRank = 2, 1 },
		func(n *Namespace) { n.BlockTokens = 32 },
		func(n *Namespace) { n.Tenant = "a" },
		func(n *Namespace) { n.Tenant = "b" },
		func(n *Namespace) { n.Model = "m%2F" },
		func(n *Namespace) { n.Model = "m/" },
	}
	seen := map[string]int{}
	for i, mod := range mods {
		n := baseNS()
		mod(&n)
		p := n.Prefix()
		if j, dup := seen[p]; dup {
			t.Fatalf("namespaces %d and %d share prefix %q", j, i, p)
		}
		seen[p] = i
	}
	// PPSize 0 and 1 mean the same thing.
	a, b := baseNS(), baseNS()
	b.PPSize = 1
	if a.Prefix() != b.Prefix() {
		t.Fatalf("PPSize 0 and 1 differ: %q vs %q", a.Prefix(), b.Prefix())
	}
}

func TestValidate(t *testing.T) {
	tests := []struct {
		name string
		mod  func(*Namespace)
		want string // "" for valid
	}{
		{"ok", func(*Namespace) {}, ""},
		{"ok mla", func(n *Namespace) { n.SharedMLA = true }, ""},
		{"empty model", func(n *Namespace) { n.Model = "" }, "empty Model"},
		{"empty dtype", func(n *Namespace) { n.DType = "" }, `empty DType (model "llama3-8b")`},
		{"empty layout", func(n *Namespace) { n.Layout = "" }, "empty Layout"},
		{"tp size 0", func(n *Namespace) { n.TPSize, n.TPRank = 0, 0 }, "TPSize 0, want >= 1"},
		{"tp rank high", func(n *Namespace) { n.TPRank = 4 }, "TPRank 4 outside [0, TPSize=4)"},
		{"tp rank negative", func(n *Namespace) { n.TPRank = -1 }, "TPRank -1 outside"},
		{"pp size negative", func(n *Namespace) { n.PPSize = -2 }, "PPSize -2"},
		{"pp rank without pp", func(n *Namespace) { n.PPRank = 1 }, "PPRank 1 outside [0, PPSize=1)"},
		{"pp rank high", func(n *Namespace) { n.PPRank, n.PPSize = 2, 2 }, "PPRank 2 outside [0, PPSize=2)"},
		{"block tokens", func(n *Namespace) { n.BlockTokens = 0 }, "BlockTokens 0, want >= 1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n := baseNS()
			tt.mod(&n)
			err := n.Validate()
			if tt.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if !errors.Is(err, ErrInvalidNamespace) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Validate() = %v, want ErrInvalidNamespace containing %q", err, tt.want)
			}
		})
	}
}

func TestKeys(t *testing.T) {
	n := baseNS()
	p := n.Prefix()
	h := []byte{0x00, 0xab, 0xff, 0x10}
	if got, want := n.Key(h), p+"00abff10"; got != want {
		t.Errorf("Key = %q, want %q", got, want)
	}
	if got, want := n.LayerKey(h, 31), p+"00abff10/l31"; got != want {
		t.Errorf("LayerKey = %q, want %q", got, want)
	}
	v := uint64(0x0123456789abcdef)
	if got, want := n.KeyUint64(v), p+"0123456789abcdef"; got != want {
		t.Errorf("KeyUint64 = %q, want %q", got, want)
	}
	for _, v := range []uint64{0, 1, 0xffffffffffffffff, uint64(1) << 63} {
		if a, b := n.KeyUint64(v), n.Key(binary.BigEndian.AppendUint64(nil, v)); a != b {
			t.Errorf("KeyUint64(%#x) = %q, Key(big-endian) = %q", v, a, b)
		}
	}
	neg := int64(-1538870470363822552) // LMCache's signed builtin hashes
	if got := n.KeyUint64(uint64(neg)); !strings.HasPrefix(got, p) || len(got) != len(p)+16 {
		t.Errorf("KeyUint64(negative) = %q", got)
	}
	hs := [][]byte{{1}, {2, 3}, {0xfe}}
	keys := n.Keys(hs)
	for i, k := range keys {
		if k != n.Key(hs[i]) {
			t.Errorf("Keys[%d] = %q, want %q", i, k, n.Key(hs[i]))
		}
	}
	if len(n.Keys(nil)) != 0 {
		t.Error("Keys(nil) not empty")
	}
}

func TestKeyPanics(t *testing.T) {
	n := baseNS()
	for name, f := range map[string]func(){
		"empty hash":     func() { n.Key(nil) },
		"empty in Keys":  func() { n.Keys([][]byte{{1}, {}}) },
		"negative layer": func() { n.LayerKey([]byte{1}, -1) },
		"empty id":       func() { n.IDKey("", "/k") },
	} {
		t.Run(name, func(t *testing.T) {
			defer func() {
				if recover() == nil {
					t.Fatal("no panic")
				}
			}()
			f()
		})
	}
}

func BenchmarkKeys(b *testing.B) {
	n := baseNS()
	n.Model = "/models/meta-llama/Llama-3.1-70B-Instruct"
	hs := make([][]byte, 128)
	for i := range hs {
		hs[i] = binary.BigEndian.AppendUint64(make([]byte, 24), uint64(i))
	}
	b.ReportAllocs()
	for b.Loop() {
		_ = n.Keys(hs)
	}
}

func TestIDKey(t *testing.T) {
	n := baseNS()
	p := n.Prefix()
	for _, c := range []struct{ id, suffix, want string }{
		{"0a1b", "/k", p + "0a1b/k"},
		{"0a1b", "", p + "0a1b"},
		{"a/b c", "/v", p + "a%2Fb%20c/v"},
	} {
		if got := n.IDKey(c.id, c.suffix); got != c.want {
			t.Errorf("IDKey(%q, %q) = %q, want %q", c.id, c.suffix, got, c.want)
		}
		if got := PrefixedIDKey(p, c.id, c.suffix); got != c.want {
			t.Errorf("PrefixedIDKey(%q, %q) = %q, want %q", c.id, c.suffix, got, c.want)
		}
	}
	// A hex id gives the same key as Key of its bytes.
	if got, want := n.IDKey("00ff", ""), n.Key([]byte{0, 0xff}); got != want {
		t.Errorf("IDKey(hex) = %q, Key(bytes) = %q", got, want)
	}
}
