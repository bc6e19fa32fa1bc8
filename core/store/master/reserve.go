package master

import (
	"time"

	"github.com/mooncake-go/mooncake/core/store"
)

// Reservations (ours; upstream has no equivalent): space a client holds
// for a value it has not named yet, so that a put is one write and one
// master call (CommitReserved) instead of PutStart, write, PutEnd.
//
// A reservation is an object without a key, placed as PutStart places a
// value of its size, kept apart from the object table: it is not listed,
// counted in Stats.Objects, evicted, removed by RemoveAll or replicated to
// a standby master. CommitReserved moves it into the table under its key,
// complete, exactly as PutEnd would leave it. A reservation unused for
// Config.ReservationTTL is taken over like a stale write: its space stays
// allocated until PutStartReleaseTimeout, in case its writer still writes
// (a client uses one only within a few seconds of receiving it). One on a
// segment that is unmounted disappears with it; a master that restarts or
// fails over has none, and their commits fail with OBJECT_NOT_FOUND (the
// client then puts the value the two-call way).

// MaxReservationsPerClient bounds the reservations one client holds.
const MaxReservationsPerClient = 64

// MaxReservedFraction bounds the space all reservations hold together, as
// a fraction of the pool's capacity: a small pool gives out few or none,
// so held space never crowds out the values it stores.
const MaxReservedFraction = 1.0 / 8

// Reservation is space reserved by Reserve.
type Reservation struct {
	// ID names it in CommitReserved and ReleaseReserved: never 0, and
	// salted per master, so an ID from a master that restarted or failed
	// over is unknown (OBJECT_NOT_FOUND) to the next one instead of naming
	// another reservation there.
	ID       uint64
	Size     uint64    // bytes
	Replicas []Replica // where to write (PROCESSING)
}

// reservation is the master's record of one.
type reservation struct {
	o      *object // key "", not in the table; o.owner is interned
	client string
}

// Reserve reserves space for a value of size bytes placed as PutStart of
// cfg would place it, but only in free space: it never evicts (a
// reservation taken ahead of a put must not cost a stored value; the
// put that finds none evicts, as PutStart, and what its eviction frees
// beyond its need, EvictionRatio of the pool, serves the reservations)
// and never stripes, and it takes all of cfg.ReplicaNum replicas (at most one
// per segment) or none. client writes into it and then commits it under a
// key with CommitReserved. cfg's pins are not used here (CommitReserved
// applies them). Errors: INVALID_PARAMS (size 0, ReplicaNum <= 0, empty
// client, or client holds MaxReservationsPerClient already);
// NO_AVAILABLE_HANDLE when the free space has no room for every replica
// (the client then puts with PutStart, which evicts).
func (m *Master) Reserve(client string, size uint64, cfg ReplicaConfig) (Reservation, error) {
	switch {
	case client == "":
		return Reservation{}, store.Errorf(store.InvalidParams, "reserve: empty client id")
	case size == 0:
		return Reservation{}, store.Errorf(store.InvalidParams, "reserve: value size 0")
	case cfg.ReplicaNum <= 0:
		return Reservation{}, store.Errorf(store.InvalidParams, "reserve: replica_num %d", cfg.ReplicaNum)
	case m.resvCount[client] >= MaxReservationsPerClient:
		return Reservation{}, store.Errorf(store.InvalidParams, "reserve: client %q already holds %d reservations (the most one client may hold)", client, m.resvCount[client])
	}
	m.touchClient(client)
	now := m.cfg.Now()
	m.releaseDiscards(now)
	if size > m.capacity {
		return Reservation{}, store.Errorf(store.NoAvailableHandle, "reserve: %d bytes exceed pool capacity %d", size, m.capacity)
	}
	want := min(cfg.ReplicaNum, len(m.order))
	if float64(m.resvBytes+size*uint64(want)) > MaxReservedFraction*float64(m.capacity) {
		return Reservation{}, store.Errorf(store.NoAvailableHandle, "reserve: %d replicas of %d bytes would take reservations past %.3g of the pool's %d bytes (%d reserved)", want, size, MaxReservedFraction, m.capacity, m.resvBytes)
	}
	if m.nextID^m.resvSalt == 0 {
		m.nextID++ // an ID of 0 means none
	}
	o := &object{size: size, when: m.stamp(now), leaseUntil: noStamp, id: m.nextID}
	m.nextID++
	cfg.WithSoftPin, cfg.WithHardPin = false, false
	m.place(o, want, cfg)
	if n := o.nreps(); n < want || n == 0 {
		m.freeReplicas(o, nil)
		return Reservation{}, store.Errorf(store.NoAvailableHandle, "reserve: free space has room for %d of %d replicas of %d bytes (reservations do not evict)", n, want, size)
	}
	o.owner = m.owners.intern(client)
	if m.resv == nil {
		m.resv, m.resvCount = map[uint64]reservation{}, map[string]int{}
	}
	m.resv[o.id] = reservation{o: o, client: client}
	m.resvCount[client]++
	m.resvBytes += size * uint64(o.nreps())
	return Reservation{ID: o.id ^ m.resvSalt, Size: size, Replicas: m.descs(o)}, nil
}

