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

// refreshSoftPin starts or extends o's soft pin.
func (m *Master) refreshSoftPin(o *object) {
	if o.softPin {
		o.softPinUntil = m.cfg.Now().Add(m.cfg.DefaultSoftPinTTL)
	}
}

// softPinned reports whether o's soft pin is in force at now.
func (o *object) softPinned(now time.Time) bool {
	return o.softPin && o.softPinUntil.After(now)
}

// evict frees least recently used complete objects that are neither leased
// nor hard-pinned until target bytes were freed or no candidate is left:
// first those not soft-pinned, then, if still short and allowed, the
// soft-pinned ones. It returns the bytes freed.
func (m *Master) evict(now time.Time, target uint64) uint64 {
	m.stats.EvictionRuns++
	freed := m.evictPass(now, target, false)
	if freed < target && !m.cfg.NoEvictSoftPinned {
		freed += m.evictPass(now, target-freed, true)
	}
	return freed
}

// evictPass walks the LRU list from its least recently used end, taking
// candidates whose soft pin state is soft.
func (m *Master) evictPass(now time.Time, target uint64, soft bool) uint64 {
	var freed uint64
	for o := m.lru.prev; o != &m.lru && freed < target; {
		prev := o.prev
		if !o.leaseUntil.After(now) && !o.hardPin && o.softPinned(now) == soft {
			n := o.size * uint64(len(o.replicas))
			freed += n
			m.stats.EvictedObjects++
			m.stats.EvictedBytes += n
			m.free(o)
		}
		o = prev
	}
	return freed
}
