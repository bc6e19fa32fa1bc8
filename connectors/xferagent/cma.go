package xferagent

import (
	"bytes"
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/mooncake-go/mooncake/core/memory"
	"github.com/mooncake-go/mooncake/core/transfer"
)

// Same-host transfers by cross-memory attach (CMA: process_vm_writev /
// process_vm_readv), as UCX's cma transport: one copy from the initiator's
// registered memory straight into the target process's, no socket. It is
// used only towards a peer that proved it is the process its connection
// info names: the connection info carries the peer's pid and the address
// of a 16-byte random cookie in its memory, and the initiator reads that
// address in that pid and compares, so a pid of another pid namespace, a
// recycled pid or a peer on another host never matches and the transfer
// goes over tcp. The initiator checks every remote range against the
// registration the target published (as for tcp); the kernel allows CMA
// only towards processes the caller may ptrace (same user, no Yama
// restriction), and where it does not the check fails and tcp is used.

// cmaCookieLen is the size of a cookie in bytes.
const cmaCookieLen = 16

// The CMA table an engine keeps in its memory at the address its
// connection info names, read by initiators before every post: the cookie,
// a generation (odd while the engine updates the table), the number of
// entries, then up to cmaMaxRegions registered DRAM ranges (u64 address,
// u64 length), little endian. A range not in it (a registration beyond the
// first cmaMaxRegions, or one deregistered since the initiator loaded its
// metadata) is not reached by CMA: the post goes over tcp, whose target
// checks every range itself. A closed engine zeroes its cookie.
const (
	cmaMaxRegions = 256
	cmaGenOff     = cmaCookieLen
	cmaCountOff   = cmaGenOff + 8
	cmaEntriesOff = cmaCountOff + 8
	cmaTableLen   = cmaEntriesOff + 16*cmaMaxRegions
)

// cmaState is what an engine knows of CMA towards one peer.
type cmaState int8

const (
	cmaUnknown cmaState = iota // not checked yet
	cmaYes                     // the cookie matched: CMA works
	cmaNo                      // no CMA info, another process, or not permitted
)

// cmaInfo is the CMA part of a connection info: the peer's pid and the
// address and value of its cookie.
type cmaInfo struct {
	pid    int
	addr   uint64
	cookie [cmaCookieLen]byte
}

// newCookie returns this process's CMA info with a fresh random cookie at
// the start of table (cmaTableLen bytes that the engine keeps; Go's heap
// does not move objects, so the address stays valid while it does).
func newCookie(table []byte) (*cmaInfo, error) {
	buf := table[:cmaCookieLen]
	if _, err := rand.Read(buf); err != nil {
		return nil, err
	}
	c := &cmaInfo{pid: os.Getpid(), addr: memory.AddrOf(buf)}
	copy(c.cookie[:], buf)
	return c, nil
}

// format is "|cma=<pid>:<addr hex>:<cookie hex>" for c.
func (c cmaInfo) format() string {
	return fmt.Sprintf("|cma=%d:%x:%x", c.pid, c.addr, c.cookie[:])
}

// parseCMA parses format's output (the part after "|cma="). Errors:
// ErrMismatch.
func parseCMA(s string) (cmaInfo, error) {
	var c cmaInfo
	f := strings.Split(s, ":")
	if len(f) != 3 {
		return c, fmt.Errorf("%w: cma field %q is not pid:addr:cookie", ErrMismatch, s)
	}
	pid, err := strconv.Atoi(f[0])
	if err != nil || pid <= 0 {
		return c, fmt.Errorf("%w: cma pid %q", ErrMismatch, f[0])
	}
	addr, err := strconv.ParseUint(f[1], 16, 64)
	if err != nil || addr == 0 {
		return c, fmt.Errorf("%w: cma cookie address %q", ErrMismatch, f[1])
	}
	if len(f[2]) != 2*cmaCookieLen {
		return c, fmt.Errorf("%w: cma cookie %q is not %d hex bytes", ErrMismatch, f[2], cmaCookieLen)
	}
	for i := range c.cookie {
		b, err := strconv.ParseUint(f[2][2*i:2*i+2], 16, 8)
		if err != nil {
			return c, fmt.Errorf("%w: cma cookie %q is not hex", ErrMismatch, f[2])
		}
		c.cookie[i] = byte(b)
	}
	c.pid, c.addr = pid, addr
	return c, nil
}

// writeTable stores regs (at most cmaMaxRegions of them) in table as a
// new generation. The caller serialises writers.
func writeTable(table []byte, regs [][2]uint64) {
	gen := binary.LittleEndian.Uint64(table[cmaGenOff:])
	binary.LittleEndian.PutUint64(table[cmaGenOff:], gen+1) // odd: updating
	n := min(len(regs), cmaMaxRegions)
	binary.LittleEndian.PutUint64(table[cmaCountOff:], uint64(n))
	for i, r := range regs[:n] {
		binary.LittleEndian.PutUint64(table[cmaEntriesOff+16*i:], r[0])
		binary.LittleEndian.PutUint64(table[cmaEntriesOff+16*i+8:], r[1])
	}
	binary.LittleEndian.PutUint64(table[cmaGenOff:], gen+2)
}

