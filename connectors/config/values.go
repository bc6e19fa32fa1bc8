package config

import (
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/mooncake-go/mooncake/core/kvpool/geometry"
)

// maxInt64Float is 2^63, the first float64 that does not fit an int64.
const maxInt64Float = 9223372036854775808.0

// ParseSize parses a size setting the way the upstream integrations do,
// accepting the union of their forms:
//
//   - a bare number of bytes: "3355443200", " 4096 ";
//   - a number with a binary unit, case-insensitive, spaces allowed: "4gb",
//     "4 GB", "4GiB", "4g", "512MB", "16kb", "1.5gb", "2tb", "100b" - every
//     unit is a power of 1024, as in Mooncake's mooncake_config.py, vLLM's
//     _parse_size and SGLang's _parse_global_segment_size ("4gb" is
//     4*1024^3 bytes in all three);
//   - an exponent, which Python's float() (and so Mooncake's parser) takes:
//     "1e9", "1.5e3mb".
//
// A fractional result is truncated toward zero, as Python's int(float(x))
// does. It is geometry.ParseSize plus the exponent form; the error wraps
// ErrBadValue and, for the forms geometry rejects, geometry.ErrInvalidSize.
func ParseSize(s string) (int64, error) {
	n, err := geometry.ParseSize(s)
	if err == nil {
		return n, nil
	}
	if n, ok := parseExponentSize(s); ok {
		return n, nil
	}
	return 0, fmt.Errorf("%w: %w", ErrBadValue, err)
}

// parseExponentSize handles "1e9" and "1.5e3gb", which geometry.ParseSize
// rejects and Python's float() accepts.
func parseExponentSize(s string) (int64, bool) {
	t := strings.ToLower(strings.TrimSpace(s))
	i := len(t)
	for i > 0 && t[i-1] >= 'a' && t[i-1] <= 'z' {
		i--
	}
	num, unit := strings.TrimSpace(t[:i]), t[i:]
	if !strings.Contains(num, "e") {
		return 0, false
	}
	mult, err := geometry.ParseSize("1" + unit)
	if err != nil {
		return 0, false
	}
	f, err := strconv.ParseFloat(num, 64)
	if err != nil || math.IsNaN(f) || math.IsInf(f, 0) || f < 0 {
		return 0, false
	}
	p := f * float64(mult)
	if p >= maxInt64Float {
		return 0, false
	}
	return int64(p), true
}

// sizeOf converts a JSON value (json.Number or string) to bytes. A JSON
// number may be negative (Validate rejects it) or fractional (truncated, as
// Python's int() does).
func sizeOf(raw any) (int64, error) {
	switch v := raw.(type) {
	case json.Number:
		return numberToInt64(v)
	case string:
		return ParseSize(v)
	}
	return 0, fmt.Errorf("%w: want a number of bytes or a size string such as \"4gb\", got %s", ErrBadValue, describe(raw))
}

func numberToInt64(n json.Number) (int64, error) {
	if i, err := n.Int64(); err == nil {
		return i, nil
	}
	f, err := n.Float64()
	if err != nil || math.IsNaN(f) || math.IsInf(f, 0) || f >= maxInt64Float || f < -maxInt64Float {
		return 0, fmt.Errorf("%w: number %s does not fit in 64 bits", ErrBadValue, n)
	}
	return int64(f), nil
}

// boolOf reads a boolean from a JSON bool, a number (non-zero is true) or a
// string in the union of the upstream spellings: true/1/yes/y/on and
// false/0/no/n/off (Mooncake's _parse_bool and SGLang's EnvBool); the empty
// string is false.
func boolOf(raw any) (bool, error) {
	switch v := raw.(type) {
	case bool:
		return v, nil
	case json.Number:
		f, err := v.Float64()
		if err != nil {
			return false, fmt.Errorf("%w: bad number %s", ErrBadValue, v)
		}
		return f != 0, nil
	case string:
		return parseBool(v)
	}
	return false, fmt.Errorf("%w: want a boolean, got %s", ErrBadValue, describe(raw))
}

func parseBool(s string) (bool, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "true", "1", "yes", "y", "on":
		return true, nil
	case "false", "0", "no", "n", "off", "":
		return false, nil
	}
	return false, fmt.Errorf("%w: %q is not a boolean (want true/false, 1/0, yes/no, on/off)", ErrBadValue, s)
}

// pyTruthy is Python's bool(x) for a JSON value: what an integration that
// passes the raw value to an if statement sees.
func pyTruthy(raw any) bool {
	switch v := raw.(type) {
	case bool:
		return v
	case json.Number:
		f, err := v.Float64()
		return err != nil || f != 0
	case string:
		return v != ""
	}
	return raw != nil
}

// intOf reads an integer from a JSON number or a decimal string.
func intOf(raw any) (int, error) {
	var s string
	switch v := raw.(type) {
	case json.Number:
		s = v.String()
	case string:
		s = strings.TrimSpace(v)
	default:
		return 0, fmt.Errorf("%w: want an integer, got %s", ErrBadValue, describe(raw))
	}
	n, err := strconv.Atoi(s)
	if err != nil {
		return 0, fmt.Errorf("%w: %q is not an integer", ErrBadValue, s)
	}
	return n, nil
}

// secondsOf reads a duration given in seconds (LMCache's transfer_timeout):
// a JSON number or a decimal string, fractions allowed.
func secondsOf(raw any) (time.Duration, error) {
	var s string
	switch v := raw.(type) {
	case json.Number:
		s = v.String()
	case string:
		s = strings.TrimSpace(v)
	default:
		return 0, fmt.Errorf("%w: want a number of seconds, got %s", ErrBadValue, describe(raw))
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || math.IsNaN(f) || math.IsInf(f, 0) || math.Abs(f) > float64(math.MaxInt64)/float64(time.Second) {
		return 0, fmt.Errorf("%w: %q is not a number of seconds", ErrBadValue, s)
	}
	// Rounded to the nearest nanosecond: truncating would turn the seconds
	// Config.MarshalJSON writes back into a duration a nanosecond short.
	return time.Duration(math.Round(f * float64(time.Second))), nil
}

func stringOf(raw any) (string, error) {
	if s, ok := raw.(string); ok {
		return s, nil
	}
	return "", fmt.Errorf("%w: want a string, got %s", ErrBadValue, describe(raw))
}

// describe names a JSON value's type for error messages.
func describe(raw any) string {
	switch v := raw.(type) {
	case nil:
		return "null"
	case bool:
		return fmt.Sprintf("boolean %t", v)
	case json.Number:
		return "number " + v.String()
	case string:
		return strconv.Quote(v)
	case []any:
		return "an array"
	case map[string]any:
		return "an object"
	}
	return fmt.Sprintf("%T", raw)
}
