package master

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mooncake-go/mooncake/core/store"
)

func TestReserveCommitMakesACompleteObject(t *testing.T) {
	m, _ := newTestMaster(t, nil)
	mustMount(t, m, "node", testSeg("a", 1<<20), testSeg("b", 1<<20))

	r, err := m.Reserve("c1", 4096, ReplicaConfig{ReplicaNum: 2})
	require.NoError(t, err)
	require.Len(t, r.Replicas, 2)
	assert.EqualValues(t, 4096, r.Size)
	assert.Equal(t, ReplicaProcessing, r.Replicas[0].Status)
	n, b := m.Reservations()
	assert.Equal(t, 1, n)
	assert.EqualValues(t, 2*4096, b)
	assert.Zero(t, m.Stats().Used, "reserved space is not objects' space")
	assert.EqualValues(t, 2*4096, m.Stats().Reserved)
	assert.Equal(t, 0, m.Stats().Objects, "a reservation is not an object")
	keys, total, err := m.ListKeys("", 0)
	require.NoError(t, err)
	assert.Empty(t, keys)
	assert.Zero(t, total)

	require.NoError(t, m.CommitReserved("c1", r.ID, "k", 4096, ReplicaConfig{WithSoftPin: true}))
	reps, _, err := m.GetReplicaList("k")
	require.NoError(t, err)
	require.Len(t, reps, 2)
	for i := range reps {
		assert.Equal(t, ReplicaComplete, reps[i].Status)
		assert.Equal(t, r.Replicas[i].Addr, reps[i].Addr, "the object is where the reservation was")
	}
	info, err := m.Stat("k")
	require.NoError(t, err)
	assert.True(t, info.SoftPin)
	assert.Equal(t, "c1", info.Owner)
	assert.Equal(t, 1, m.Stats().Objects)
	assert.Equal(t, 1, m.Stats().SoftPinned)
	n, _ = m.Reservations()
	assert.Zero(t, n)
	assert.EqualValues(t, 2*4096, m.Stats().Used)

	// The reservation is gone: a second commit is refused.
	err = m.CommitReserved("c1", r.ID, "k2", 4096, ReplicaConfig{})
	assert.ErrorIs(t, err, store.ErrObjectNotFound)

	// The object removes like any other and its space comes back.
	require.NoError(t, m.Remove("k", true))
	assert.Zero(t, m.Stats().Used)
	requireReservedAgrees(t, m)
}

func TestCommitReservedRefusals(t *testing.T) {
	m, _ := newTestMaster(t, nil)
	mustMount(t, m, "node", testSeg("a", 1<<20))
	r, err := m.Reserve("c1", 1000, ReplicaConfig{ReplicaNum: 1})
	require.NoError(t, err)

	assert.ErrorIs(t, m.CommitReserved("c2", r.ID, "k", 1000, ReplicaConfig{}), store.ErrIllegalClient)
	assert.ErrorIs(t, m.CommitReserved("c1", r.ID, "k", 999, ReplicaConfig{}), store.ErrInvalidParams)
	assert.ErrorIs(t, m.CommitReserved("c1", r.ID, "", 1000, ReplicaConfig{}), store.ErrInvalidParams)
	assert.ErrorIs(t, m.CommitReserved("c1", r.ID+100, "k", 1000, ReplicaConfig{}), store.ErrObjectNotFound)

	// An existing key: refused, and the reservation stays for the next value.
	mustPut(t, m, "c2", "taken", 10, 1)
	assert.ErrorIs(t, m.CommitReserved("c1", r.ID, "taken", 1000, ReplicaConfig{}), store.ErrObjectAlreadyExists)
	info, err := m.Stat("taken")
	require.NoError(t, err)
	assert.EqualValues(t, 10, info.Size, "the old value stays")
	require.NoError(t, m.CommitReserved("c1", r.ID, "k", 1000, ReplicaConfig{}))

	assert.ErrorIs(t, m.ReleaseReserved("c1", r.ID), store.ErrObjectNotFound)
	_, err = m.Reserve("c1", 0, ReplicaConfig{ReplicaNum: 1})
	assert.ErrorIs(t, err, store.ErrInvalidParams)
	_, err = m.Reserve("", 10, ReplicaConfig{ReplicaNum: 1})
	assert.ErrorIs(t, err, store.ErrInvalidParams)
	_, err = m.Reserve("c1", 2<<20, ReplicaConfig{ReplicaNum: 1})
	assert.ErrorIs(t, err, store.ErrNoAvailableHandle)
	requireReservedAgrees(t, m)
}