// readRemote reads len(dst) bytes at addr of process pid.
func readRemote(pid int, addr uint64, dst []byte) bool {
	n, err := unix.ProcessVMReadv(pid, []unix.Iovec{{Base: &dst[0], Len: uint64(len(dst))}},
		[]unix.RemoteIovec{{Base: uintptr(addr), Len: len(dst)}}, 0)
	return err == nil && n == len(dst)
}

// cmaCheck reads the cookie of c in c.pid and reports whether it matched:
// whether the process c names is the engine that published c, and CMA
// towards it is permitted.
func cmaCheck(c *cmaInfo) bool {
	if c == nil {
		return false
	}
	var got [cmaCookieLen]byte
	return readRemote(c.pid, c.addr, got[:]) && bytes.Equal(got[:], c.cookie[:])
}

// tablePool holds the buffers cmaCovers reads peers' tables into.
var tablePool = sync.Pool{New: func() any { b := make([]byte, cmaTableLen); return &b }}

// cmaCovers reads c's table (twice the generation, so a table caught
// mid-update is read again, at most three times) and reports whether the
// cookie still matches and every request's remote range lies in one of
// its entries.
func cmaCovers(c *cmaInfo, reqs []transfer.Request) bool {
	tp := tablePool.Get().(*[]byte) // one read buffer per post, reused: no 4 KiB allocation each time
	defer tablePool.Put(tp)
	table := *tp
	var gen [8]byte
	for try := 0; try < 3; try++ {
		if !readRemote(c.pid, c.addr, table) || !bytes.Equal(table[:cmaCookieLen], c.cookie[:]) {
			return false
		}
		g := binary.LittleEndian.Uint64(table[cmaGenOff:])
		if g%2 == 1 || !readRemote(c.pid, c.addr+cmaGenOff, gen[:]) || binary.LittleEndian.Uint64(gen[:]) != g {
			continue
		}
		n := min(binary.LittleEndian.Uint64(table[cmaCountOff:]), cmaMaxRegions)
		for _, r := range reqs {
			found := false
			for i := uint64(0); i < n && !found; i++ {
				a := binary.LittleEndian.Uint64(table[cmaEntriesOff+16*i:])
				l := binary.LittleEndian.Uint64(table[cmaEntriesOff+16*i+8:])
				found = within(r.TargetOffset, r.Length, a, l)
			}
			if !found {
				return false
			}
		}
		return true
	}
	return false
}

// cmaMaxIov bounds the iovecs of one system call (the kernel's IOV_MAX).
const cmaMaxIov = 1024

// cmaCopy moves every request of reqs (Op, local bytes from local, remote
// address TargetOffset, Length) between this process and pid with
// process_vm_writev (Write) or process_vm_readv (Read), batching up to
// cmaMaxIov requests a call and resuming after short transfers. local
// resolves a request's local bytes. Errors: ErrRemoteDisconnect when the
// peer process is gone (ESRCH); the system call's error otherwise.
func cmaCopy(pid int, op transfer.Opcode, reqs []transfer.Request, local func(transfer.Request) ([]byte, error)) error {
	for start := 0; start < len(reqs); start += cmaMaxIov {
		part := reqs[start:min(len(reqs), start+cmaMaxIov)]
		bufs := make([][]byte, len(part))
		rv := make([]unix.RemoteIovec, len(part))
		want := 0
		for i, r := range part {
			b, err := local(r)
			if err != nil {
				return err
			}
			bufs[i], rv[i] = b, unix.RemoteIovec{Base: uintptr(r.TargetOffset), Len: len(b)}
			want += len(b)
		}
		for want > 0 {
			lv := make([]unix.Iovec, len(bufs))
			for i, b := range bufs {
				lv[i] = unix.Iovec{Base: &b[0]}
				lv[i].SetLen(len(b))
			}
			var n int
			var err error
			if op == transfer.Write {
				n, err = unix.ProcessVMWritev(pid, lv, rv, 0)
			} else {
				n, err = unix.ProcessVMReadv(pid, lv, rv, 0)
			}
			if err == unix.ESRCH {
				return fmt.Errorf("%w: peer process %d is gone", ErrRemoteDisconnect, pid)
			}
			if err != nil {
				return fmt.Errorf("agent: cma %v with process %d: %w", op, pid, os.NewSyscallError("process_vm_"+strings.ToLower(op.String())+"v", err))
			}
			if n <= 0 {
				return fmt.Errorf("agent: cma %v with process %d moved nothing", op, pid)
			}
			want -= n
			bufs, rv = advance(bufs, rv, n)
		}
	}
	return nil
}

// advance drops the first n bytes of both lists (which describe the same
// byte counts pairwise) after a short transfer.
func advance(bufs [][]byte, rv []unix.RemoteIovec, n int) ([][]byte, []unix.RemoteIovec) {
	for n > 0 && len(bufs) > 0 {
		if l := len(bufs[0]); n < l {
			bufs[0] = bufs[0][n:]
			rv[0].Base += uintptr(n)
			rv[0].Len -= n
			return bufs, rv
		}
		n -= len(bufs[0])
		bufs, rv = bufs[1:], rv[1:]
	}
	return bufs, rv
}
