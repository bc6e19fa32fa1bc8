// Package disk is the SSD tier's file store: a directory of checksummed
// object files with a size limit and least-recently-used eviction. A node
// or client configured with a storage_root_dir (upstream Mooncake's SSD
// offload, FileStorage) keeps here the objects the master moved out of its
// DRAM segment, and reads them back when a reader asks for one.
//
// # File format
//
// One file per object, named after a SHA-256 of the key
// ("<64 hex digits>.mcobj"), written to a temporary name and renamed into
// place. All integers are little endian:
//
//	offset size
//	0      8    magic "MCGOOBJ1"
//	8      4    key length K
//	12     4    reserved, 0
//	16     8    object id (the master's identity of this value)
//	24     8    value length N
//	32     4    CRC-32C (Castagnoli) of the value
//	36     4    CRC-32C of bytes 0..35 and the key
//	40     K    key
//	40+K   N    value
//
// A read checks the magic, both checksums, the key, the object id and that
// the file is exactly 40+K+N bytes long; any mismatch (a flipped bit, a
// truncated or extended file, another key's file) deletes the file and
// reports ErrCorrupt: a corrupt file is a miss, never wrong bytes.
//
// Files do not outlive the process that wrote them: the master forgets a
// disk tier with the client that owns it, so Open deletes every object file
// left in the directory by an earlier process, and writes are not fsynced.
// A lock file (flock) keeps two processes from sharing one directory.
//
// Concurrency: a Store is safe for concurrent use. Its mutex guards the
// index (entries, LRU order, bytes used); file I/O happens outside it. An
// entry being read is never evicted, replaced or deleted, so a reader that
// finds its file corrupt deletes it while still counted as a reader.
package disk

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
)

// Sentinel errors, matched with errors.Is.
var (
	// ErrNotFound: no file for the key (never written, evicted, deleted).
	ErrNotFound = errors.New("disk: object not found")
	// ErrCorrupt: the file failed a check (checksum, length, key, id); it
	// has been deleted.
	ErrCorrupt = errors.New("disk: object file corrupt")
	// ErrTooLarge: the object's file would exceed the store's capacity.
	ErrTooLarge = errors.New("disk: object larger than the disk tier")
	// ErrFull: not enough room even after evicting every idle file.
	ErrFull = errors.New("disk: disk tier full")
	// ErrClosed: the store was closed.
	ErrClosed = errors.New("disk: store closed")
	// ErrInvalid: a bad argument (empty key, empty value, bad config).
	ErrInvalid = errors.New("disk: invalid argument")
	// ErrLocked: another process holds the directory.
	ErrLocked = errors.New("disk: storage_root_dir in use by another process")
)