// CommitReserved stores the value client wrote into reservation id under
// key, of size bytes (the reservation's size), complete and readable at
// once, with cfg's pins: the object is as PutStart + PutEnd would have
// left it. Errors: INVALID_PARAMS / INVALID_KEY for a bad key, or a size
// that is not the reservation's; OBJECT_NOT_FOUND (no such reservation:
// expired, dropped with its segment, committed already, or given by an
// earlier master); ILLEGAL_CLIENT (another client's reservation);
// OBJECT_ALREADY_EXISTS (key is complete, or being written for less than
// PutStartDiscardTimeout): the reservation is kept, unchanged, for the
// client's next value, as upstream's put of an existing key is a no-op.
func (m *Master) CommitReserved(client string, id uint64, key string, size uint64, cfg ReplicaConfig) error {
	return m.commitReserved(client, id, key, size, cfg, false)
}

// PrecommitReserved is CommitReserved sent while client still writes the
// value (the write and the master round trip overlap; see
// storepb.PutCommitRequest.precommit): the object enters the table as a
// write in progress, exactly as PutStart leaves one, marked precommitted.
// PutEnd completes it and PutRevoke (a failed write) drops it, as after
// PutStart; until one of them, or until it is dropped another way,
// Precommitted reports it, so that a server makes its readers wait for
// that end (SealSeq) instead of answering REPLICA_IS_NOT_READY. Errors
// as CommitReserved's. Ours: upstream has no equivalent.
func (m *Master) PrecommitReserved(client string, id uint64, key string, size uint64, cfg ReplicaConfig) error {
	return m.commitReserved(client, id, key, size, cfg, true)
}

// Precommitted reports whether key is a precommitted write still waiting
// for its PutEnd or PutRevoke (see PrecommitReserved).
func (m *Master) Precommitted(key string) bool {
	if m.precommits == 0 {
		return false
	}
	o := m.objects.get(key)
	return o != nil && o.bits&bitPrecommit != 0
}

// LookupWaits reports whether a replica-list lookup of key may wait
// rather than answer at once: key is precommitted (the server waits for
// its PutEnd, SealWait) or its only copy is on a disk tier (GetOrLoad
// stages it and the server waits for the load, or for DRAM to stage it
// in). A key that is absent, being written, or held in DRAM answers at
// once. It reads the table only: no lease, no use, no load.
func (m *Master) LookupWaits(key string) bool {
	o := m.objects.get(key)
	if o == nil {
		return false
	}
	return o.bits&bitPrecommit != 0 || (o.complete && o.nreps() == 0)
}

// Precommits is how many precommitted writes wait for their PutEnd or
// PutRevoke.
func (m *Master) Precommits() int { return m.precommits }

// SealSeq changes whenever a precommitted write ends (completed by PutEnd,
// or dropped: revoked, discarded, removed with its segment); a server
// watches it to answer the readers waiting for one.
func (m *Master) SealSeq() uint64 { return m.sealSeq }

// unmarkPrecommit clears o's precommit mark, if any, and counts the end.
func (m *Master) unmarkPrecommit(o *object) {
	if o.bits&bitPrecommit == 0 {
		return
	}
	o.bits &^= bitPrecommit
	m.precommits--
	m.sealSeq++
}

