package engine

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mooncake-go/mooncake/abi/cbridge"
	"github.com/mooncake-go/mooncake/core/metadata"
	"github.com/mooncake-go/mooncake/core/metadata/etcdmeta/etcdtest"
	"github.com/mooncake-go/mooncake/core/metadata/httpmeta"
	"github.com/mooncake-go/mooncake/core/transfer"
)

// Transfer engine ABI 1.1: metadata modes, segment buffers, batch waits,
// probes and notifications, through the Go layer.

// modes returns a connection string per metadata mode (etcd skipped under
// -short, as etcdtest does).
func modes(t *testing.T) map[string]func(t *testing.T) string {
	return map[string]func(t *testing.T) string{
		"http": metaURL,
		"etcd": func(t *testing.T) string { return "etcd://" + etcdtest.Start(t) },
		"p2p":  func(*testing.T) string { return metadata.P2PHandshake },
	}
}

// waitBatch waits for batch and returns the combined status.
func waitBatch(t *testing.T, e *teEngine, batch uint64) transfer.TaskStatus {
	t.Helper()
	st, err := e.batchStatus(batch, 30*time.Second)
	require.NoError(t, err)
	require.NotEqual(t, transfer.StatusWaiting, st.Status, "batch %d still running after 30 s", batch)
	return st
}

func TestMetadataModes(t *testing.T) {
	for mode, conn := range modes(t) {
		t.Run(mode, func(t *testing.T) {
			c := conn(t)
			a := mustEngine(t, c, "a")
			b := mustEngine(t, c, "b")
			if mode == "p2p" {
				for _, e := range []*teEngine{a, b} {
					assert.Equal(t, "127.0.0.1:"+strconv.Itoa(e.rpcPort()), e.localName(), "P2P segment name is host:rpc port")
				}
			} else {
				assert.Equal(t, "a", a.localName())
				assert.Equal(t, "b", b.localName())
				assert.NotZero(t, a.rpcPort())
			}
			ra, rb := mapped(t, 1<<20), mapped(t, 1<<20)
			for i := range ra.Bytes() {
				ra.Bytes()[i] = byte(i*7 + 3)
			}
			require.NoError(t, a.register(ra.Bytes(), "cpu:0", true))
			require.NoError(t, b.register(rb.Bytes(), "cpu:0", true))
			t.Cleanup(func() { a.unregister(ra.Addr()); b.unregister(rb.Addr()) })

			peer, err := a.openSegment(b.localName())
			require.NoError(t, err)
			bufs, err := a.segmentBuffers(peer)
			require.NoError(t, err)
			require.Len(t, bufs, 1)
			assert.Equal(t, rb.Addr(), bufs[0].Addr)
			assert.Equal(t, uint64(1<<20), bufs[0].Length)
			own, err := a.segmentBuffers(int32(transfer.LocalSegment))
			require.NoError(t, err)
			require.Len(t, own, 1)
			assert.Equal(t, ra.Addr(), own[0].Addr)

			batch, err := a.allocateBatch(2)
			require.NoError(t, err)
			require.NoError(t, a.submit(batch, []transfer.Request{
				{Op: transfer.Write, Source: ra.Addr(), Target: transfer.SegmentID(peer), TargetOffset: rb.Addr(), Length: 1 << 19},
				{Op: transfer.Write, Source: ra.Addr() + 1<<19, Target: transfer.SegmentID(peer), TargetOffset: rb.Addr() + 1<<19, Length: 1 << 19},
			}))
			st := waitBatch(t, a, batch)
			assert.Equal(t, transfer.StatusCompleted, st.Status, "%v", st.Err)
			assert.Equal(t, uint64(1<<20), st.TransferredBytes)
			require.NoError(t, a.freeBatch(batch))
			require.True(t, bytes.Equal(ra.Bytes(), rb.Bytes()), "bytes differ after the write")

			require.NoError(t, a.probe(b.localName()))
			require.NoError(t, a.sendNotify(b.localName(), a.localName(), "first"))
			require.NoError(t, a.sendNotify(b.localName(), "", ""))
			var got []map[string]string
			require.NoError(t, json.Unmarshal(b.notifies(), &got))
			assert.Equal(t, []map[string]string{{"name": a.localName(), "notify_msg": "first"}, {"name": "", "notify_msg": ""}}, got)
			assert.Equal(t, "[]", string(b.notifies()), "notifications are handed out once")
			assert.Equal(t, "[]", string(a.notifies()))

			unknown := "no-such-engine"
			if mode == "p2p" {
				unknown = "127.0.0.1:" + strconv.Itoa(freePort(t))
			}
			assert.Equal(t, cbridge.NotFound, cbridge.CodeOf(a.probe(unknown)), "probe of %s", unknown)
			assert.Equal(t, cbridge.NotFound, cbridge.CodeOf(a.sendNotify(unknown, "a", "x")))
			assert.Equal(t, cbridge.InvalidArgument, cbridge.CodeOf(a.probe("")))
		})
	}
}

