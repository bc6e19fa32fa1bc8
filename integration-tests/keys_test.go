package integration

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mooncake-go/mooncake/core/metadata/etcdmeta/etcdtest"
	"github.com/mooncake-go/mooncake/core/store"
	"github.com/mooncake-go/mooncake/core/store/client"
	"github.com/mooncake-go/mooncake/core/store/master"
)

// binaryKeys are keys upstream accepts (std::string: any bytes) that are
// not UTF-8 or hold NUL: they used to fail with RPC_FAIL because the wire
// carried keys in proto string fields.
var binaryKeys = []string{"\xff\xfe", "a\x00b", "\x00", "\x80tail", "ok\xc3", strings.Repeat("\xfe", master.MaxKeyLen)}

// TestBinaryKeys round-trips keys that are not UTF-8 through every key
// operation of the Go client against a real master over gRPC, and checks
// that empty and too long keys are refused saying why.
func TestBinaryKeys(t *testing.T) {
	_, c := startPool(t, master.Config{})
	ctx := testContext(t)
	r := newRand(t, 15)

	vals := map[string][]byte{}
	for i, k := range binaryKeys {
		v := randBytes(r, 100+i)
		vals[k] = v
		require.NoError(t, c.Put(ctx, k, v, nil), "put %q", k)
		got, err := c.Get(ctx, k)
		require.NoError(t, err, "get %q", k)
		assert.Equal(t, v, got, "value of %q", k)
		ok, err := c.IsExist(ctx, k)
		require.NoError(t, err, "exist %q", k)
		assert.True(t, ok, "exist %q", k)
		n, err := c.GetSize(ctx, k)
		require.NoError(t, err)
		assert.Equal(t, uint64(len(v)), n)
		in, err := c.Stat(ctx, k)
		require.NoError(t, err)
		assert.Equal(t, k, in.Key)
	}
	// A key differing from another only in a byte that is not UTF-8 is a
	// key of its own, not a U+FFFD alias.
	require.NoError(t, c.Put(ctx, "\xff\xfd", []byte("other"), nil))
	got, err := c.Get(ctx, "\xff\xfe")
	require.NoError(t, err)
	assert.Equal(t, vals["\xff\xfe"], got)

	// Zero-copy batches.
	buf := registeredRegion(t, c, 1<<20)
	bkeys := []string{"batch\xff1", "batch\x002", "batch\xc0\xaf"}
	srcs := make([][]byte, len(bkeys))
	for i := range bkeys {
		srcs[i] = buf[i*4096 : i*4096+1000+i]
		fillRandom(r, srcs[i])
	}
	for i, err := range c.BatchPutFrom(ctx, bkeys, srcs, nil) {
		require.NoError(t, err, "batch put %q", bkeys[i])
	}
	dsts := make([][]byte, len(bkeys))
	for i := range bkeys {
		dsts[i] = buf[(64+i)*4096 : (65+i)*4096]
	}
	n, errs := c.BatchGetInto(ctx, bkeys, dsts)
	for i := range bkeys {
		require.NoError(t, errs[i], "batch get %q", bkeys[i])
		assert.Equal(t, srcs[i], dsts[i][:n[i]], "value of %q", bkeys[i])
	}
	exist, err := c.BatchIsExist(ctx, append(bkeys, "batch\xffnone"))
	require.NoError(t, err)
	assert.Equal(t, []bool{true, true, true, false}, exist)

	// Listing returns the keys' bytes, in byte order.
	ks, total, err := c.ListKeys(ctx, "batch", 0)
	require.NoError(t, err)
	require.Equal(t, 3, total)
	assert.Equal(t, []string{"batch\x002", "batch\xc0\xaf", "batch\xff1"}, []string{ks[0].Key, ks[1].Key, ks[2].Key})
	ks, _, err = c.ListKeys(ctx, "\xff", 0)
	require.NoError(t, err)
	require.Len(t, ks, 2)
	assert.Equal(t, "\xff\xfd", ks[0].Key)
	assert.Equal(t, "\xff\xfe", ks[1].Key)

	// Removal: one key, a batch, and by regex (a stray byte is U+FFFD).
	require.NoError(t, c.Remove(ctx, "\xff\xfd", true))
	for i, err := range c.BatchRemove(ctx, []string{"batch\x002", "a\x00b"}, true) {
		require.NoError(t, err, "batch remove %d", i)
	}
	removed, err := c.RemoveByRegex(ctx, `^batch\x{FFFD}`, true)
	require.NoError(t, err)
	assert.Equal(t, 2, removed) // batch\xff1 and batch\xc0\xaf (two stray bytes)
	for _, k := range []string{"\xff\xfd", "batch\x002", "a\x00b", "batch\xff1", "batch\xc0\xaf"} {
		ok, err := c.IsExist(ctx, k)
		require.NoError(t, err)
		assert.False(t, ok, "%q still exists", k)
	}
	for _, k := range []string{"\xff\xfe", "\x00", "\x80tail"} {
		ok, err := c.IsExist(ctx, k)
		require.NoError(t, err)
		assert.True(t, ok, "%q was removed with another key", k)
	}
	_, err = c.RemoveByRegex(ctx, "\xff", true)
	require.ErrorIs(t, err, store.ErrInvalidParams)
	assert.Contains(t, err.Error(), "not UTF-8")

	// Empty and too long keys: a clear error per operation.
	long := strings.Repeat("\xff", master.MaxKeyLen+1)
	for _, tc := range []struct {
		key  string
		want error
		msg  string
	}{
		{"", store.ErrInvalidParams, "key is empty"},
		{long, store.ErrInvalidKey, "key of 4097 bytes is longer than the limit of 4096 bytes"},
	} {
		for name, op := range map[string]func() error{
			"put":    func() error { return c.Put(ctx, tc.key, []byte("v"), nil) },
			"get":    func() error { _, err := c.Get(ctx, tc.key); return err },
			"exist":  func() error { _, err := c.IsExist(ctx, tc.key); return err },
			"remove": func() error { return c.Remove(ctx, tc.key, true) },
			"size":   func() error { _, err := c.GetSize(ctx, tc.key); return err },
			"batch put": func() error {
				return c.BatchPutFrom(ctx, []string{"fine", tc.key}, [][]byte{buf[:10], buf[4096 : 4096+10]}, nil)[1]
			},
		} {
			err := op()
			require.ErrorIs(t, err, tc.want, "%s %q", name, tc.key[:min(len(tc.key), 8)])
			assert.Contains(t, err.Error(), tc.msg, name)
		}
	}
	ok, err := c.IsExist(ctx, "fine")
	require.NoError(t, err)
	assert.True(t, ok, "a bad key failed the good key of its batch")
}