func TestReservationLimitAndRelease(t *testing.T) {
	m, _ := newTestMaster(t, nil)
	mustMount(t, m, "node", testSeg("a", 1<<30))
	var ids []uint64
	for range MaxReservationsPerClient {
		r, err := m.Reserve("c1", 4096, ReplicaConfig{ReplicaNum: 1})
		require.NoError(t, err)
		ids = append(ids, r.ID)
	}
	_, err := m.Reserve("c1", 4096, ReplicaConfig{ReplicaNum: 1})
	assert.ErrorIs(t, err, store.ErrInvalidParams)
	_, err = m.Reserve("c2", 4096, ReplicaConfig{ReplicaNum: 1})
	assert.NoError(t, err, "the limit is per client")

	assert.ErrorIs(t, m.ReleaseReserved("c2", ids[0]), store.ErrIllegalClient)
	for _, id := range ids {
		require.NoError(t, m.ReleaseReserved("c1", id))
	}
	n, b := m.Reservations()
	assert.Equal(t, 1, n)
	assert.EqualValues(t, 4096, b)
	st := m.Stats()
	assert.Zero(t, st.Used, "reservations are not objects' bytes")
	assert.EqualValues(t, 4096, st.Reserved)
	assert.Equal(t, 1, st.Reservations)
	require.Len(t, st.SegmentsDetail, 1)
	assert.EqualValues(t, 4096, st.SegmentsDetail[0].Reserved)
	assert.Zero(t, st.SegmentsDetail[0].Objects)
	requireReservedAgrees(t, m)
}

func TestReservationExpiresIntoDiscards(t *testing.T) {
	m, clk := newTestMaster(t, func(c *Config) { c.ReservationTTL = 5 * time.Second })
	mustMount(t, m, "node", testSeg("a", 1<<20))
	r, err := m.Reserve("c1", 4096, ReplicaConfig{ReplicaNum: 1})
	require.NoError(t, err)
	m.Ping("c1")

	clk.Advance(4 * time.Second)
	m.Ping("c1")
	m.Tick()
	n, _ := m.Reservations()
	assert.Equal(t, 1, n, "younger than the TTL")

	clk.Advance(2 * time.Second)
	m.Ping("c1")
	m.Tick()
	n, _ = m.Reservations()
	assert.Zero(t, n)
	assert.ErrorIs(t, m.CommitReserved("c1", r.ID, "k", 4096, ReplicaConfig{}), store.ErrObjectNotFound)
	// Its writer may still write there: the space is held as a discard.
	st := m.Stats()
	assert.EqualValues(t, 4096, st.Used)
	assert.EqualValues(t, 4096, st.DiscardedBytes)
	clk.Advance(m.Config().PutStartReleaseTimeout)
	m.Ping("c1")
	m.Tick()
	assert.Zero(t, m.Stats().Used)
	requireReservedAgrees(t, m)
}

func TestReservationDroppedWithItsSegment(t *testing.T) {
	m, _ := newTestMaster(t, nil)
	mustMount(t, m, "node", testSeg("a", 1<<20), testSeg("b", 1<<20))
	r, err := m.Reserve("c1", 4096, ReplicaConfig{ReplicaNum: 2})
	require.NoError(t, err)
	require.NoError(t, m.UnmountSegment("a", "node"))
	n, _ := m.Reservations()
	assert.Zero(t, n)
	assert.Zero(t, m.Stats().Used, "the other replica's space is freed too")
	assert.ErrorIs(t, m.CommitReserved("c1", r.ID, "k", 4096, ReplicaConfig{}), store.ErrObjectNotFound)
	// The space is allocatable again.
	mustPut(t, m, "c1", "k", 1<<20, 1)
	requireReservedAgrees(t, m)
}