// freePort is a port nothing listens on (closed right away).
func freePort(t *testing.T) int {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

func TestP2PBadPeerName(t *testing.T) {
	a := mustEngine(t, metadata.P2PHandshake, "ignored")
	assert.Equal(t, cbridge.NotFound, cbridge.CodeOf(a.probe("not-host-port")))
	_, err := a.openSegment("not-host-port")
	assert.Error(t, err)
}

func TestRefreshSegment(t *testing.T) {
	meta := metaURL(t)
	a, b := mustEngine(t, meta, "a"), mustEngine(t, meta, "b")
	peer, err := a.openSegment("b")
	require.NoError(t, err)
	bufs, err := a.segmentBuffers(peer)
	require.NoError(t, err)
	assert.Empty(t, bufs)
	r := mapped(t, 4096)
	require.NoError(t, b.register(r.Bytes(), "", true))
	t.Cleanup(func() { b.unregister(r.Addr()) })
	bufs, _ = a.segmentBuffers(peer)
	assert.Empty(t, bufs, "descriptor re-read without a refresh")
	require.NoError(t, a.refreshSegment(peer))
	bufs, err = a.segmentBuffers(peer)
	require.NoError(t, err)
	require.Len(t, bufs, 1)
	assert.Equal(t, r.Addr(), bufs[0].Addr)
	require.NoError(t, a.refreshSegment(int32(transfer.LocalSegment)))
	assert.Equal(t, cbridge.NotFound, cbridge.CodeOf(a.refreshSegment(99)))
	_, err = a.segmentBuffers(99)
	assert.Equal(t, cbridge.NotFound, cbridge.CodeOf(err))
}

func TestWaitBatch(t *testing.T) {
	a := mustEngine(t, metaURL(t), "a")
	r := mapped(t, 8192)
	require.NoError(t, a.register(r.Bytes(), "", true))
	t.Cleanup(func() { a.unregister(r.Addr()) })

	empty, err := a.allocateBatch(1)
	require.NoError(t, err)
	st, err := a.batchStatus(empty, 0)
	require.NoError(t, err)
	assert.Equal(t, transfer.StatusCompleted, st.Status, "a batch with nothing submitted is complete")

	batch, err := a.allocateBatch(3)
	require.NoError(t, err)
	require.NoError(t, a.submit(batch, []transfer.Request{
		{Op: transfer.Write, Source: r.Addr(), Target: transfer.LocalSegment, TargetOffset: r.Addr() + 4096, Length: 100},
		{Op: transfer.Write, Source: r.Addr(), Target: transfer.LocalSegment, TargetOffset: 4096, Length: 100}, // outside every buffer
		{Op: transfer.Read, Source: r.Addr(), Target: transfer.LocalSegment, TargetOffset: r.Addr() + 4096, Length: 0},
	}))
	st = waitBatch(t, a, batch)
	assert.Equal(t, transfer.StatusFailed, st.Status)
	assert.ErrorContains(t, st.Err, "task 1")
	assert.Equal(t, uint64(100), st.TransferredBytes)
	require.NoError(t, a.freeBatch(batch))
	_, err = a.batchStatus(batch, 0)
	assert.Equal(t, cbridge.InvalidHandle, cbridge.CodeOf(err))
}

// TestHandshakeKey checks the handshake address an engine publishes with a
// metadata service, honouring MC_TCP_BIND_ADDRESS, and its removal.
func TestHandshakeKey(t *testing.T) {
	meta := metaURL(t)
	client, err := httpmeta.NewClient(meta)
	require.NoError(t, err)
	defer client.Close()
	ctx := context.Background()
	b, err := newEngine(engineArgs{Conn: meta, Name: "b", Host: "", Env: map[string]string{"MC_TCP_BIND_ADDRESS": "127.0.0.1"}})
	require.NoError(t, err)
	v, err := client.Get(ctx, handshakeKey("", "b"))
	require.NoError(t, err)
	assert.JSONEq(t, fmt.Sprintf(`{"ip_or_host_name":"127.0.0.1","rpc_port":%d}`, b.rpcPort()), string(v))
	a := mustEngine(t, meta, "a")
	require.NoError(t, a.probe("b"))
	require.NoError(t, b.destroy())
	_, err = client.Get(ctx, handshakeKey("", "b"))
	assert.ErrorIs(t, err, metadata.ErrNotFound)
	assert.Equal(t, cbridge.NotFound, cbridge.CodeOf(a.probe("b")))
}
