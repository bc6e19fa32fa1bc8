package client

import (
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	grpcstatus "google.golang.org/grpc/status"

	"github.com/mooncake-go/mooncake/core/store"
)

// TestChunkEnd: chunks hold at most maxBatchKeys keys and, beyond their
// first key, maxBatchKeyBytes key bytes; they cover every key once, in
// order, and a key larger than the byte bound travels alone.
func TestChunkEnd(t *testing.T) {
	ks := func(n, size int) []string {
		out := make([]string, n)
		for i := range out {
			out[i] = strings.Repeat("k", size)
		}
		return out
	}
	for _, tc := range []struct {
		name string
		keys []string
		want []int // chunk lengths
	}{
		{"none", nil, nil},
		{"one", ks(1, 10), []int{1}},
		{"by count", ks(2*maxBatchKeys+1, 10), []int{maxBatchKeys, maxBatchKeys, 1}},
		{"by bytes", ks(600, 4096), []int{256, 256, 88}},
		{"oversized key alone", append(ks(1, maxBatchKeyBytes+1), ks(2, 1)...), []int{1, 2}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got []int
			for lo := 0; lo < len(tc.keys); {
				hi := chunkEnd(tc.keys, lo)
				require.Greater(t, hi, lo, "empty chunk at %d", lo)
				got = append(got, hi-lo)
				lo = hi
			}
			assert.Equal(t, tc.want, got)
			// The generic form takes byte keys too (keys as bytes).
			bs := make([][]byte, len(tc.keys))
			for i, k := range tc.keys {
				bs[i] = []byte(k)
			}
			if len(bs) > 0 {
				assert.Equal(t, chunkEnd(tc.keys, 0), chunkEnd(bs, 0))
			}
		})
	}
}

// TestChunkedStopsAtFirstFailure: the results of the chunks before a
// failed one are kept, in order; a short answer is RPC_FAIL.
func TestChunkedStopsAtFirstFailure(t *testing.T) {
	keys := make([]string, 2*maxBatchKeys+5)
	for i := range keys {
		keys[i] = fmt.Sprint(i)
	}
	calls := 0
	boom := errors.New("boom")
	got, err := chunked(keys, "test", func(lo, hi int) ([]int, error) {
		calls++
		if calls == 2 {
			return nil, boom
		}
		out := make([]int, hi-lo)
		for i := range out {
			out[i] = lo + i
		}
		return out, nil
	})
	require.ErrorIs(t, err, boom)
	assert.Equal(t, 2, calls, "a chunk after the failed one was sent")
	require.Len(t, got, maxBatchKeys)
	assert.Equal(t, maxBatchKeys-1, got[maxBatchKeys-1])

	_, err = chunked(keys[:3], "short", func(lo, hi int) ([]int, error) { return []int{1}, nil })
	assert.ErrorIs(t, err, store.ErrRPCFail)
	assert.ErrorContains(t, err, "short: 1 results for 3 keys")
}

// TestUnreachable: dial failures and deadlines are "cannot reach"; a
// master that answered (an error code, a standby's refusal) is not.
func TestUnreachable(t *testing.T) {
	refused := grpcstatus.Error(codes.Unavailable, `connection error: desc = "transport: Error while dialing: dial tcp 127.0.0.1:1: connect: connection refused"`)
	for _, tc := range []struct {
		name  string
		err   error
		cause string
		ok    bool
	}{
		{"refused", refused, "connection refused", true},
		{"refused, wrapped by rpcErr", rpcErr("get stats", refused), "connection refused", true},
		{"no such host", grpcstatus.Error(codes.Unavailable, `name resolver error: produced zero addresses: lookup nohost: no such host`), "no such host", true},
		{"no HA leader", grpcstatus.Error(codes.Unavailable, "name resolver error: ha: no leader"), "no master leads the cluster (none is registered in etcd)", true},
		{"other unavailable", grpcstatus.Error(codes.Unavailable, `error reading from server: "EOF"`), "EOF", true},
		{"deadline", rpcErr("ping", grpcstatus.Error(codes.DeadlineExceeded, "context deadline exceeded")), "no answer before the deadline", true},
		{"standby", grpcstatus.Error(codes.Unavailable, "mooncake master 127.0.0.1:5: UNAVAILABLE_IN_CURRENT_MODE: standby, not the leader of cluster c"), "", false},
		{"master answered", store.Errorf(store.ObjectNotFound, "key %q", "k"), "", false},
		{"other code", grpcstatus.Error(codes.ResourceExhausted, "too big"), "", false},
		{"not gRPC", errors.New("connection refused"), "", false},
		{"nil", nil, "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cause, ok := Unreachable(tc.err)
			assert.Equal(t, tc.ok, ok)
			assert.Equal(t, tc.cause, cause)
		})
	}
	assert.Equal(t, "cannot reach master h:1: connection refused", MasterError("h:1", rpcErr("get stats", refused)))
	assert.Equal(t, `store: OBJECT_NOT_FOUND (-704): key "k"`, MasterError("h:1", store.Errorf(store.ObjectNotFound, "key %q\n", "k")))
}

// TestAdminUnreachableMaster: a real dial of a closed port reads as
// "cannot reach master ADDR: connection refused".
func TestAdminUnreachableMaster(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	require.NoError(t, l.Close())
	a, err := DialAdmin(addr, 5*time.Second)
	require.NoError(t, err)
	defer a.Close()
	_, err = a.Stats(t.Context())
	require.ErrorIs(t, err, store.ErrRPCFail)
	assert.Equal(t, "cannot reach master "+addr+": connection refused", MasterError(addr, err))
}

// TestMasterErrorHA: an etcd:// master that does not answer says where
// to look.
func TestMasterErrorHA(t *testing.T) {
	err := rpcErr("get stats", grpcstatus.Error(codes.DeadlineExceeded, "context deadline exceeded"))
	assert.Equal(t, "cannot reach master etcd://h:2379: no answer before the deadline (etcd unreachable, or no master leads the cluster)", MasterError("etcd://h:2379", err))
}
