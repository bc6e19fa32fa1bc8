package abitest

import (
	"bytes"
	"encoding/json"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestTransferEngineABI11 drives the 1.1 functions of transfer_engine.h
// through libmooncake.so: two engines in P2PHANDSHAKE mode (no metadata
// service) move bytes, list buffers, wait for a batch, probe and notify
// each other.
func TestTransferEngineABI11(t *testing.T) {
	l := load(t)
	lockThread(t)
	require.GreaterOrEqual(t, l.teABIVersion()&0xFFFF, uint32(1), "mc_te_abi_version minor")

	a := newEngine(t, l, "P2PHANDSHAKE", "ignored-a")
	b := newEngine(t, l, "P2PHANDSHAKE", "ignored-b")
	name := func(e uintptr) string {
		var out cbuf
		l.expect(t, "mc_te_get_local_name", l.localName(e, &out), "MC_OK")
		s := l.readBuf(&out)
		require.NotEmpty(t, s)
		require.Equal(t, byte(0), s[len(s)-1], "name is NUL-terminated")
		return string(s[:len(s)-1])
	}
	nameA, nameB := name(a), name(b)
	var port int32
	l.expect(t, "mc_te_get_rpc_port", l.rpcPort(b, &port), "MC_OK")
	assert.Equal(t, "127.0.0.1:"+strconv.Itoa(int(port)), nameB, "P2P segment name is host:rpc port")

	ra, rb := region(t, mib), region(t, mib)
	for i := range ra.Bytes() {
		ra.Bytes()[i] = byte(i*13 + 1)
	}
	l.expect(t, "register a", l.register(a, uintptr(ra.Addr()), mib, nil, 1), "MC_OK")
	var peer int32
	l.expect(t, "open b", l.openSegment(a, cstr(nameB), &peer), "MC_OK")

	var count uintptr
	l.expect(t, "buffers of b before it registered", l.segBuffers(a, peer, nil, 0, &count), "MC_OK")
	assert.Zero(t, count)
	l.expect(t, "register b", l.register(b, uintptr(rb.Addr()), mib, nil, 1), "MC_OK")
	l.expect(t, "refresh b", l.refreshSeg(a, peer), "MC_OK")
	bufs := make([]bufferDesc, 2)
	l.expect(t, "buffers of b", l.segBuffers(a, peer, &bufs[0], 2, &count), "MC_OK")
	require.Equal(t, uintptr(1), count)
	assert.Equal(t, bufferDesc{Addr: rb.Addr(), Length: mib}, bufs[0])
	l.expect(t, "own buffers, no room", l.segBuffers(a, int32(l.c(t, "MC_TE_LOCAL_SEGMENT")), nil, 0, &count), "MC_OK")
	assert.Equal(t, uintptr(1), count)

	var batch uint64
	l.expect(t, "allocate", l.allocBatch(a, 2, &batch), "MC_OK")
	reqs := []request{
		{Opcode: l.c(t, "MC_TE_OPCODE_WRITE"), Source: uintptr(ra.Addr()), TargetID: peer, TargetOffset: rb.Addr(), Length: mib / 2},
		{Opcode: l.c(t, "MC_TE_OPCODE_WRITE"), Source: uintptr(ra.Addr() + mib/2), TargetID: peer, TargetOffset: rb.Addr() + mib/2, Length: mib / 2},
	}
	l.expect(t, "submit", l.submit(a, batch, &reqs[0], 2), "MC_OK")
	var st status
	l.expect(t, "wait", l.waitBatch(a, batch, 30000, &st), "MC_OK")
	require.Equal(t, l.c(t, "MC_TE_STATUS_COMPLETED"), st.Status, l.lastError())
	assert.Equal(t, uint64(mib), st.TransferredBytes)
	require.True(t, bytes.Equal(ra.Bytes(), rb.Bytes()), "bytes differ after COMPLETED")
	l.expect(t, "free", l.freeBatch(a, batch), "MC_OK")

	// A failed request makes the whole batch FAILED, with the reason.
	l.expect(t, "allocate", l.allocBatch(a, 1, &batch), "MC_OK")
	bad := []request{{Opcode: l.c(t, "MC_TE_OPCODE_WRITE"), Source: uintptr(ra.Addr()), TargetID: peer, TargetOffset: rb.Addr() + mib - 1, Length: 2}}
	l.expect(t, "submit bad", l.submit(a, batch, &bad[0], 1), "MC_OK")
	// MC_OK, and mc_last_error names the failure (as mc_te_get_status).
	require.Equal(t, l.c(t, "MC_OK"), l.waitBatch(a, batch, 30000, &st))
	assert.Equal(t, l.c(t, "MC_TE_STATUS_FAILED"), st.Status)
	assert.Contains(t, l.lastError(), "task 0")
	l.expect(t, "free", l.freeBatch(a, batch), "MC_OK")
	l.expect(t, "wait on freed batch", l.waitBatch(a, batch, 0, &st), "MC_ERR_INVALID_HANDLE")
	l.expect(t, "wait with out NULL", l.waitBatch(a, batch, 0, nil), "MC_ERR_INVALID_ARGUMENT")

	l.expect(t, "probe b", l.probe(a, cstr(nameB)), "MC_OK")
	l.expect(t, "probe nobody", l.probe(a, cstr("127.0.0.1:1")), "MC_ERR_NOT_FOUND")
	l.expect(t, "probe NULL", l.probe(a, nil), "MC_ERR_INVALID_ARGUMENT")
	l.expect(t, "notify b", l.sendNotify(a, cstr(nameB), cstr(nameA), cstr("kv ready")), "MC_OK")
	l.expect(t, "notify NULL msg", l.sendNotify(a, cstr(nameB), cstr(nameA), nil), "MC_ERR_INVALID_ARGUMENT")
	var out cbuf
	l.expect(t, "notifies of b", l.getNotifies(b, &out), "MC_OK")
	var got []map[string]string
	require.NoError(t, json.Unmarshal(l.readBuf(&out), &got))
	assert.Equal(t, []map[string]string{{"name": nameA, "notify_msg": "kv ready"}}, got)
	l.expect(t, "notifies of b again", l.getNotifies(b, &out), "MC_OK")
	assert.Equal(t, "[]", string(l.readBuf(&out)))
	l.expect(t, "notifies out NULL", l.getNotifies(b, nil), "MC_ERR_INVALID_ARGUMENT")

	l.expect(t, "buffers count NULL", l.segBuffers(a, peer, nil, 0, nil), "MC_ERR_INVALID_ARGUMENT")
	l.expect(t, "buffers out NULL", l.segBuffers(a, peer, nil, 1, &count), "MC_ERR_INVALID_ARGUMENT")
	l.expect(t, "buffers unknown id", l.segBuffers(a, 77, nil, 0, &count), "MC_ERR_NOT_FOUND")
	l.expect(t, "refresh unknown id", l.refreshSeg(a, 77), "MC_ERR_NOT_FOUND")
	l.expect(t, "rpc port out NULL", l.rpcPort(a, nil), "MC_ERR_INVALID_ARGUMENT")
	l.expect(t, "name out NULL", l.localName(a, nil), "MC_ERR_INVALID_ARGUMENT")

	l.expect(t, "unregister b", l.unregister(b, uintptr(rb.Addr())), "MC_OK")
	l.expect(t, "unregister a", l.unregister(a, uintptr(ra.Addr())), "MC_OK")
	l.expect(t, "destroy b", l.destroy(b), "MC_OK")
	msg := l.expect(t, "probe destroyed b", l.probe(a, cstr(nameB)), "MC_ERR_NOT_FOUND")
	assert.True(t, strings.HasPrefix(msg, "mc_te_probe: "), msg)
	l.expect(t, "rpc port of destroyed b", l.rpcPort(b, &port), "MC_ERR_INVALID_HANDLE")
}

// TestTransferEngineABI11HTTP checks probes and notifications through an
// HTTP metadata server (the handshake address is published there).
func TestTransferEngineABI11HTTP(t *testing.T) {
	l := load(t)
	lockThread(t)
	meta := metaServer(t)
	a := newEngine(t, l, meta, "abi11-a")
	b := newEngine(t, l, meta, "abi11-b")
	l.expect(t, "probe b", l.probe(a, cstr("abi11-b")), "MC_OK")
	l.expect(t, "probe unknown", l.probe(a, cstr("abi11-nobody")), "MC_ERR_NOT_FOUND")
	l.expect(t, "notify b", l.sendNotify(a, cstr("abi11-b"), cstr("abi11-a"), cstr("m")), "MC_OK")
	var out cbuf
	l.expect(t, "notifies", l.getNotifies(b, &out), "MC_OK")
	assert.JSONEq(t, `[{"name":"abi11-a","notify_msg":"m"}]`, string(l.readBuf(&out)))
	var name cbuf
	l.expect(t, "name", l.localName(b, &name), "MC_OK")
	assert.Equal(t, "abi11-b\x00", string(l.readBuf(&name)))
}