const (
	magic      = "MCGOOBJ1"
	headerSize = 40
	fileExt    = ".mcobj"
	tmpExt     = ".mcobj.tmp"
	lockName   = "LOCK"
	// MaxKeyLen is the longest key stored, in bytes (the master's limit).
	MaxKeyLen = 4096
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// FileSize is the size in bytes of the file holding a value of n bytes
// under key: the 40-byte header, the key and the value.
func FileSize(key string, n uint64) uint64 { return headerSize + uint64(len(key)) + n }

// Config configures a Store.
type Config struct {
	// Dir is the directory (upstream storage_root_dir); created if absent.
	// Required.
	Dir string
	// Capacity is the size limit in bytes, headers included (upstream
	// quota_bytes). 0 = 90% of the space available on Dir's filesystem
	// when the store opens, as upstream's default quota.
	Capacity uint64
}

// Stats is a snapshot of a store's counters.
type Stats struct {
	Files     int    // objects stored
	Used      uint64 // bytes of their files
	Capacity  uint64 // the size limit, bytes
	Evictions uint64 // files evicted to make room, since Open
	Corrupt   uint64 // files that failed a check on read, since Open
	Writes    uint64 // files written, since Open
	Reads     uint64 // files read back intact, since Open
}

// Evicted names an object whose file was evicted to make room.
type Evicted struct {
	Key string
	ID  uint64
}

type entry struct {
	key        string
	path       string // Store.Path(key), computed once at Put
	id         uint64
	size       uint64 // file bytes
	readers    int    // reads in progress: not evictable
	dropping   bool   // found corrupt: its file is being deleted, Get misses
	prev, next *entry // LRU ring; lru.next is the most recent
}

// Store is a directory of object files. See the package doc.
type Store struct {
	dir      string
	capacity uint64
	lock     *os.File

	mu struct {
		sync.Mutex
		entries map[string]*entry
		lru     entry // sentinel
		used    uint64
		closed  bool
		stats   Stats
	}
}

// MinCapacity is the smallest size limit Open accepts: room for the
// smallest file (a one-byte value under a one-byte key).
const MinCapacity = headerSize + 2

// Available returns the bytes free to an unprivileged user on the
// filesystem that holds dir, or would hold it: a directory that does not
// exist yet is measured at its nearest existing ancestor, and nothing is
// created. Errors: ErrInvalid (empty dir); the filesystem's.
func Available(dir string) (uint64, error) {
	if dir == "" {
		return 0, fmt.Errorf("%w: empty storage_root_dir", ErrInvalid)
	}
	p, err := filepath.Abs(dir)
	if err != nil {
		return 0, fmt.Errorf("disk: storage_root_dir %q: %w", dir, err)
	}
	for {
		var fs syscall.Statfs_t
		err := syscall.Statfs(p, &fs)
		if err == nil {
			return uint64(fs.Bavail) * uint64(fs.Bsize), nil
		}
		parent := filepath.Dir(p)
		if !errors.Is(err, syscall.ENOENT) || parent == p {
			return 0, fmt.Errorf("disk: storage_root_dir %q: statfs %s: %w", dir, p, err)
		}
		p = parent
	}
}

// ResolveCapacity is the size limit Open gives a store in dir configured
// with capacity: capacity itself, or for 0, 90% of Available(dir) (as
// upstream's default quota). Nothing is created. Errors: ErrInvalid (empty
// dir, a capacity below MinCapacity, no free space for the default);
// Available's.
func ResolveCapacity(dir string, capacity uint64) (uint64, error) {
	if dir == "" {
		return 0, fmt.Errorf("%w: empty storage_root_dir", ErrInvalid)
	}
	if capacity > 0 {
		if capacity < MinCapacity {
			return 0, fmt.Errorf("%w: quota of %d bytes holds no object (at least %d)", ErrInvalid, capacity, MinCapacity)
		}
		return capacity, nil
	}
	free, err := Available(dir)
	if err != nil {
		return 0, err
	}
	if capacity = free / 10 * 9; capacity < MinCapacity {
		return 0, fmt.Errorf("%w: storage_root_dir %q has no free space", ErrInvalid, dir)
	}
	return capacity, nil
}

// Open opens (creating if needed) the store in cfg.Dir, takes its lock and
// deletes object files left there by an earlier process. Errors: ErrInvalid
// (empty Dir, a Capacity below MinCapacity); ErrLocked (another process
// uses Dir); the filesystem's.
func Open(cfg Config) (*Store, error) {
	var err error
	if cfg.Capacity, err = ResolveCapacity(cfg.Dir, cfg.Capacity); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(cfg.Dir, 0o755); err != nil {
		return nil, fmt.Errorf("disk: storage_root_dir %q: %w", cfg.Dir, err)
	}
	lf, err := os.OpenFile(filepath.Join(cfg.Dir, lockName), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, fmt.Errorf("disk: storage_root_dir %q: lock file: %w", cfg.Dir, err)
	}
	if err := syscall.Flock(int(lf.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		lf.Close()
		return nil, fmt.Errorf("%w: %q: %v", ErrLocked, cfg.Dir, err)
	}
	s := &Store{dir: cfg.Dir, capacity: cfg.Capacity, lock: lf}
	s.mu.entries = map[string]*entry{}
	s.mu.lru.prev, s.mu.lru.next = &s.mu.lru, &s.mu.lru
	if err := s.removeStale(); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

// removeStale deletes the object and temporary files in the directory.
func (s *Store) removeStale() error {
	des, err := os.ReadDir(s.dir)
	if err != nil {
		return fmt.Errorf("disk: storage_root_dir %q: %w", s.dir, err)
	}
	for _, de := range des {
		n := de.Name()
		if de.Type().IsRegular() && (strings.HasSuffix(n, fileExt) || strings.HasSuffix(n, tmpExt)) {
			if err := os.Remove(filepath.Join(s.dir, n)); err != nil && !errors.Is(err, os.ErrNotExist) {
				return fmt.Errorf("disk: removing stale %s: %w", n, err)
			}
		}
	}
	return nil
}

// Dir is the store's directory.
func (s *Store) Dir() string { return s.dir }

// Capacity is the size limit in bytes.
func (s *Store) Capacity() uint64 { return s.capacity }

// Path is the file that holds key's value (whether or not it exists).
func (s *Store) Path(key string) string {
	h := sha256.Sum256([]byte(key))
	return filepath.Join(s.dir, hex.EncodeToString(h[:])+fileExt)
}

func (s *Store) unlinkLocked(e *entry) {
	e.prev.next, e.next.prev = e.next, e.prev
	e.prev, e.next = nil, nil
	delete(s.mu.entries, e.key)
	s.mu.used -= e.size
}

func (s *Store) frontLocked(e *entry) {
	if e.prev != nil {
		e.prev.next, e.next.prev = e.next, e.prev
	}
	e.prev, e.next = &s.mu.lru, s.mu.lru.next
	s.mu.lru.next.prev = e
	s.mu.lru.next = e
}

// Put writes value as the object id under key, replacing an older file of
// the key, evicting least recently used idle files while the store would
// exceed its capacity. It returns the objects evicted (their files are
// gone). Errors: ErrInvalid (empty or too long key, empty value);
// ErrTooLarge; ErrFull (files being read hold the space); ErrClosed; the
// filesystem's (nothing is stored then, but evictions already made are
// still returned).
func (s *Store) Put(key string, id uint64, value []byte) ([]Evicted, error) {
	if key == "" || len(key) > MaxKeyLen || len(value) == 0 {
		return nil, fmt.Errorf("%w: key of %d bytes, value of %d bytes", ErrInvalid, len(key), len(value))
	}
	size := FileSize(key, uint64(len(value)))
	if size > s.capacity {
		return nil, fmt.Errorf("%w: key %q: %d-byte file, capacity %d", ErrTooLarge, key, size, s.capacity)
	}
	path := s.Path(key)
	// Reserve the space first (evicting), so concurrent writers never
	// overshoot the limit together.
	s.mu.Lock()
	if s.mu.closed {
		s.mu.Unlock()
		return nil, ErrClosed
	}
	if old, ok := s.mu.entries[key]; ok {
		if old.readers > 0 {
			s.mu.Unlock()
			return nil, fmt.Errorf("%w: key %q is being read", ErrFull, key)
		}
		s.unlinkLocked(old)
	}
	var evicted []Evicted
	var victims []string
	for e := s.mu.lru.prev; e != &s.mu.lru && s.mu.used+size > s.capacity; {
		prev := e.prev
		if e.readers == 0 {
			s.unlinkLocked(e)
			evicted = append(evicted, Evicted{Key: e.key, ID: e.id})
			victims = append(victims, e.path)
			s.mu.stats.Evictions++
		}
		e = prev
	}
	full := s.mu.used+size > s.capacity
	if !full {
		s.mu.used += size // reserved; the entry is added once the file is in place
	}
	s.mu.Unlock()
	for _, p := range victims {
		_ = os.Remove(p)
	}
	if full {
		_ = os.Remove(path) // the replaced file, if any
		return evicted, fmt.Errorf("%w: key %q: %d bytes wanted, the rest is being read", ErrFull, key, size)
	}
	err := writeFile(path, key, id, value)
	s.mu.Lock()
	if err == nil && !s.mu.closed {
		e := &entry{key: key, path: path, id: id, size: size}
		s.mu.entries[key] = e
		s.frontLocked(e)
		s.mu.stats.Writes++
		s.mu.Unlock()
		return evicted, nil
	}
	if !s.mu.closed {
		s.mu.used -= size
	} else if err == nil {
		// Close reset the index (and may have listed the directory
		// before this file was renamed into place).
		err = ErrClosed
	}
	s.mu.Unlock()
	_ = os.Remove(path) // the replaced file, if any
	return evicted, err
}

// header encodes the header and key of a file.
func header(key string, id uint64, value []byte) []byte {
	h := make([]byte, headerSize+len(key))
	copy(h, magic)
	binary.LittleEndian.PutUint32(h[8:], uint32(len(key)))
	binary.LittleEndian.PutUint64(h[16:], id)
	binary.LittleEndian.PutUint64(h[24:], uint64(len(value)))
	binary.LittleEndian.PutUint32(h[32:], crc32.Checksum(value, castagnoli))
	copy(h[headerSize:], key)
	binary.LittleEndian.PutUint32(h[36:], headerCRC(h))
	return h
}

// headerCRC is the checksum of bytes 0..35 and the key of an encoded header.
func headerCRC(h []byte) uint32 {
	c := crc32.Update(0, castagnoli, h[:36])
	return crc32.Update(c, castagnoli, h[headerSize:])
}

func writeFile(path, key string, id uint64, value []byte) error {
	tmp := strings.TrimSuffix(path, fileExt) + tmpExt
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o644)
	if err != nil {
		return fmt.Errorf("disk: key %q: %w", key, err)
	}
	_, err = f.Write(header(key, id, value))
	if err == nil {
		_, err = f.Write(value)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("disk: writing key %q: %w", key, err)
	}
	return nil
}

// Get reads the object id stored under key into dst, which must be exactly
// the value's length, and makes it the most recently used. dst's content
// is undefined on error. Errors: ErrInvalid (empty key or dst); ErrNotFound;
// ErrCorrupt (any check failed; the file is deleted and the key forgotten,
// which a later Get reports as ErrNotFound); ErrClosed; the filesystem's.
func (s *Store) Get(key string, id uint64, dst []byte) error {
	if key == "" || len(dst) == 0 {
		return fmt.Errorf("%w: key of %d bytes, buffer of %d bytes", ErrInvalid, len(key), len(dst))
	}
	s.mu.Lock()
	if s.mu.closed {
		s.mu.Unlock()
		return ErrClosed
	}
	e, ok := s.mu.entries[key]
	if !ok || e.dropping {
		s.mu.Unlock()
		return fmt.Errorf("%w: key %q", ErrNotFound, key)
	}
	e.readers++
	s.frontLocked(e)
	s.mu.Unlock()

	err := readFile(e.path, key, id, dst)

	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case err == nil:
		s.mu.stats.Reads++
	case errors.Is(err, ErrCorrupt):
		s.mu.stats.Corrupt++
		if s.mu.entries[key] == e && !e.dropping {
			// Delete the file outside the lock while still a reader:
			// nothing writes or deletes e.path meanwhile, and other
			// readers leave it to this one.
			e.dropping = true
			s.mu.Unlock()
			_ = os.Remove(e.path)
			s.mu.Lock()
			if s.mu.entries[key] == e { // else Close reset the index
				s.unlinkLocked(e)
			}
		}
	}
	e.readers--
	return err
}

func readFile(path, key string, id uint64, dst []byte) error {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("%w: key %q: file missing", ErrCorrupt, key)
	}
	if err != nil {
		return fmt.Errorf("disk: key %q: %w", key, err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return fmt.Errorf("disk: key %q: %w", key, err)
	}
	want := FileSize(key, uint64(len(dst)))
	if uint64(fi.Size()) != want {
		return fmt.Errorf("%w: key %q: file is %d bytes, want %d", ErrCorrupt, key, fi.Size(), want)
	}
	h := make([]byte, headerSize+len(key))
	if _, err := io.ReadFull(f, h); err != nil {
		return fmt.Errorf("%w: key %q: header: %v", ErrCorrupt, key, err)
	}
	switch {
	case string(h[:8]) != magic:
		return fmt.Errorf("%w: key %q: bad magic", ErrCorrupt, key)
	case binary.LittleEndian.Uint32(h[36:]) != headerCRC(h):
		return fmt.Errorf("%w: key %q: header checksum mismatch", ErrCorrupt, key)
	case binary.LittleEndian.Uint32(h[8:]) != uint32(len(key)) || string(h[headerSize:]) != key:
		return fmt.Errorf("%w: key %q: file holds another key", ErrCorrupt, key)
	case binary.LittleEndian.Uint64(h[16:]) != id:
		return fmt.Errorf("%w: key %q: file holds object %d, want %d", ErrCorrupt, key, binary.LittleEndian.Uint64(h[16:]), id)
	case binary.LittleEndian.Uint64(h[24:]) != uint64(len(dst)):
		return fmt.Errorf("%w: key %q: file holds %d value bytes, want %d", ErrCorrupt, key, binary.LittleEndian.Uint64(h[24:]), len(dst))
	}
	if _, err := io.ReadFull(f, dst); err != nil {
		return fmt.Errorf("%w: key %q: value: %v", ErrCorrupt, key, err)
	}
	if crc32.Checksum(dst, castagnoli) != binary.LittleEndian.Uint32(h[32:]) {
		return fmt.Errorf("%w: key %q: value checksum mismatch", ErrCorrupt, key)
	}
	return nil
}

// Delete removes key's file if it holds object id (0 = whichever), and
// reports whether it did: a newer value of the key written meanwhile is
// kept. A file being read is not deleted. Errors: ErrClosed; the
// filesystem's.
func (s *Store) Delete(key string, id uint64) (bool, error) {
	s.mu.Lock()
	if s.mu.closed {
		s.mu.Unlock()
		return false, ErrClosed
	}
	e, ok := s.mu.entries[key]
	ok = ok && (id == 0 || e.id == id) && e.readers == 0
	if ok {
		s.unlinkLocked(e)
	}
	s.mu.Unlock()
	if !ok {
		return false, nil
	}
	if err := os.Remove(e.path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return true, fmt.Errorf("disk: deleting key %q: %w", key, err)
	}
	return true, nil
}

// Clear deletes every object file (the master forgot them: a new
// registration). Errors: ErrClosed; the filesystem's.
func (s *Store) Clear() error {
	s.mu.Lock()
	if s.mu.closed {
		s.mu.Unlock()
		return ErrClosed
	}
	for _, e := range s.mu.entries {
		if e.readers == 0 {
			s.unlinkLocked(e)
		}
	}
	keep := map[string]bool{}
	for _, e := range s.mu.entries {
		keep[filepath.Base(e.path)] = true
	}
	s.mu.Unlock()
	des, err := os.ReadDir(s.dir)
	if err != nil {
		return fmt.Errorf("disk: storage_root_dir %q: %w", s.dir, err)
	}
	for _, de := range des {
		if n := de.Name(); strings.HasSuffix(n, fileExt) && !keep[n] {
			_ = os.Remove(filepath.Join(s.dir, n))
		}
	}
	return nil
}

// Stats returns the store's counters.
func (s *Store) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.mu.stats
	st.Files, st.Used, st.Capacity = len(s.mu.entries), s.mu.used, s.capacity
	return st
}

// Close deletes every object file and releases the directory lock; the
// files are useless once their owner is gone (see the package doc). Later
// calls fail with ErrClosed. Errors: the filesystem's.
func (s *Store) Close() error {
	s.mu.Lock()
	if s.mu.closed {
		s.mu.Unlock()
		return ErrClosed
	}
	s.mu.closed = true
	s.mu.entries = map[string]*entry{}
	s.mu.lru.prev, s.mu.lru.next = &s.mu.lru, &s.mu.lru
	s.mu.used = 0
	s.mu.Unlock()
	err := s.removeStale()
	if cerr := s.lock.Close(); err == nil {
		err = cerr
	}
	return err
}
