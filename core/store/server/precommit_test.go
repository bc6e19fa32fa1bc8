package server

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mooncake-go/mooncake/core/store"
	pb "github.com/mooncake-go/mooncake/core/store/storepb"
)

// precommit reserves one value of size for client and precommits it
// under key (storepb.PutCommitRequest.precommit).
func (h *harness) precommit(t *testing.T, client, key string, size uint64) {
	t.Helper()
	cfg := &pb.ReplicaConfig{ReplicaNum: 1}
	r, err := h.srv.BatchPutCommit(ctx(t), &pb.PutCommitRequest{ClientId: client, Config: cfg, ReserveSizes: []uint64{size}})
	require.NoError(t, err)
	require.Len(t, r.Reserved, 1)
	require.Zero(t, r.Reserved[0].Status.GetCode(), r.Reserved[0].Status.GetMessage())
	c, err := h.srv.BatchPutCommit(ctx(t), &pb.PutCommitRequest{ClientId: client, Config: cfg, Precommit: true,
		Reservations: []uint64{r.Reserved[0].Id}, Keys: [][]byte{[]byte(key)}, Sizes: []uint64{size}})
	require.NoError(t, err)
	wantCodes(t, "precommit", c.Results, store.OK)
	assert.Equal(t, h.srv.durableSeals, c.AwaitSeal, "await_seal follows Options.DurableSeals")
}

// TestDurableSealsAskClientsToWait: a server with DurableSeals (an HA
// master) answers a precommit with await_seal, one without does not, and
// a plain commit never carries it.
func TestDurableSealsAskClientsToWait(t *testing.T) {
	for _, durable := range []bool{false, true} {
		h := newHarness(t)
		h.srv.durableSeals = durable
		h.mount(t, "node", pbSeg("s1", 1<<30, 1<<20))
		h.precommit(t, "writer", "k", 4096) // checks await_seal == durable
		r, err := h.srv.BatchPutCommit(ctx(t), &pb.PutCommitRequest{ClientId: "writer", Config: &pb.ReplicaConfig{ReplicaNum: 1}, ReserveSizes: []uint64{4096}})
		require.NoError(t, err)
		assert.False(t, r.AwaitSeal, "not a precommit")
	}
}

// TestReadersWaitForAPrecommittedWrite: a GetReplicaList or ExistKey of
// a precommitted key waits for its PutEnd and then finds the value (not
// REPLICA_IS_NOT_READY), waits for its PutRevoke and then misses, and
// gives up after SealWait when neither comes.
func TestReadersWaitForAPrecommittedWrite(t *testing.T) {
	h := newHarness(t)
	h.mount(t, "node", pbSeg("s1", 1<<30, 1<<20))
	waiting := make(chan struct{}, 16)
	h.srv.sealWaiting = func() { waiting <- struct{}{} }
	await := func(what string) {
		t.Helper()
		select {
		case <-waiting:
		case <-time.After(30 * time.Second):
			t.Fatalf("%s: no reader waited for the precommitted write", what)
		}
	}
	keys := func(k string) *pb.KeysRequest { return &pb.KeysRequest{ClientId: "reader", Keys: [][]byte{[]byte(k)}} }

	got := make(chan *pb.BatchGetReplicaListResponse, 1)
	getAsync := func(k string) {
		go func() {
			r, _ := h.srv.BatchGetReplicaList(context.Background(), keys(k))
			got <- r
		}()
	}

	h.precommit(t, "writer", "sealed", 4096)
	getAsync("sealed")
	exists := make(chan *pb.BatchExistKeyResponse, 1)
	await("get")
	go func() {
		r, _ := h.srv.BatchExistKey(context.Background(), keys("sealed"))
		exists <- r
	}()
	await("exist")
	end, err := h.srv.BatchPutEnd(ctx(t), &pb.KeysRequest{ClientId: "writer", Keys: [][]byte{[]byte("sealed")}})
	require.NoError(t, err)
	wantCodes(t, "put end", end.Results, store.OK)
	r := <-got
	require.Len(t, r.Results, 1)
	wantCodes(t, "get after the seal", []*pb.Status{r.Results[0].Status}, store.OK)
	require.Len(t, r.Results[0].Replicas, 1)
	e := <-exists
	require.Len(t, e.Results, 1)
	assert.True(t, e.Results[0].Exists, "exists after the seal")

	// GetSize and Remove wait the same way.
	seal := func(k string) {
		t.Helper()
		end, err := h.srv.BatchPutEnd(ctx(t), &pb.KeysRequest{ClientId: "writer", Keys: [][]byte{[]byte(k)}})
		require.NoError(t, err)
		wantCodes(t, "put end "+k, end.Results, store.OK)
	}
	h.precommit(t, "writer", "sized", 4096)
	sized := make(chan *pb.BatchGetSizeResponse, 1)
	go func() {
		r, _ := h.srv.BatchGetSize(context.Background(), keys("sized"))
		sized <- r
	}()
	await("get size")
	seal("sized")
	sz := <-sized
	wantCodes(t, "size after the seal", []*pb.Status{sz.Results[0].Status}, store.OK)
	assert.EqualValues(t, 4096, sz.Results[0].Size)
	h.precommit(t, "writer", "removed", 4096)
	removed := make(chan *pb.StatusList, 1)
	go func() {
		r, _ := h.srv.BatchRemove(context.Background(), &pb.KeysRequest{ClientId: "reader", Keys: [][]byte{[]byte("removed")}, Force: true})
		removed <- r
	}()
	await("remove")
	seal("removed")
	wantCodes(t, "remove after the seal", (<-removed).Results, store.OK)

	h.precommit(t, "writer", "revoked", 4096)
	getAsync("revoked")
	await("get of the revoked key")
	rv, err := h.srv.BatchPutRevoke(ctx(t), &pb.KeysRequest{ClientId: "writer", Keys: [][]byte{[]byte("revoked")}})
	require.NoError(t, err)
	wantCodes(t, "revoke", rv.Results, store.OK)
	r = <-got
	wantCodes(t, "get after the revoke", []*pb.Status{r.Results[0].Status}, store.ObjectNotFound)

	// Neither end comes: the reader answers "being written" after the
	// bound (here the call's deadline, shorter than SealWait).
	h.precommit(t, "writer", "open", 4096)
	short, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	r, err = h.srv.BatchGetReplicaList(short, keys("open"))
	require.NoError(t, err)
	wantCodes(t, "get of a write never sealed", []*pb.Status{r.Results[0].Status}, store.ReplicaIsNotReady)
	<-waiting
}
