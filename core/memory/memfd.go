package memory

import (
	"errors"
	"fmt"
	"syscall"

	"golang.org/x/sys/unix"
)

// ErrNotShared is returned by Region.DupFD for a region that has no memory
// file behind it (one made by Map).
var ErrNotShared = errors.New("memory: region is not backed by a memory file")

// sharedSeals are the seals MapShared puts on its memory file: its size can
// never change again, so no process holding the descriptor (a same-host peer
// that received it) can shrink the file under another process's mapping and
// make that process fault with SIGBUS.
const sharedSeals = unix.F_SEAL_SHRINK | unix.F_SEAL_GROW | unix.F_SEAL_SEAL

// MapShared creates a memory file (memfd, close-on-exec) of size zeroed bytes,
// seals its size (F_SEAL_SHRINK|F_SEAL_GROW|F_SEAL_SEAL) and maps all of it
// read-write, MAP_SHARED. name labels the file in /proc/<pid>/fd and
// /proc/<pid>/maps ("memfd:<name>"); it may be empty.
//
// The region owns the descriptor (FD) until Close, which unmaps and closes
// it. Another process that maps the same file (MapFD after receiving a
// duplicate over a unix socket) sees the same bytes. Errors: ErrInvalidSize
// for size <= 0; the memfd_create, ftruncate, fcntl or mmap errno otherwise,
// wrapped and naming the size (nothing is left open on error). Linux only.
func MapShared(size int, name string) (*Region, error) {
	if size <= 0 {
		return nil, fmt.Errorf("%w: %d bytes", ErrInvalidSize, size)
	}
	if name == "" {
		name = "mooncake"
	}
	fd, err := unix.MemfdCreate(name, unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		return nil, fmt.Errorf("memory: memfd_create %q for %d bytes: %w", name, size, err)
	}
	if err := unix.Ftruncate(fd, int64(size)); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("memory: size memory file %q to %d bytes: %w", name, size, err)
	}
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, sharedSeals); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("memory: seal memory file %q of %d bytes: %w", name, size, err)
	}
	return mapFile(fd, size)
}

// MapFD maps size bytes of the memory file fd (from offset 0) read-write,
// MAP_SHARED; typically fd was received from another process over a unix
// socket (SCM_RIGHTS). The region takes ownership of fd in every case: Close
// closes it, and MapFD closes it itself when it fails. Errors:
// ErrInvalidSize for size <= 0 or a file smaller than size (mapping past a
// file's end would fault on access); the fstat or mmap errno otherwise.
func MapFD(fd int, size int) (*Region, error) {
	if size <= 0 {
		unix.Close(fd)
		return nil, fmt.Errorf("%w: %d bytes", ErrInvalidSize, size)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("memory: fstat descriptor %d to map %d bytes: %w", fd, size, err)
	}
	if st.Size < int64(size) {
		unix.Close(fd)
		return nil, fmt.Errorf("%w: file of descriptor %d holds %d bytes, %d requested", ErrInvalidSize, fd, st.Size, size)
	}
	return mapFile(fd, size)
}

// mapFile maps fd MAP_SHARED and wraps it in a Region owning fd; on error it
// closes fd.
func mapFile(fd, size int) (*Region, error) {
	// syscall.Mmap, not unix.Mmap: each package tracks its own mappings and
	// Region.Close unmaps with syscall.Munmap.
	buf, err := syscall.Mmap(fd, 0, size, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED)
	if err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("memory: mmap %d shared bytes of descriptor %d: %w", size, fd, err)
	}
	r := &Region{addr: AddrOf(buf), length: size}
	r.mu.buf = buf
	r.mu.fd = fd
	r.mu.shared = true
	return r, nil
}

// FD is the descriptor of the memory file behind the region (MapShared,
// MapFD), or -1 for an anonymous region (Map) and after Close. The region
// keeps owning it: callers must not close it, and must not use the number
// after Close (it may then name another file). To hand the file to another
// component or process, use DupFD.
func (r *Region) FD() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.mu.shared {
		return -1
	}
	return r.mu.fd
}

// DupFD returns a new close-on-exec descriptor for the region's memory file,
// owned by the caller (who closes it). Duplicating under the region's lock
// means the result never names an unrelated file, even if Close runs
// concurrently. Errors: ErrNotShared for an anonymous region, ErrClosed after
// Close, or the fcntl errno.
func (r *Region) DupFD() (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.mu.buf == nil {
		return -1, ErrClosed
	}
	if !r.mu.shared {
		return -1, fmt.Errorf("%w: region at %#x", ErrNotShared, r.addr)
	}
	fd, err := unix.FcntlInt(uintptr(r.mu.fd), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("memory: duplicate memory file of region at %#x: %w", r.addr, err)
	}
	return fd, nil
}
