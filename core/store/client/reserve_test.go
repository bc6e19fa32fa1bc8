package client_test

import (
	"bytes"
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mooncake-go/mooncake/core/memory"
	"github.com/mooncake-go/mooncake/core/store/client"
	"github.com/mooncake-go/mooncake/core/store/localcluster"
	"github.com/mooncake-go/mooncake/core/store/master"
)

// reserveFixture is a pool of one node and a client with a registered
// buffer of two 64 KiB halves (src, dst).
type reserveFixture struct {
	lc       *localcluster.Cluster
	c        *client.Client
	src, dst []byte
}

func newReserveFixture(t *testing.T, ctx context.Context, mcfg master.Config, ccfg client.Config) *reserveFixture {
	t.Helper()
	lc, err := localcluster.Start(ctx, localcluster.Options{Nodes: 1, SegmentSize: 8 << 20, Master: mcfg})
	require.NoError(t, err)
	t.Cleanup(lc.Close)
	ccfg.LocalHostname = "reserve-client"
	c, err := lc.NewClient(ctx, ccfg)
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	buf, err := memory.Map(128 << 10)
	require.NoError(t, err)
	t.Cleanup(func() { buf.Close() })
	require.NoError(t, c.RegisterBuffer(ctx, buf.Bytes()))
	return &reserveFixture{lc: lc, c: c, src: buf.Bytes()[:64<<10], dst: buf.Bytes()[64<<10:]}
}

// waitReservations polls until the client holds at least n reservations.
func (f *reserveFixture) waitReservations(t *testing.T, n int) {
	t.Helper()
	require.Eventually(t, func() bool { return f.c.Reservations() >= n }, 30*time.Second, time.Millisecond, "client reservations")
}

// put stores key with src filled by fill and returns the put's stages.
func (f *reserveFixture) put(t *testing.T, ctx context.Context, key string, fill byte) client.Stages {
	t.Helper()
	for i := range f.src {
		f.src[i] = fill + byte(i)
	}
	var sg client.Stages
	require.NoError(t, f.c.PutFrom(client.WithStages(ctx, &sg), key, f.src, nil))
	return sg
}

func (f *reserveFixture) check(t *testing.T, ctx context.Context, key string, fill byte) {
	t.Helper()
	n, err := f.c.GetInto(ctx, key, f.dst)
	require.NoError(t, err, key)
	require.Equal(t, len(f.dst), n)
	want := make([]byte, len(f.dst))
	for i := range want {
		want[i] = fill + byte(i)
	}
	assert.True(t, bytes.Equal(want, f.dst), "%s: bytes differ", key)
}

// TestReservedPutIsOneMasterCall: after the first put of a size, puts of
// that size skip PutStart (one master call: the commit) and store the
// right bytes; a put of an existing key keeps the old value.
func TestReservedPutIsOneMasterCall(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	f := newReserveFixture(t, ctx, master.Config{}, client.Config{})

	sg := f.put(t, ctx, "r/0", 0)
	assert.NotZero(t, sg.D[client.StagePutStart], "the first put of a size takes PutStart")
	f.waitReservations(t, 1)
	for i := 1; i <= 5; i++ {
		sg = f.put(t, ctx, fmt.Sprintf("r/%d", i), byte(i))
		assert.Zero(t, sg.D[client.StagePutStart], "put %d: no PutStart", i)
		assert.NotZero(t, sg.D[client.StagePutEnd], "put %d: the commit", i)
	}
	for i := 0; i <= 5; i++ {
		f.check(t, ctx, fmt.Sprintf("r/%d", i), byte(i))
	}
	f.waitReservations(t, 1)
	f.put(t, ctx, "r/3", 99) // exists: a no-op success
	f.check(t, ctx, "r/3", 3)

	var n int
	var st master.Stats
	f.lc.Master.Server.Do(func(m *master.Master) { n, _ = m.Reservations(); st = m.Stats() })
	assert.Positive(t, n, "the master holds the client's reservations")
	assert.EqualValues(t, 6*(64<<10), st.Used, "objects only")
	assert.EqualValues(t, uint64(n)*(64<<10), st.Reserved, "reservations apart")
	assert.Equal(t, 6, st.Objects)

	// Close gives the reservations back.
	require.NoError(t, f.c.Close())
	f.lc.Master.Server.Do(func(m *master.Master) { n, _ = m.Reservations() })
	assert.Zero(t, n, "reservations after Close")
}

