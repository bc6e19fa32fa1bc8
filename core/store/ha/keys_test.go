package ha

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/mooncake-go/mooncake/core/store/master"
)

// TestReplicateBinaryKeys: keys that are not UTF-8 or hold NUL reach a
// master loaded from etcd byte for byte, through the snapshot and through
// the log (commits and removals), and the log holds no U+FFFD for them.
func TestReplicateBinaryKeys(t *testing.T) {
	cli := etcdClient(t)
	ctx := testCtx(t)
	const cluster = "binary-keys"
	l := &locked{m: newMaster(t, 1)}
	rep := NewReplicator(ReplicatorConfig{Client: cli, ClusterID: cluster, Do: l.Do, SnapshotEvery: -1, SnapshotInterval: -1})
	defer rep.Close()
	rep.Attach(l.m)
	long := strings.Repeat("\xff", master.MaxKeyLen)
	put := func(keys ...string) {
		l.Do(func(m *master.Master) {
			for _, k := range keys {
				_, err := m.PutStart("w", k, 64, master.ReplicaConfig{ReplicaNum: 1})
				require.NoError(t, err, "put %q", k)
				require.NoError(t, m.PutEnd("w", k))
			}
		})
	}
	l.Do(func(m *master.Master) { require.NoError(t, m.MountSegment(seg("s", 1<<20), "node")) })
	put("\xff\xfe", "\xff\xfd", "a\x00b", "gone\x80", "plain")
	require.NoError(t, rep.Sync(ctx))
	require.NoError(t, rep.Snapshot(ctx)) // these are in the snapshot
	put("\x00", long, "later\xc3")
	l.Do(func(m *master.Master) {
		require.NoError(t, m.Remove("gone\x80", true)) // in the snapshot, removed in the log
		require.NoError(t, m.Remove("later\xc3", true))
	})
	require.NoError(t, rep.Sync(ctx))

	// The log carries the keys as key_bytes, never coerced to U+FFFD.
	resp, err := cli.Get(ctx, keysFor(cluster).oplog(), clientv3.WithPrefix())
	require.NoError(t, err)
	require.NotEmpty(t, resp.Kvs)
	var logged strings.Builder
	for _, kv := range resp.Kvs {
		logged.Write(kv.Value)
	}
	assert.Contains(t, logged.String(), `"key_bytes"`)
	assert.NotContains(t, logged.String(), `\ufffd`)
	assert.NotContains(t, logged.String(), "\uFFFD")

	var want master.State
	l.Do(func(m *master.Master) { want = canonical(m.Dump()) })
	got, ls := loadFresh(t, ctx, cli, cluster)
	assert.NotZero(t, ls.SnapshotSeq)
	assert.NotZero(t, ls.Replayed)
	assert.Equal(t, want, canonical(got.Dump()))
	for _, k := range []string{"\xff\xfe", "\xff\xfd", "a\x00b", "plain", "\x00", long} {
		ok, err := got.ExistKey(k)
		require.NoError(t, err)
		assert.True(t, ok, "%q missing on the loaded master", k)
	}
	for _, k := range []string{"gone\x80", "later\xc3"} {
		ok, err := got.ExistKey(k)
		require.NoError(t, err)
		assert.False(t, ok, "removed %q came back", k)
	}
}

// TestWireKeys: UTF-8 keys keep the JSON form written before keys were
// bytes (so old logs and snapshots load, and are written alike); other
// keys round-trip as key_bytes; an entry with both forms is corrupt.
func TestWireKeys(t *testing.T) {
	// A snapshot and a log batch as a master wrote them before keys were
	// bytes.
	const oldSnap = `{"seq":7,"segments":[{"id":"s","name":"node-s","base":1073741824,"size":1048576,"protocol":"tcp","client":"node"}],` +
		`"objects":[{"key":"k/1","size":64,"owner":"w","replicas":[{"seg":"s","off":0}]},{"key":"日本","size":64,"owner":"w","replicas":[{"seg":"s","off":64}]}]}`
	var snap wireSnapshot
	require.NoError(t, json.Unmarshal([]byte(oldSnap), &snap))
	st, err := snap.state()
	require.NoError(t, err)
	m := newMaster(t, 1)
	require.NoError(t, m.Restore(st))
	for _, k := range []string{"k/1", "日本"} {
		ok, err := m.ExistKey(k)
		require.NoError(t, err)
		assert.True(t, ok, "%q from an old snapshot", k)
	}
	es, err := decodeBatch("old", []byte(`[{"op":"remove","key":"k/1"}]`))
	require.NoError(t, err)
	require.NoError(t, apply(m, es[0]))
	ok, err := m.ExistKey("k/1")
	require.NoError(t, err)
	assert.False(t, ok)

	// UTF-8 keys are written exactly as before.
	b, err := json.Marshal(toWireObject(master.ObjectRecord{Key: "k/1", Size: 64}))
	require.NoError(t, err)
	assert.JSONEq(t, `{"key":"k/1","size":64,"replicas":[]}`, string(b))

	for _, k := range []string{"\xff\xfe", "a\x00b", "ok\xc3", strings.Repeat("\x80", master.MaxKeyLen)} {
		b, err := json.Marshal(toWireObject(master.ObjectRecord{Key: k, Size: 64}))
		require.NoError(t, err)
		if k == "a\x00b" { // NUL is UTF-8: the plain form, escaped by JSON
			assert.Contains(t, string(b), `"key":"a\u0000b"`)
		} else {
			assert.NotContains(t, string(b), `"key":`, "%q", k)
			assert.Contains(t, string(b), `"key_bytes":`, "%q", k)
		}
		var w wireObject
		require.NoError(t, json.Unmarshal(b, &w))
		rec, err := w.record()
		require.NoError(t, err)
		assert.Equal(t, k, rec.Key)
	}
	var w wireObject
	require.NoError(t, json.Unmarshal([]byte(`{"key":"a\u0000b","size":1,"replicas":[]}`), &w))
	rec, err := w.record()
	require.NoError(t, err)
	assert.Equal(t, "a\x00b", rec.Key)

	require.NoError(t, json.Unmarshal([]byte(`{"key":"x","key_bytes":"/w==","size":1,"replicas":[]}`), &w))
	_, err = w.record()
	require.ErrorIs(t, err, ErrCorrupt)
	es, err = decodeBatch("bad", []byte(`[{"op":"remove","key":"x","key_bytes":"/w=="}]`))
	require.NoError(t, err)
	require.ErrorIs(t, apply(m, es[0]), ErrCorrupt)
}