func (m *Master) commitReserved(client string, id uint64, key string, size uint64, cfg ReplicaConfig, precommit bool) error {
	if err := checkKey(key); err != nil {
		return err
	}
	oid := id ^ m.resvSalt
	r, ok := m.resv[oid]
	switch {
	case !ok:
		return store.Errorf(store.ObjectNotFound, "key %q: reservation %d not found (expired, dropped with its segment, or from an earlier master)", key, id)
	case r.client != client:
		return store.Errorf(store.IllegalClient, "key %q: reservation %d is held by %q, not %q", key, id, r.client, client)
	case size != r.o.size:
		return store.Errorf(store.InvalidParams, "key %q: %d bytes for reservation %d of %d bytes", key, size, id, r.o.size)
	}
	m.touchClient(client)
	now := m.cfg.Now()
	if old := m.objects.get(key); old != nil {
		if old.complete || time.Duration(m.stamp(now)-old.when) < m.cfg.PutStartDiscardTimeout {
			return store.Errorf(store.ObjectAlreadyExists, "key %q", key)
		}
		m.discard(old, now)
	}
	m.dropReservation(oid, false, nil)
	o := r.o
	o.key, o.when = key, m.stamp(now)
	o.softPin, o.hardPin = cfg.WithSoftPin, cfg.WithHardPin
	m.objects.put(o)
	if o.softPin {
		m.pinned.soft++
	}
	if o.hardPin {
		m.pinned.hard++
	}
	if precommit {
		o.bits |= bitPrecommit
		m.precommits++
		return nil
	}
	m.complete(o)
	return nil
}

// ReleaseReserved frees reservation id of client unused. Errors:
// OBJECT_NOT_FOUND; ILLEGAL_CLIENT.
func (m *Master) ReleaseReserved(client string, id uint64) error {
	oid := id ^ m.resvSalt
	r, ok := m.resv[oid]
	switch {
	case !ok:
		return store.Errorf(store.ObjectNotFound, "reservation %d not found", id)
	case r.client != client:
		return store.Errorf(store.IllegalClient, "reservation %d is held by %q, not %q", id, r.client, client)
	}
	m.touchClient(client)
	m.dropReservation(oid, true, nil)
	return nil
}

// Reservations is how many reservations the master holds, and their
// bytes over all replicas (Stats.Reserved; not in Stats.Used).
func (m *Master) Reservations() (n int, bytes uint64) {
	return len(m.resv), m.resvBytes
}

// dropReservation removes reservation id from the master's records; with
// free, its space is freed (pieces on gone, a segment being unmounted,
// are only uncounted) and its owner released; without, the object lives
// on (committed, or discarded).
func (m *Master) dropReservation(id uint64, free bool, gone *segment) {
	r := m.resv[id]
	delete(m.resv, id)
	m.resvBytes -= r.o.size * uint64(r.o.nreps())
	if m.resvCount[r.client]--; m.resvCount[r.client] <= 0 {
		delete(m.resvCount, r.client)
	}
	if !free {
		return
	}
	m.freeReplicas(r.o, gone)
	m.owners.release(r.o.owner)
}

// expireReservations takes over the reservations older than
// ReservationTTL: their space goes to the discards (held until
// PutStartReleaseTimeout).
func (m *Master) expireReservations(now time.Time) {
	for id, r := range m.resv {
		if time.Duration(m.stamp(now)-r.o.when) < m.cfg.ReservationTTL {
			continue
		}
		m.dropReservation(id, false, nil)
		m.discard(r.o, now) // r.o is not in the table: only its space moves
		m.owners.release(r.o.owner)
	}
}

// dropReservationsOn frees the reservations with a range on s (being
// unmounted: no write can reach that space any more).
func (m *Master) dropReservationsOn(s *segment) {
	for id, r := range m.resv {
		if m.onSegment(r.o, s) {
			m.dropReservation(id, true, s)
		}
	}
}

// reservedOn is the space (bytes) and number of reservations with a
// replica on s (reservations never stripe): for operator listings, a scan.
func (m *Master) reservedOn(s *segment) (bytes uint64, n int) {
	var one [1]replica
	for _, r := range m.resv {
		for _, rep := range r.o.replicas(&one) {
			if rep.seg == s {
				bytes += r.o.size
				n++
			}
		}
	}
	return bytes, n
}
