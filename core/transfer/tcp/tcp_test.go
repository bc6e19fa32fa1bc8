package tcp_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"strconv"
	"strings"
	"testing"

	"github.com/mooncake-go/mooncake/core/metadata"
	"github.com/mooncake-go/mooncake/core/metadata/memmeta"
	"github.com/mooncake-go/mooncake/core/transfer"
	"github.com/mooncake-go/mooncake/core/transfer/tcp"
	"github.com/mooncake-go/mooncake/core/transfer/transfertest"
)

func newTCP(t testing.TB) transfer.Transport { return tcp.New(tcp.Config{}) }
func newMeta(t testing.TB) metadata.Store    { return memmeta.New() }

func TestConformance(t *testing.T) { transfertest.Run(t, newMeta, newTCP) }

// TestRawOutOfRange speaks the wire protocol directly, bypassing the
// initiator's own checks, and proves the target refuses out-of-range reads
// and writes without touching memory, and keeps serving after a refusal.
func TestRawOutOfRange(t *testing.T) {
	p := transfertest.NewPair(t, memmeta.New(), newTCP)
	desc, err := metadata.GetSegment(p.Background, p.Meta, "", "seg-b")
	if err != nil {
		t.Fatal(err)
	}
	rpc, err := metadata.GetRPCMeta(p.Background, p.Meta, "", "seg-b")
	if err != nil {
		t.Fatal(err)
	}
	c, err := net.Dial("tcp", net.JoinHostPort(rpc.IPOrHostName, itoa(desc.TCPDataPort)))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	b := p.RB.Bytes()
	for i := range b {
		b[i] = byte(i * 7)
	}
	before := append([]byte(nil), b...)
	base := p.RB.Addr()
	send := func(op byte, addr, size uint64, payload []byte) uint64 {
		var hdr [24]byte
		binary.LittleEndian.PutUint64(hdr[0:], size)
		binary.LittleEndian.PutUint64(hdr[8:], addr)
		hdr[16] = op | 0x80
		if _, err := c.Write(append(hdr[:], payload...)); err != nil {
			t.Fatal(err)
		}
		var st [8]byte
		if _, err := io.ReadFull(c, st[:]); err != nil {
			t.Fatal(err)
		}
		return binary.LittleEndian.Uint64(st[:])
	}
	junk := bytes.Repeat([]byte{0xEE}, 300)
	cases := []struct {
		name       string
		op         byte
		addr, size uint64
	}{
		{"write straddling end", 1, base + (1 << 20) - 100, 300},
		{"write before start", 1, base - 150, 300},
		{"write far away", 1, 0x1000, 300},
		{"read past end", 0, base + (1 << 20), 300},
		{"read wrapping", 0, base + 8, ^uint64(0) - 4},
	}
	for _, cs := range cases {
		var payload []byte
		if cs.op == 1 {
			payload = junk[:cs.size]
		}
		st := send(cs.op, cs.addr, cs.size, payload)
		if st != 0x4D435456<<32|1 {
			t.Errorf("%s: status %#x, want rejection", cs.name, st)
		}
	}
	if !bytes.Equal(b, before) {
		t.Fatal("rejected raw requests changed target memory")
	}
	// The connection stays usable: an in-range write lands and is acked.
	if st := send(1, base+16, 4, []byte{1, 2, 3, 4}); st != 0x4D435456<<32 {
		t.Fatalf("in-range write status %#x", st)
	}
	if !bytes.Equal(b[16:20], []byte{1, 2, 3, 4}) {
		t.Fatal("in-range write did not land")
	}
}

func itoa(n int) string { return strconv.Itoa(n) }

