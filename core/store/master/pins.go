package master

import "time"

// Pins (upstream ReplicateConfig with_soft_pin, 0.3.x semantics, and
// with_hard_pin):
//
//   - A soft-pinned object is protected for DefaultSoftPinTTL from the
//     moment it becomes readable (PutEnd); every lease grant (GetReplicaList,
//     ExistKey) pushes the deadline to now + DefaultSoftPinTTL, so a hot
//     soft-pinned object stays pinned. Eviction takes soft-pinned objects
//     only in a second pass, when the unpinned ones did not free enough, and
//     not at all with Config.NoEvictSoftPinned. Remove ignores soft pins.
//   - A hard-pinned object is never evicted; Remove without force refuses
//     it with OBJECT_HAS_LEASE, Remove with force and RemoveAll take it.
//   - Leased objects are never evicted, pinned or not.

// refreshSoftPin starts or extends the soft pin of o, which is complete
// (o.when holds the PutStart time until then).
func (m *Master) refreshSoftPin(o *object) {
	if o.softPin && o.complete {
		o.when = m.stamp(m.cfg.Now().Add(m.cfg.DefaultSoftPinTTL))
	}
}

// softPinned reports whether o's soft pin is in force at now.
func (m *Master) softPinned(o *object, now time.Time) bool {
	return o.softPin && o.complete && o.when > m.stamp(now)
}

// evict frees least recently used complete objects that are neither leased
// nor hard-pinned until target bytes were freed or no candidate is left:
// first the DRAM copies of objects that also have a LOCAL_DISK replica
// (dropping those loses nothing and frees the space at once), then the
// others not soft-pinned, then, if still short and allowed, the
// soft-pinned ones. An object with a LOCAL_DISK replica loses only its
// DRAM replicas; with Config.OffloadOnEvict an object that can go to a
// disk tier is queued for offload instead of dropped, and so is, in
// write-through mode, an object whose offload is queued but not taken
// yet; DRAM already queued that way (Stats.PendingOffloadBytes) counts
// towards target. An object with a tier task in flight is skipped. It
// returns the bytes freed now.
func (m *Master) evict(now time.Time, target uint64) uint64 {
	m.stats.EvictionRuns++
	queued := m.pendingFree
	var freed uint64
	for _, p := range []struct{ soft, diskOnly bool }{{false, true}, {false, false}, {true, false}} {
		if freed+queued >= target || (p.soft && m.cfg.NoEvictSoftPinned) {
			break
		}
		if p.diskOnly && m.diskCapacity == 0 {
			continue
		}
		freed += m.evictPass(now, target-freed, p.soft, p.diskOnly, &queued)
	}
	return freed
}

// evictPass walks the eviction policy's candidates (LRU: from the least
// recently used end), taking
// candidates whose soft pin state is soft (only those with a LOCAL_DISK
// replica when diskOnly), until freed plus *queued reaches target.
func (m *Master) evictPass(now time.Time, target uint64, soft, diskOnly bool, queued *uint64) uint64 {
	var freed uint64
	for o := range m.pol.victims {
		if freed+*queued >= target {
			break
		}
		if !m.evictable(o, now) || m.softPinned(o, now) != soft || (diskOnly && o.disk() == nil) {
			continue
		}
		n := o.size * uint64(o.nreps())
		if t := o.task(); t != nil {
			if t.taken || t.evict {
				continue // busy, or already on its way out
			}
			if t.kind == TaskOffload {
				// A write-through offload not started yet: let it
				// finish, then free the DRAM (dropping the object
				// would lose it).
				t.evict = true
				t.pending = n
				m.pendingFree += n
				*queued += n
				continue
			}
			m.cancelTask(o, nil)
		}
		if o.disk() != nil {
			freed += n
			m.countEviction(o)
			m.dropMemory(o)
		} else if t, src, ok := m.offloadSource(o); ok && m.cfg.OffloadOnEvict {
			*queued += n
			m.queueOffload(o, t, src, true)
		} else {
			freed += n
			m.countEviction(o)
			m.free(o)
		}
	}
	return freed
}
