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