// TestDuplicateNameRefused: a second engine with the name of a live one is
// refused (it would overwrite the first one's descriptor); once the first
// is gone, the name can be reused.
func TestDuplicateNameRefused(t *testing.T) {
	ctx := context.Background()
	meta := memmeta.New()
	a, err := transfer.New(ctx, transfer.Config{Name: "dup", Metadata: meta, Transport: tcp.New(tcp.Config{})})
	if err != nil {
		t.Fatal(err)
	}
	_, err = transfer.New(ctx, transfer.Config{Name: "dup", Metadata: meta, Transport: tcp.New(tcp.Config{})})
	if !errors.Is(err, transfer.ErrInvalidArgument) || !strings.Contains(err.Error(), "in use") {
		t.Fatalf("second engine named dup: %v, want a name-in-use error", err)
	}
	// A stale descriptor of a dead engine does not block the name.
	desc, _ := metadata.GetSegment(ctx, meta, "", "dup")
	rpc, _ := metadata.GetRPCMeta(ctx, meta, "", "dup")
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if err := metadata.PutSegment(ctx, meta, "", *desc); err != nil {
		t.Fatal(err)
	}
	if err := metadata.PutRPCMeta(ctx, meta, "", "dup", rpc); err != nil {
		t.Fatal(err)
	}
	b, err := transfer.New(ctx, transfer.Config{Name: "dup", Metadata: meta, Transport: tcp.New(tcp.Config{})})
	if err != nil {
		t.Fatalf("name with a stale descriptor: %v", err)
	}
	b.Close()
}

// TestRawPipelined sends several requests in one write on one connection,
// as the multiplexing client does, and checks the target answers each in
// request order: a WRITE's status, a READ's status and bytes (seeing the
// WRITE before it), a refusal in the middle, and more after it.
func TestRawPipelined(t *testing.T) {
	p := transfertest.NewPair(t, memmeta.New(), newTCP)
	desc, err := metadata.GetSegment(p.Background, p.Meta, "", "seg-b")
	if err != nil {
		t.Fatal(err)
	}
	rpc, err := metadata.GetRPCMeta(p.Background, p.Meta, "", "seg-b")
	if err != nil {
		t.Fatal(err)
	}
	c, err := net.Dial("tcp", net.JoinHostPort(rpc.IPOrHostName, itoa(desc.TCPDataPort)))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	base := p.RB.Addr()
	frame := func(op byte, addr, size uint64, payload []byte) []byte {
		var hdr [24]byte
		binary.LittleEndian.PutUint64(hdr[0:], size)
		binary.LittleEndian.PutUint64(hdr[8:], addr)
		hdr[16] = op | 0x80
		return append(hdr[:], payload...)
	}
	a := bytes.Repeat([]byte{0xA1}, 100<<10)
	b := bytes.Repeat([]byte{0xB2}, 3000)
	var req []byte
	req = append(req, frame(1, base, uint64(len(a)), a)...)               // 1: write a at 0
	req = append(req, frame(0, base, uint64(len(a)), nil)...)             // 2: read it back
	req = append(req, frame(1, base+(1<<20)-10, 300, b[:300])...)         // 3: refused write
	req = append(req, frame(1, base+200<<10, uint64(len(b)), b)...)       // 4: write b
	req = append(req, frame(0, base+200<<10-8, uint64(len(b)+8), nil)...) // 5: read around b
	errc := make(chan error, 1)
	go func() { _, err := c.Write(req); errc <- err }()
	status := func(want uint64) {
		t.Helper()
		var st [8]byte
		if _, err := io.ReadFull(c, st[:]); err != nil {
			t.Fatal(err)
		}
		if got := binary.LittleEndian.Uint64(st[:]); got != 0x4D435456<<32|want {
			t.Fatalf("status %#x, want code %d", got, want)
		}
	}
	status(0)
	status(0)
	got := make([]byte, len(a))
	if _, err := io.ReadFull(c, got); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, a) {
		t.Fatal("pipelined read did not see the write before it")
	}
	status(1)
	status(0)
	status(0)
	got = make([]byte, len(b)+8)
	if _, err := io.ReadFull(c, got); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got[8:], b) || bytes.Contains(got[:8], []byte{0xB2}) {
		t.Fatal("second pipelined read returned other bytes")
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
}
