package geometry

import (
	"errors"
	"fmt"
	"math"
	"math/big"
	"strconv"
	"strings"
)

// ErrInvalidSize is matched (with errors.Is) by every ParseSize error.
var ErrInvalidSize = errors.New("geometry: invalid size")

// unitBytes returns the multiplier of a lower-cased unit suffix. Following
// upstream Mooncake (MOONCAKE_GLOBAL_SEGMENT_SIZE="4gb" means 4*1024^3
// bytes), the decimal-looking units are binary too.
func unitBytes(unit string) (int64, bool) {
	switch unit {
	case "", "b":
		return 1, true
	case "k", "kb", "kib":
		return 1 << 10, true
	case "m", "mb", "mib":
		return 1 << 20, true
	case "g", "gb", "gib":
		return 1 << 30, true
	case "t", "tb", "tib":
		return 1 << 40, true
	}
	return 0, false
}

// ParseSize parses a byte count: a non-negative decimal number (digits with
// at most one '.'), optional spaces, and an optional unit among b, k, kb,
// kib, m, mb, mib, g, gb, gib, t, tb, tib, matched case-insensitively.
// Every unit is a power of 1024, as in upstream Mooncake's size settings:
// "4gb", "4GB" and "4GiB" all mean 4*1024^3 bytes, "16KB" means 16384, and
// a bare number is bytes. A fractional result is truncated to whole bytes
// ("1.5GB" is 1610612736, "0.5b" is 0). Leading and trailing spaces are
// ignored, so FormatSize's output parses back (to within its rounding).
//
// The error matches ErrInvalidSize and quotes s: for an empty string, a
// malformed number, a negative sign, an unknown unit, or a value over
// math.MaxInt64 bytes.
func ParseSize(s string) (int64, error) {
	t := strings.TrimSpace(s)
	i := 0
	dots := 0
	for i < len(t) && (t[i] >= '0' && t[i] <= '9' || t[i] == '.') {
		if t[i] == '.' {
			dots++
		}
		i++
	}
	num, unit := t[:i], strings.ToLower(strings.TrimSpace(t[i:]))
	switch {
	case t == "":
		return 0, fmt.Errorf("%w %q: empty", ErrInvalidSize, s)
	case strings.HasPrefix(t, "-"):
		return 0, fmt.Errorf("%w %q: negative", ErrInvalidSize, s)
	case num == "" || num == "." || dots > 1:
		return 0, fmt.Errorf("%w %q: want a number followed by an optional unit", ErrInvalidSize, s)
	}
	mult, ok := unitBytes(unit)
	if !ok {
		return 0, fmt.Errorf("%w %q: unknown unit %q (want B, K, KB, KiB, M, MB, MiB, G, GB, GiB, T, TB or TiB)", ErrInvalidSize, s, strings.TrimSpace(t[i:]))
	}
	if dots == 0 {
		v, err := strconv.ParseInt(num, 10, 64)
		if err == nil && v <= math.MaxInt64/mult {
			return v * mult, nil
		}
		return 0, fmt.Errorf("%w %q: over %d bytes", ErrInvalidSize, s, int64(math.MaxInt64))
	}
	// Exact decimal arithmetic, so "1.1GB" truncates the true product.
	r, ok := new(big.Rat).SetString(num)
	if !ok {
		return 0, fmt.Errorf("%w %q: want a number followed by an optional unit", ErrInvalidSize, s)
	}
	r.Mul(r, new(big.Rat).SetInt64(mult))
	v := new(big.Int).Quo(r.Num(), r.Denom())
	if !v.IsInt64() {
		return 0, fmt.Errorf("%w %q: over %d bytes", ErrInvalidSize, s, int64(math.MaxInt64))
	}
	return v.Int64(), nil
}

// FormatSize formats n bytes for people, in the largest binary unit not
// above it, with one decimal: "512.0 MiB", "1.5 GiB", "320.0 KiB". Counts
// under 1 KiB are printed exactly ("0 B", "1023 B"); a negative n is
// printed with a leading '-'.
func FormatSize(n int64) string {
	// Each unit is 1024 times the previous.
	binaryUnits := [...]string{"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"}
	neg := n < 0
	u := uint64(n)
	if neg {
		u = -u // math.MinInt64 maps to 2^63
	}
	sign := ""
	if neg {
		sign = "-"
	}
	if u < 1024 {
		return fmt.Sprintf("%s%d B", sign, u)
	}
	unit := 0
	for unit+1 < len(binaryUnits) && u >= 1<<(10*(unit+1)) {
		unit++
	}
	v := float64(u) / float64(uint64(1)<<(10*unit))
	// Rounding to one decimal may reach 1024 of this unit: move up.
	if v >= 1023.95 && unit+1 < len(binaryUnits) {
		unit++
		v /= 1024
	}
	return fmt.Sprintf("%s%.1f %s", sign, v, binaryUnits[unit])
}