// TestHABinaryKeys: keys that are not UTF-8 survive a failover: the
// standby that takes over (from the snapshot and the log) has each of
// them in its table, byte for byte, and serves their values.
func TestHABinaryKeys(t *testing.T) {
	ep := etcdtest.Start(t) // skips under -short
	ctx, cancel := context.WithTimeout(context.Background(), haTestTimeout)
	defer cancel()
	h := startHA(t, ep, haOptions{Cluster: "ha_binary_keys", Masters: 2, SnapshotEvery: 4, LogCloseErrors: true})
	old := h.waitLeader(ctx)
	for i := range 2 {
		h.client(ctx, client.Config{LocalHostname: "keys-node-" + string(rune('a'+i)), GlobalSegmentSize: 8 << 20})
	}
	w := h.client(ctx, client.Config{LocalHostname: "keys-writer", LocalBufferSize: 8 << 20})
	r := newRand(t, 16)
	vals := map[string][]byte{}
	for i, k := range append(binaryKeys, "\xff\xfd", "doomed\xff") {
		vals[k] = randBytes(r, 64+i)
		require.NoError(t, w.Put(ctx, k, vals[k], &client.PutOptions{ReplicaNum: 2}), "put %q", k)
	}
	require.NoError(t, w.Remove(ctx, "doomed\xff", true))
	delete(vals, "doomed\xff")

	h.kill(old)
	pollUntil(t, ctx, "a new leader", func() bool { l := h.leader(); return l != nil && l != old })
	nl := h.newLeader(old)
	nl.Server.Do(func(m *master.Master) {
		for k := range vals {
			in, err := m.Stat(k)
			if assert.NoError(t, err, "%q on the new leader", k) {
				assert.Equal(t, k, in.Key)
				assert.Equal(t, uint64(len(vals[k])), in.Size)
			}
		}
		ok, err := m.ExistKey("doomed\xff")
		assert.NoError(t, err)
		assert.False(t, ok, "a removed key came back")
		assert.Equal(t, len(vals), m.Stats().Objects)
	})
	for k, v := range vals {
		var got []byte
		require.NoError(t, retry(ctx, func() (err error) { got, err = w.Get(ctx, k); return err }), "get %q after failover", k)
		assert.Equal(t, v, got, "value of %q after failover", k)
	}
}
