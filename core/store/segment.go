package store

import "fmt"

// SegmentKind says whether a mounted segment outlives the process of the
// client that mounted it. The master's placement puts replicas on
// SegmentStandalone segments first (master/placement.go), so that what an
// application saves survives the application.
//
// Ours: upstream Mooncake has no such kind and places on every segment
// alike. The values are those of storepb.SegmentKind; the text forms
// (String, MarshalText) are "embedded" and "standalone".
type SegmentKind uint8

const (
	// SegmentEmbedded is a segment mounted by a store client embedded in an
	// application (an inference engine loading the vLLM connector, the
	// Python or C store API): it vanishes, with every replica on it, when
	// that application exits. The zero value: a segment whose client does
	// not say is embedded, so older clients are placed on last.
	SegmentEmbedded SegmentKind = 0
	// SegmentStandalone is a segment mounted by a storage process that only
	// contributes memory (`mooncake node`); it outlives the applications
	// that write to the pool.
	SegmentStandalone SegmentKind = 1
)

// Valid reports whether k is one of the defined kinds.
func (k SegmentKind) Valid() bool { return k == SegmentEmbedded || k == SegmentStandalone }

// String returns "embedded" or "standalone", or "SegmentKind(N)" for an
// undefined value.
func (k SegmentKind) String() string {
	switch k {
	case SegmentEmbedded:
		return "embedded"
	case SegmentStandalone:
		return "standalone"
	}
	return fmt.Sprintf("SegmentKind(%d)", uint8(k))
}

// ParseSegmentKind parses "embedded" or "standalone" ("" = embedded).
// Errors: INVALID_PARAMS naming the text.
func ParseSegmentKind(s string) (SegmentKind, error) {
	switch s {
	case "", "embedded":
		return SegmentEmbedded, nil
	case "standalone":
		return SegmentStandalone, nil
	}
	return 0, Errorf(InvalidParams, "segment kind %q: want embedded or standalone", s)
}

// MarshalText implements encoding.TextMarshaler (JSON, as in the HA log).
// Errors: INVALID_PARAMS for an undefined kind.
func (k SegmentKind) MarshalText() ([]byte, error) {
	if !k.Valid() {
		return nil, Errorf(InvalidParams, "undefined segment kind %d", uint8(k))
	}
	return []byte(k.String()), nil
}

// UnmarshalText implements encoding.TextUnmarshaler; it accepts what
// ParseSegmentKind does.
func (k *SegmentKind) UnmarshalText(b []byte) error {
	v, err := ParseSegmentKind(string(b))
	if err != nil {
		return err
	}
	*k = v
	return nil
}
