package vllm

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestLoadFailedBlocksMissForTheTTL(t *testing.T) {
	ctx := testContext(t)
	const bs = 4 // block_size of settingsJSON
	s := mustSettings(t, KVBoth, nil, nil)
	fp := &fakePool{}
	now := time.Unix(1000, 0)
	sus := newSuspects(fp, SuspectTTL, func() time.Time { return now })
	sc, err := newStoreScheduler(s, nil, sus)
	require.NoError(t, err)
	sc.suspects = sus
	hs := hashes("suspect", 4)
	fp.add(s, hs)
	lookup := func(id string) int {
		n, _, err := sc.Lookup(ctx, LookupArgs{ReqID: id, Hashes: hs, NumTokens: 4*bs + 1})
		require.NoError(t, err)
		return n / bs
	}
	require.Equal(t, 4, lookup("before"))

	sc.LoadFailed(hs[2:3]) // a worker could not load block 2
	assert.Equal(t, 2, lookup("after"), "a failed block ends the offered prefix")

	now = now.Add(SuspectTTL - time.Second)
	assert.Equal(t, 2, lookup("still"))
	now = now.Add(2 * time.Second)
	assert.Equal(t, 4, lookup("expired"), "the block is offered again after the TTL")
	assert.Empty(t, sus.keys, "expired entries are dropped")
}

func TestLoadFailedLayerwiseKeys(t *testing.T) {
	ctx := testContext(t)
	const bs = 4
	s := mustSettings(t, KVBoth, map[string]any{"mc_layerwise": true}, map[string]any{"num_layers": 3})
	fp := &fakePool{}
	sus := newSuspects(fp, SuspectTTL, time.Now)
	sc, err := newStoreScheduler(s, nil, sus)
	require.NoError(t, err)
	sc.suspects = sus
	hs := hashes("suspect-lw", 2)
	for _, ns := range s.shards() {
		for _, k := range ns.Keys(hs) {
			for l := range 3 {
				fp.keys = mapWith(fp.keys, layerKey(k, l))
			}
		}
	}
	n, _, err := sc.Lookup(ctx, LookupArgs{ReqID: "r", Hashes: hs, NumTokens: 2*bs + 1})
	require.NoError(t, err)
	require.Equal(t, 2*bs, n)
	sc.LoadFailed(hs[:1])
	n, _, err = sc.Lookup(ctx, LookupArgs{ReqID: "r2", Hashes: hs, NumTokens: 2*bs + 1})
	require.NoError(t, err)
	assert.Zero(t, n)
}

func mapWith(m map[string]bool, k string) map[string]bool {
	if m == nil {
		m = map[string]bool{}
	}
	m[k] = true
	return m
}
