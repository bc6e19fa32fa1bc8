package vllm

import (
	"context"
	"sync"
	"time"

	"github.com/mooncake-go/mooncake/core/kvpool"
)

// SuspectTTL is how long a block whose load failed answers absent to this
// scheduler's lookups (LoadFailed): long enough for the master to drop a
// crashed node (its client TTL, 10 s by default), short enough that a
// block that only lost a race is offered again soon.
const SuspectTTL = 30 * time.Second

// suspects is an Exister in front of the pool's that answers absent for
// keys whose load failed recently: without it, a crashed storage node's
// blocks keep being offered until the master drops the node, every load
// of them fails, and vLLM fails each request (kv_load_failure_policy
// fail) or reschedules it into the same failing load again (recompute).
// Safe for concurrent use.
type suspects struct {
	inner kvpool.Exister
	now   func() time.Time
	ttl   time.Duration

	mu   sync.Mutex
	keys map[string]time.Time // key -> until
}

func newSuspects(inner kvpool.Exister, ttl time.Duration, now func() time.Time) *suspects {
	return &suspects{inner: inner, now: now, ttl: ttl, keys: map[string]time.Time{}}
}

// BatchIsExist asks the pool, then turns suspect keys into misses.
func (s *suspects) BatchIsExist(ctx context.Context, keys []string) ([]bool, error) {
	got, err := s.inner.BatchIsExist(ctx, keys)
	if err != nil || len(got) != len(keys) {
		return got, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.keys) == 0 {
		return got, nil
	}
	now := s.now()
	for i, k := range keys {
		if until, ok := s.keys[k]; ok {
			if now.Before(until) {
				got[i] = false
			} else {
				delete(s.keys, k)
			}
		}
	}
	return got, nil
}

// add marks keys suspect for the TTL, dropping expired entries first so
// the set stays as small as the recent failures.
func (s *suspects) add(keys []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	for k, until := range s.keys {
		if !now.Before(until) {
			delete(s.keys, k)
		}
	}
	for _, k := range keys {
		s.keys[k] = now.Add(s.ttl)
	}
}

// LoadFailed records that blocks with these hashes failed to load on a
// worker (vLLM reported them in invalid_block_ids): for SuspectTTL, this
// scheduler's lookups treat every shard's object of those blocks, and
// their layer objects, as absent, so vLLM recomputes them instead of
// loading them again. Store mode only; a no-op otherwise.
func (sc *Scheduler) LoadFailed(hashes [][]byte) {
	if sc.suspects == nil || len(hashes) == 0 {
		return
	}
	var keys []string
	for _, ns := range sc.s.shards() {
		for _, k := range ns.Keys(hashes) {
			keys = append(keys, k)
			if sc.s.Layerwise {
				for l := range sc.s.NumLayers {
					keys = append(keys, layerKey(k, l))
				}
			}
		}
	}
	sc.suspects.add(keys)
}