// TestReserveNeverEvicts: a reservation takes free space only, all its
// replicas or none; a full pool refuses it and keeps every stored value,
// where a PutStart of the same size evicts.
func TestReserveNeverEvicts(t *testing.T) {
	m, _ := newTestMaster(t, func(c *Config) { c.EvictionHighWatermark = 1.0 })
	mustMount(t, m, "node", testSeg("a", 256<<10), testSeg("b", 256<<10))
	for i := range 16 {
		k := fmt.Sprintf("full-%02d", i)
		_, err := m.PutStart("c1", k, 32<<10, ReplicaConfig{ReplicaNum: 1})
		require.NoError(t, err, k)
		require.NoError(t, m.PutEnd("c1", k))
	}
	require.EqualValues(t, 512<<10, m.Stats().Used)

	_, err := m.Reserve("c1", 32<<10, ReplicaConfig{ReplicaNum: 1})
	assert.ErrorIs(t, err, store.ErrNoAvailableHandle)
	assert.Contains(t, err.Error(), "do not evict")
	st := m.Stats()
	assert.Equal(t, 16, st.Objects, "nothing evicted for a reservation")
	assert.Zero(t, st.EvictedObjects)
	assert.Zero(t, st.Reserved)
	n, _ := m.Reservations()
	assert.Zero(t, n)

	// Room for one replica of two: refused whole, the space given back.
	require.NoError(t, m.Remove("full-00", true))
	_, err = m.Reserve("c1", 32<<10, ReplicaConfig{ReplicaNum: 2})
	assert.ErrorIs(t, err, store.ErrNoAvailableHandle)
	assert.EqualValues(t, 480<<10, m.Stats().Used)
	assert.Zero(t, m.Stats().Reserved)

	r, err := m.Reserve("c1", 32<<10, ReplicaConfig{ReplicaNum: 1})
	require.NoError(t, err)
	require.Len(t, r.Replicas, 1)
	assert.EqualValues(t, 32<<10, m.Stats().Reserved)

	// PutStart, unlike Reserve, evicts the least recently used value.
	_, err = m.PutStart("c1", "evicts", 32<<10, ReplicaConfig{ReplicaNum: 1})
	require.NoError(t, err)
	assert.EqualValues(t, 1, m.Stats().EvictedObjects)
	requireReservedAgrees(t, m)
}

// TestReservationsHoldAtMostAnEighth: all reservations together hold at
// most MaxReservedFraction of the pool, and the high-watermark eviction
// of Tick does not count them: held space never evicts stored values.
func TestReservationsHoldAtMostAnEighth(t *testing.T) {
	m, _ := newTestMaster(t, func(c *Config) { c.EvictionHighWatermark = 0.5 })
	mustMount(t, m, "node", testSeg("a", 1<<20))
	for range 2 {
		_, err := m.Reserve("c1", 64<<10, ReplicaConfig{ReplicaNum: 1})
		require.NoError(t, err)
	}
	_, err := m.Reserve("c2", 1, ReplicaConfig{ReplicaNum: 1})
	assert.ErrorIs(t, err, store.ErrNoAvailableHandle, "past an eighth of the pool, whoever asks")
	assert.Contains(t, err.Error(), "0.125")

	// Objects at the watermark plus the reservations above it: no eviction.
	for i := range 8 {
		k := fmt.Sprintf("v-%d", i)
		_, err := m.PutStart("c1", k, 64<<10, ReplicaConfig{ReplicaNum: 1})
		require.NoError(t, err)
		require.NoError(t, m.PutEnd("c1", k))
	}
	assert.Zero(t, m.Tick(), "usage without reservations is at the watermark")
	assert.Equal(t, 8, m.Stats().Objects)
	_, err = m.PutStart("c1", "v-8", 64<<10, ReplicaConfig{ReplicaNum: 1})
	require.NoError(t, err)
	require.NoError(t, m.PutEnd("c1", "v-8"))
	assert.Positive(t, m.Tick(), "objects alone past the watermark evict")
	requireReservedAgrees(t, m)
}

// TestReservationIDsDoNotCrossMasters: a reservation ID given by one
// master names nothing at another (a restart, a failover), so a client's
// late release or commit cannot free or fill another reservation there.
func TestReservationIDsDoNotCrossMasters(t *testing.T) {
	m1, _ := newTestMaster(t, nil)
	m2, _ := newTestMaster(t, nil)
	for _, m := range []*Master{m1, m2} {
		mustMount(t, m, "node", testSeg("a", 1<<20))
	}
	r1, err := m1.Reserve("c1", 4096, ReplicaConfig{ReplicaNum: 1})
	require.NoError(t, err)
	r2, err := m2.Reserve("c1", 4096, ReplicaConfig{ReplicaNum: 1})
	require.NoError(t, err)
	assert.NotZero(t, r1.ID)
	assert.NotEqual(t, r1.ID, r2.ID, "the same first object id, salted apart")
	assert.ErrorIs(t, m2.ReleaseReserved("c1", r1.ID), store.ErrObjectNotFound)
	assert.ErrorIs(t, m2.CommitReserved("c1", r1.ID, "k", 4096, ReplicaConfig{}), store.ErrObjectNotFound)
	n, _ := m2.Reservations()
	assert.Equal(t, 1, n, "m2's own reservation untouched")
	require.NoError(t, m2.CommitReserved("c1", r2.ID, "k", 4096, ReplicaConfig{}))
	requireReservedAgrees(t, m2)
}