// TestReservedPutSurvivesALostReservation: a reservation the master no
// longer has (expired) fails the commit, and the value is put again the
// two-call way: stored, right bytes.
func TestReservedPutSurvivesALostReservation(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	f := newReserveFixture(t, ctx, master.Config{ReservationTTL: time.Millisecond}, client.Config{})
	f.put(t, ctx, "lost/0", 7)
	f.waitReservations(t, 1)
	require.Eventually(t, func() bool {
		n := -1
		f.lc.Master.Server.Do(func(m *master.Master) { m.Tick(); n, _ = m.Reservations() })
		return n == 0
	}, 30*time.Second, time.Millisecond, "master reservations expired")
	sg := f.put(t, ctx, "lost/1", 8)
	assert.NotZero(t, sg.D[client.StagePutStart], "the failed commit is followed by PutStart")
	f.check(t, ctx, "lost/0", 7)
	f.check(t, ctx, "lost/1", 8)
}

// TestReservedPutsOff: PutReservations < 0 keeps every put on PutStart +
// PutEnd and holds none.
func TestReservedPutsOff(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	f := newReserveFixture(t, ctx, master.Config{}, client.Config{PutReservations: -1})
	for i := range 3 {
		sg := f.put(t, ctx, fmt.Sprintf("off/%d", i), byte(i))
		assert.NotZero(t, sg.D[client.StagePutStart])
	}
	assert.Zero(t, f.c.Reservations())
	f.check(t, ctx, "off/2", 2)
}

// TestPrecommittedPutRevokedWhenItsWriteFails: a reserved put commits
// while it writes (a precommit); when the write fails (the node's
// transfer engine is gone) the put fails and the precommitted key is
// revoked: no write is left for readers to wait on, the key does not
// exist, and the put may be retried.
func TestPrecommittedPutRevokedWhenItsWriteFails(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	f := newReserveFixture(t, ctx, master.Config{}, client.Config{})
	f.put(t, ctx, "w/0", 1)
	f.waitReservations(t, 1)
	require.NoError(t, f.lc.Nodes[0].Engine().Close())

	err := f.c.PutFrom(ctx, "w/1", f.src, nil)
	require.Error(t, err, "the node cannot be written")
	var open, objects int
	f.lc.Master.Server.Do(func(m *master.Master) { open = m.Precommits(); objects = m.Stats().Objects })
	assert.Zero(t, open, "precommitted writes left")
	assert.Equal(t, 1, objects, "only w/0")
	ok, err := f.c.IsExist(ctx, "w/1")
	require.NoError(t, err)
	assert.False(t, ok)
}

// TestSerialCommit: with SerialCommit the reserved put commits after its
// write, one master call still, and the value reads back.
func TestSerialCommit(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	f := newReserveFixture(t, ctx, master.Config{}, client.Config{SerialCommit: true})
	f.put(t, ctx, "s/0", 3)
	f.waitReservations(t, 1)
	sg := f.put(t, ctx, "s/1", 4)
	assert.Zero(t, sg.D[client.StagePutStart], "reserved: no PutStart")
	assert.NotZero(t, sg.D[client.StagePutEnd], "the commit")
	f.check(t, ctx, "s/0", 3)
	f.check(t, ctx, "s/1", 4)
}

// TestSealsRideOnTheNextCommit: a precommitted put's seal waits for the
// client's next commit, which carries it (so each put is one master call
// in steady state); a reader of the newest key waits at the master for
// its seal, and Close sends the last one.
func TestSealsRideOnTheNextCommit(t *testing.T) {
	defer client.SetSealDelay(time.Hour)() // only a commit or Close sends a seal
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	f := newReserveFixture(t, ctx, master.Config{}, client.Config{})
	f.put(t, ctx, "ride/0", 0) // PutStart + PutEnd: nothing to seal
	f.waitReservations(t, 1)
	precommits := func() (n int) {
		f.lc.Master.Server.Do(func(m *master.Master) { n = m.Precommits() })
		return n
	}
	for i := 1; i <= 4; i++ {
		sg := f.put(t, ctx, fmt.Sprintf("ride/%d", i), byte(i))
		require.Zero(t, sg.D[client.StagePutStart], "put %d reserved", i)
		f.waitReservations(t, 1)
		assert.Equal(t, 1, precommits(), "after put %d: only its own seal waits", i)
	}
	f.check(t, ctx, "ride/2", 2) // sealed by put 3's commit

	// ride/4's seal waits in the client; another client's reader waits at
	// the master until Close sends it.
	other, err := f.lc.NewClient(ctx, client.Config{LocalHostname: "reader"})
	require.NoError(t, err)
	defer other.Close()
	found := make(chan bool, 1)
	go func() {
		ok, err := other.IsExist(ctx, "ride/4")
		found <- ok && err == nil
	}()
	require.NoError(t, f.c.Close())
	assert.Zero(t, precommits(), "Close sent the last seal")
	assert.True(t, <-found, "the reader found the key once sealed")
}
