package geometry

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

func TestBytesPerToken(t *testing.T) {
	tests := []struct {
		name string
		want int64
	}{
		{"llama3-8b", 131072},
		{"llama3-70b", 327680}, // the FAST'25 paper's 320 KB/token
		{"qwen2.5-7b", 57344},
		{"deepseek-v3", 70272},
		{"test-tiny", 32},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, err := Lookup(tt.name)
			if err != nil {
				t.Fatal(err)
			}
			if m.Name != tt.name {
				t.Errorf("Name = %q", m.Name)
			}
			if got := m.BytesPerToken(); got != tt.want {
				t.Errorf("BytesPerToken() = %d, want %d", got, tt.want)
			}
		})
	}
}

func TestBytesPerTokenFormula(t *testing.T) {
	tests := []struct {
		name string
		m    Model
		want int64
	}{
		{"zero", Model{}, 0},
		{"gqa fp8", Model{Layers: 10, KVHeads: 2, HeadDim: 64, DTypeBytes: 1}, 2 * 10 * 2 * 64},
		{"mla ignores heads", Model{Layers: 3, KVHeads: 99, HeadDim: 99, DTypeBytes: 2, MLA: true, MLADim: 576}, 3 * 576 * 2},
		{"no int overflow", Model{Layers: 1 << 20, KVHeads: 1 << 10, HeadDim: 1 << 10, DTypeBytes: 4}, 1 << 43},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.m.BytesPerToken(); got != tt.want {
				t.Errorf("BytesPerToken() = %d, want %d", got, tt.want)
			}
		})
	}
}

func TestLookup(t *testing.T) {
	tests := []struct {
		in      string
		want    string // model name, or "" for an error
		errPart string
	}{
		{"llama3-70b", "llama3-70b", ""},
		{"  Llama3-70B ", "llama3-70b", ""},
		{"DeepSeek-V3", "deepseek-v3", ""},
		{"llama3", "", `geometry: unknown model "llama3" (known: deepseek-v3, llama3-70b, llama3-8b, qwen2.5-7b, test-tiny)`},
		{"", "", `unknown model ""`},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			m, err := Lookup(tt.in)
			if tt.want != "" {
				if err != nil || m.Name != tt.want {
					t.Fatalf("Lookup(%q) = %+v, %v; want %s", tt.in, m, err, tt.want)
				}
				return
			}
			if !errors.Is(err, ErrUnknownModel) || !strings.Contains(err.Error(), tt.errPart) {
				t.Fatalf("Lookup(%q) error = %v, want %q matching ErrUnknownModel", tt.in, err, tt.errPart)
			}
		})
	}
}

func TestNames(t *testing.T) {
	want := []string{"deepseek-v3", "llama3-70b", "llama3-8b", "qwen2.5-7b", "test-tiny"}
	got := Names()
	if !slices.Equal(got, want) {
		t.Fatalf("Names() = %v, want %v", got, want)
	}
	got[0] = "changed"
	if Names()[0] != want[0] {
		t.Fatal("Names() shares its slice")
	}
	for _, n := range want {
		if _, err := Lookup(n); err != nil {
			t.Errorf("Lookup(%q): %v", n, err)
		}
	}
}

func TestParseSize(t *testing.T) {
	tests := []struct {
		in      string
		want    int64
		errPart string // non-empty: want an error containing it
	}{
		{"1024", 1024, ""},
		{"0", 0, ""},
		{"512MiB", 512 << 20, ""},
		{"4GiB", 4 << 30, ""},
		{"1.5GB", 3 << 29, ""},
		{"4gb", 4 << 30, ""},
		{"4GB", 4 << 30, ""},
		{"64KiB", 64 << 10, ""},
		{"16KB", 16 << 10, ""},
		{"16kb", 16 << 10, ""},
		{"2m", 2 << 20, ""},
		{"1T", 1 << 40, ""},
		{"3tib", 3 << 40, ""},
		{"100b", 100, ""},
		{"100B", 100, ""},
		{" 512.0 MiB ", 512 << 20, ""},
		{"1.1GB", 1181116006, ""}, // 1181116006.4 truncated
		{"0.5b", 0, ""},
		{".5KiB", 512, ""},
		{"1.KiB", 1024, ""},
		{"8589934591GiB", 8589934591 << 30, ""},
		{"9223372036854775807", 1<<63 - 1, ""},
		{"", 0, `geometry: invalid size "": empty`},
		{"   ", 0, `invalid size "   ": empty`},
		{"-1GB", 0, `invalid size "-1GB": negative`},
		{"GB", 0, `invalid size "GB": want a number followed by an optional unit`},
		{"+1", 0, `invalid size "+1": want a number`},
		{".", 0, `invalid size ".": want a number`},
		{"1.2.3MB", 0, `invalid size "1.2.3MB": want a number`},
		{"4 gigs", 0, `invalid size "4 gigs": unknown unit "gigs"`},
		{"1e9", 0, `unknown unit "e9"`},
		{"1 024", 0, `unknown unit "024"`},
		{"8589934592GiB", 0, `invalid size "8589934592GiB": over 9223372036854775807 bytes`},
		{"9223372036854775808", 0, "over 9223372036854775807 bytes"},
		{"8589934592.0GiB", 0, "over 9223372036854775807 bytes"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := ParseSize(tt.in)
			if tt.errPart != "" {
				if !errors.Is(err, ErrInvalidSize) || !strings.Contains(err.Error(), tt.errPart) {
					t.Fatalf("ParseSize(%q) = %d, %v; want error containing %q", tt.in, got, err, tt.errPart)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("ParseSize(%q) = %d, %v; want %d", tt.in, got, err, tt.want)
			}
		})
	}
}

func TestFormatSize(t *testing.T) {
	tests := []struct {
		n    int64
		want string
	}{
		{0, "0 B"},
		{1, "1 B"},
		{1023, "1023 B"},
		{1024, "1.0 KiB"},
		{1536, "1.5 KiB"},
		{327680, "320.0 KiB"},
		{512 << 20, "512.0 MiB"},
		{160 << 20, "160.0 MiB"},
		{3 << 29, "1.5 GiB"},
		{1<<20 - 1, "1.0 MiB"}, // 1023.999 KiB rounds up a unit
		{1<<20 - 60, "1023.9 KiB"},
		{4 << 40, "4.0 TiB"},
		{1<<63 - 1, "8.0 EiB"},
		{-2048, "-2.0 KiB"},
		{-5, "-5 B"},
		{-1 << 63, "-8.0 EiB"},
	}
	for _, tt := range tests {
		t.Run(tt.want, func(t *testing.T) {
			got := FormatSize(tt.n)
			if got != tt.want {
				t.Fatalf("FormatSize(%d) = %q, want %q", tt.n, got, tt.want)
			}
			if tt.n >= 0 && tt.n < 1<<40 {
				back, err := ParseSize(got)
				if err != nil {
					t.Fatalf("ParseSize(%q): %v", got, err)
				}
				if d := back - tt.n; d > tt.n/200+1 || -d > tt.n/200+1 {
					t.Fatalf("ParseSize(%q) = %d, far from %d", got, back, tt.n)
				}
			}
		})
	}
}
