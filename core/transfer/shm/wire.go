package shm

import (
	"encoding/binary"
	"fmt"

	"golang.org/x/sys/unix"
)

// Wire format: see the package doc.
const (
	magic   = 0x4D435348 // "MCSH"
	version = 1
	opFD    = 1
	msgLen  = 32

	statusOK            = 0 // one descriptor attached
	statusNotRegistered = 1 // range not inside one remote-accessible buffer
	statusNotShared     = 2 // buffer not backed by a memory file
	statusRefused       = 3 // memory file failed the sharing checks (size, seals)

	// targetSeals must be on a file before the target hands it out: the
	// peer can then never resize it under the target's mapping.
	targetSeals = unix.F_SEAL_SHRINK | unix.F_SEAL_GROW
	// peerSeals must be on a file before a peer maps it: the target can
	// then never shrink it under the peer's mapping.
	peerSeals = unix.F_SEAL_SHRINK
)

type request struct {
	id, addr, length uint64
}

func (r request) encode(b *[msgLen]byte) {
	binary.LittleEndian.PutUint32(b[0:], magic)
	b[4] = version
	b[5] = opFD
	b[6], b[7] = 0, 0
	binary.LittleEndian.PutUint64(b[8:], r.id)
	binary.LittleEndian.PutUint64(b[16:], r.addr)
	binary.LittleEndian.PutUint64(b[24:], r.length)
}

func decodeRequest(b []byte) (request, error) {
	if len(b) != msgLen {
		return request{}, fmt.Errorf("%w: request of %d bytes, want %d", ErrProtocol, len(b), msgLen)
	}
	if m := binary.LittleEndian.Uint32(b[0:]); m != magic {
		return request{}, fmt.Errorf("%w: request magic %#x", ErrProtocol, m)
	}
	if b[4] != version || b[5] != opFD {
		return request{}, fmt.Errorf("%w: request version %d op %d", ErrProtocol, b[4], b[5])
	}
	return request{
		id:     binary.LittleEndian.Uint64(b[8:]),
		addr:   binary.LittleEndian.Uint64(b[16:]),
		length: binary.LittleEndian.Uint64(b[24:]),
	}, nil
}

type response struct {
	status     uint32
	id         uint64
	base, size uint64
	fd         int // received descriptor (statusOK), else -1; owned by whoever holds the response
}

func (r response) encode(b *[msgLen]byte) {
	binary.LittleEndian.PutUint32(b[0:], magic)
	binary.LittleEndian.PutUint32(b[4:], r.status)
	binary.LittleEndian.PutUint64(b[8:], r.id)
	binary.LittleEndian.PutUint64(b[16:], r.base)
	binary.LittleEndian.PutUint64(b[24:], r.size)
}

func decodeResponse(b []byte) (response, error) {
	if len(b) != msgLen {
		return response{}, fmt.Errorf("%w: response of %d bytes, want %d", ErrProtocol, len(b), msgLen)
	}
	if m := binary.LittleEndian.Uint32(b[0:]); m != magic {
		return response{}, fmt.Errorf("%w: response magic %#x", ErrProtocol, m)
	}
	return response{
		status: binary.LittleEndian.Uint32(b[4:]),
		id:     binary.LittleEndian.Uint64(b[8:]),
		base:   binary.LittleEndian.Uint64(b[16:]),
		size:   binary.LittleEndian.Uint64(b[24:]),
		fd:     -1,
	}, nil
}

// receivedFDs returns every descriptor carried by SCM_RIGHTS messages in
// oob; the caller owns (and must close) them.
func receivedFDs(oob []byte) []int {
	if len(oob) == 0 {
		return nil
	}
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return nil
	}
	var fds []int
	for i := range msgs {
		if msgs[i].Header.Level != unix.SOL_SOCKET || msgs[i].Header.Type != unix.SCM_RIGHTS {
			continue
		}
		got, err := unix.ParseUnixRights(&msgs[i])
		if err == nil {
			fds = append(fds, got...)
		}
	}
	return fds
}

func closeFDs(fds []int) {
	for _, fd := range fds {
		unix.Close(fd)
	}
}

// sealedFile reports whether fd is a file of exactly size bytes carrying
// every seal in seals.
func sealedFile(fd int, size uint64, seals int) error {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return fmt.Errorf("fstat: %w", err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG || st.Size < 0 || uint64(st.Size) != size {
		return fmt.Errorf("file of %d bytes (mode %#o), buffer of %d", st.Size, st.Mode, size)
	}
	got, err := unix.FcntlInt(uintptr(fd), unix.F_GET_SEALS, 0)
	if err != nil {
		return fmt.Errorf("file cannot be sealed: %w", err)
	}
	if got&seals != seals {
		return fmt.Errorf("file seals %#x lack %#x", got, seals&^got)
	}
	return nil
}
