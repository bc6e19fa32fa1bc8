package p2pmeta_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"runtime"
	"strings"
	"testing"

	"github.com/mooncake-go/mooncake/core/metadata/p2pmeta"
)

func TestFrameRoundTrip(t *testing.T) {
	big := []byte(`"` + strings.Repeat("x", p2pmeta.DefaultMaxFrame-3) + `"`) // type byte + payload = limit
	cases := []struct {
		name    string
		typ     p2pmeta.FrameType
		payload []byte
	}{
		{"connection", p2pmeta.FrameConnection, []byte(`{"local_nic_path":"a@mlx5_0","qp_num":[1,2]}`)},
		{"metadata", p2pmeta.FrameMetadata, []byte(`{"name":"127.0.0.1:15001","protocol":"tcp","buffers":[]}`)},
		{"notify", p2pmeta.FrameNotify, []byte(`{"name":"a","notify_msg":"hi"}`)},
		{"probe", p2pmeta.FrameProbe, []byte(`{}`)},
		{"empty payload", p2pmeta.FrameProbe, nil},
		{"legacy", p2pmeta.FrameLegacy, []byte(`{"name":"segment"}`)},
		{"at the limit", p2pmeta.FrameMetadata, big},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var buf bytes.Buffer
			if err := p2pmeta.WriteFrame(&buf, c.typ, c.payload); err != nil {
				t.Fatal(err)
			}
			typ, got, err := p2pmeta.ReadFrame(&buf, p2pmeta.DefaultMaxFrame)
			if err != nil {
				t.Fatalf("ReadFrame: %v", err)
			}
			if typ != c.typ || !bytes.Equal(got, c.payload) {
				t.Fatalf("got %v %.40q, want %v %.40q", typ, got, c.typ, c.payload)
			}
			if buf.Len() != 0 {
				t.Fatalf("%d bytes left unread", buf.Len())
			}
		})
	}
}

func TestFrameLayout(t *testing.T) {
	got := p2pmeta.AppendFrame(nil, p2pmeta.FrameProbe, []byte(`{}`))
	want := []byte{3, 0, 0, 0, 0, 0, 0, 0, 3, '{', '}'}
	if !bytes.Equal(got, want) {
		t.Fatalf("probe frame = %v, want %v", got, want)
	}
	got = p2pmeta.AppendFrame(nil, p2pmeta.FrameLegacy, []byte(`{}`))
	want = []byte{2, 0, 0, 0, 0, 0, 0, 0, '{', '}'}
	if !bytes.Equal(got, want) {
		t.Fatalf("legacy frame = %v, want %v", got, want)
	}
}

// A frame written by an old peer: length = payload bytes, no type byte.
func TestFrameLegacyFromOldPeer(t *testing.T) {
	for _, p := range []string{`{"name":"segment"}`, " {}", "\n[1]", `"s"`, "12"} {
		var buf bytes.Buffer
		binary.Write(&buf, binary.LittleEndian, uint64(len(p)))
		buf.WriteString(p)
		typ, got, err := p2pmeta.ReadFrame(&buf, p2pmeta.DefaultMaxFrame)
		if err != nil || typ != p2pmeta.FrameLegacy || string(got) != p {
			t.Errorf("legacy %q: got %v %q %v", p, typ, got, err)
		}
	}
}

// header returns a frame header announcing n bytes.
func header(n uint64) []byte { return binary.LittleEndian.AppendUint64(nil, n) }

func TestFrameOversizeRejectedWithoutAllocating(t *testing.T) {
	for _, n := range []uint64{p2pmeta.DefaultMaxFrame + 1, 1 << 40, 1<<63 + 5, ^uint64(0)} {
		// Only the header arrives: allocating n bytes would panic or OOM.
		_, _, err := p2pmeta.ReadFrame(bytes.NewReader(header(n)), p2pmeta.DefaultMaxFrame)
		if !errors.Is(err, p2pmeta.ErrFrameTooLarge) {
			t.Fatalf("length %d: err = %v, want ErrFrameTooLarge", n, err)
		}
	}
	hdr := header(p2pmeta.DefaultMaxFrame + 1)
	r := bytes.NewReader(hdr)
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	const runs = 100
	for range runs {
		r.Reset(hdr)
		p2pmeta.ReadFrame(r, p2pmeta.DefaultMaxFrame)
	}
	runtime.ReadMemStats(&after)
	if per := (after.TotalAlloc - before.TotalAlloc) / runs; per > 4096 {
		t.Fatalf("rejecting an oversize frame allocated %d bytes per call", per)
	}
}

// A large frame whose body never arrives costs memory in proportion to what
// did arrive, not to what was announced.
func TestFrameLargeAnnouncedShortBody(t *testing.T) {
	in := append(header(p2pmeta.DefaultMaxFrame), 1, '{')
	_, _, err := p2pmeta.ReadFrame(bytes.NewReader(in), p2pmeta.DefaultMaxFrame)
	if !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("err = %v, want io.ErrUnexpectedEOF", err)
	}
}

func TestFrameErrors(t *testing.T) {
	cases := []struct {
		name string
		in   []byte
		want error
	}{
		{"nothing", nil, io.EOF},
		{"short header", []byte{1, 0, 0}, io.ErrUnexpectedEOF},
		{"empty frame", header(0), p2pmeta.ErrBadFrame},
		{"truncated body", append(header(10), 1, '{'), io.ErrUnexpectedEOF},
		{"unknown type", append(header(3), 7, '{', '}'), p2pmeta.ErrBadFrame},
		{"binary junk", append(header(2), 0x80, 0x81), p2pmeta.ErrBadFrame},
		{"http request", []byte("GET / HTTP/1.1\r\n\r\n"), p2pmeta.ErrFrameTooLarge},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, _, err := p2pmeta.ReadFrame(bytes.NewReader(c.in), p2pmeta.DefaultMaxFrame)
			if !errors.Is(err, c.want) {
				t.Fatalf("err = %v, want %v", err, c.want)
			}
		})
	}
}

func TestFrameTypeString(t *testing.T) {
	for typ, want := range map[p2pmeta.FrameType]string{
		p2pmeta.FrameConnection: "connection", p2pmeta.FrameMetadata: "metadata",
		p2pmeta.FrameNotify: "notify", p2pmeta.FrameProbe: "probe",
		p2pmeta.FrameLegacy: "legacy", 9: "type(9)",
	} {
		if got := typ.String(); got != want {
			t.Errorf("%d.String() = %q, want %q", uint8(typ), got, want)
		}
	}
}