// requireReservedAgrees checks the master's running count of reserved
// bytes against the per-segment scan of the operator listing.
func requireReservedAgrees(t *testing.T, m *Master) {
	t.Helper()
	n, b := m.Reservations()
	st := m.Stats()
	var sb uint64
	var sn int
	for _, d := range st.SegmentsDetail {
		sb += d.Reserved
		sn += d.Reservations
	}
	require.Equal(t, b, sb, "reserved bytes: counter vs segments")
	require.Equal(t, b, st.Reserved)
	require.Equal(t, n, st.Reservations)
	require.GreaterOrEqual(t, sn, n, "each reservation has a replica on some segment")
}

// TestPrecommitEndsWithPutEndOrRevoke: a precommitted reservation is a
// write in progress that readers are told to wait for (Precommitted), not
// readable until PutEnd; PutEnd makes it complete where the reservation
// was, PutRevoke frees it, a stale one is discarded by a later put of its
// key, and each end moves SealSeq and the count.
func TestPrecommitEndsWithPutEndOrRevoke(t *testing.T) {
	m, clk := newTestMaster(t, nil)
	mustMount(t, m, "node", testSeg("a", 1<<20))
	reserve := func() Reservation {
		t.Helper()
		r, err := m.Reserve("c1", 4096, ReplicaConfig{ReplicaNum: 1})
		require.NoError(t, err)
		return r
	}

	r := reserve()
	seq := m.SealSeq()
	require.NoError(t, m.PrecommitReserved("c1", r.ID, "k", 4096, ReplicaConfig{}))
	assert.True(t, m.Precommitted("k"))
	assert.False(t, m.Precommitted("other"))
	assert.True(t, m.LookupWaits("k"), "a lookup of a precommitted key waits for its seal")
	assert.False(t, m.LookupWaits("other"), "an absent key answers at once")
	assert.Equal(t, 1, m.Precommits())
	assert.Equal(t, seq, m.SealSeq(), "no end yet")
	_, _, err := m.GetReplicaList("k")
	assert.ErrorIs(t, err, store.ErrReplicaIsNotReady, "unreadable before PutEnd")
	ok, err := m.ExistKey("k")
	require.NoError(t, err)
	assert.False(t, ok)
	n, _ := m.Reservations()
	assert.Zero(t, n, "the reservation became the write")
	assert.ErrorIs(t, m.PrecommitReserved("c1", r.ID, "k2", 4096, ReplicaConfig{}), store.ErrObjectNotFound, "used once")
	assert.ErrorIs(t, m.PutEnd("c2", "k"), store.ErrIllegalClient, "another client's write")
	assert.True(t, m.Precommitted("k"))

	require.NoError(t, m.PutEnd("c1", "k"))
	assert.False(t, m.Precommitted("k"))
	assert.False(t, m.LookupWaits("k"), "sealed and in DRAM")
	assert.Zero(t, m.Precommits())
	assert.NotEqual(t, seq, m.SealSeq(), "PutEnd ended it")
	reps, _, err := m.GetReplicaList("k")
	require.NoError(t, err)
	require.Len(t, reps, 1)
	assert.Equal(t, r.Replicas[0].Addr, reps[0].Addr, "the value is where the reservation was")
	assert.Equal(t, ReplicaComplete, reps[0].Status)

	// Revoked: gone, space free, the end counted.
	r = reserve()
	require.NoError(t, m.PrecommitReserved("c1", r.ID, "rv", 4096, ReplicaConfig{}))
	seq = m.SealSeq()
	require.NoError(t, m.PutRevoke("c1", "rv"))
	assert.False(t, m.Precommitted("rv"))
	assert.Zero(t, m.Precommits())
	assert.NotEqual(t, seq, m.SealSeq(), "PutRevoke ended it")
	_, _, err = m.GetReplicaList("rv")
	assert.ErrorIs(t, err, store.ErrObjectNotFound)
	assert.EqualValues(t, 4096, m.Stats().Used, "only k's space is used")

	// Never sealed: a put of the key after PutStartDiscardTimeout
	// discards it, which ends it too.
	r = reserve()
	require.NoError(t, m.PrecommitReserved("c1", r.ID, "stale", 4096, ReplicaConfig{}))
	seq = m.SealSeq()
	clk.Advance(m.Config().PutStartDiscardTimeout + time.Second)
	_, err = m.PutStart("c2", "stale", 4096, ReplicaConfig{ReplicaNum: 1})
	require.NoError(t, err)
	assert.False(t, m.Precommitted("stale"), "the new write is not precommitted")
	assert.Zero(t, m.Precommits())
	assert.NotEqual(t, seq, m.SealSeq(), "the discard ended it")
	requireReservedAgrees(t, m)
}
