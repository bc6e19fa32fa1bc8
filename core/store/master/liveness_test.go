package master

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mooncake-go/mooncake/core/store"
)

// TestPing: a client is told to remount until it mounts or remounts, however
// often it pings; then its pings keep it alive.
func TestPing(t *testing.T) {
	m, clk := newTestMaster(t, func(c *Config) { c.ClientTTL = 10 * time.Second })
	for i := range 3 {
		need, err := m.Ping("c1")
		require.NoError(t, err)
		require.True(t, need, "ping %d before any mount", i)
		clk.Advance(5 * time.Second)
	}
	require.NoError(t, m.ReMountSegment(nil, "c1"), "a client without segments remounts with none")
	for i := range 3 {
		need, err := m.Ping("c1")
		require.NoError(t, err)
		require.False(t, need, "ping %d after the remount", i)
		clk.Advance(5 * time.Second)
	}
	need, err := m.Ping("c2")
	require.NoError(t, err)
	require.True(t, need, "first ping of another client")
	assert.Equal(t, 2, m.Stats().Clients)
	_, err = m.Ping("")
	require.ErrorIs(t, err, store.ErrInvalidParams)
}

// TestUnknownClient: a restarted master (or one that expired a client) knows
// neither the client nor its segments. Calls other than Ping and the mounts
// are served but register nothing, so the client's next ping still asks it
// to remount (the bug: a put registered it and its segment never came back).
func TestUnknownClient(t *testing.T) {
	for _, tc := range []struct {
		name string
		call func(t *testing.T, m *Master)
	}{
		{"PutStart", func(t *testing.T, m *Master) {
			_, err := m.PutStart("c1", "k", 64, ReplicaConfig{ReplicaNum: 1})
			require.NoError(t, err, "an unknown client may put on other clients' segments")
		}},
		{"PutStart without space", func(t *testing.T, m *Master) {
			_, err := m.PutStart("c1", "k", 1<<20, ReplicaConfig{ReplicaNum: 1})
			require.ErrorIs(t, err, store.ErrNoAvailableHandle)
		}},
		{"PutStart and PutEnd", func(t *testing.T, m *Master) {
			_, err := m.PutStart("c1", "k", 64, ReplicaConfig{ReplicaNum: 1})
			require.NoError(t, err)
			require.NoError(t, m.PutEnd("c1", "k"))
		}},
		{"PutStart and PutRevoke", func(t *testing.T, m *Master) {
			_, err := m.PutStart("c1", "k", 64, ReplicaConfig{ReplicaNum: 1})
			require.NoError(t, err)
			require.NoError(t, m.PutRevoke("c1", "k"))
		}},
		{"UnmountSegment of a segment it lost", func(t *testing.T, m *Master) {
			require.ErrorIs(t, m.UnmountSegment("c1-seg", "c1"), store.ErrSegmentNotFound)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, _ := newTestMaster(t, nil)
			mustMount(t, m, "node", testSeg("n", 4096))
			tc.call(t, m)
			st := m.Stats()
			require.Equal(t, 1, st.Clients, "the unknown client was registered: %+v", st)
			need, err := m.Ping("c1")
			require.NoError(t, err)
			require.True(t, need, "the client's segments are unknown: it must remount")
			need, err = m.Ping("c1")
			require.NoError(t, err)
			require.True(t, need, "a client that did not remount is asked again")
			seg := testSeg("c1-seg", 4096)
			require.NoError(t, m.ReMountSegment([]Segment{seg}, "c1"))
			need, err = m.Ping("c1")
			require.NoError(t, err)
			require.False(t, need)
			info, err := m.QuerySegment(seg.ID)
			require.NoError(t, err)
			assert.Equal(t, "c1", info.Client)
		})
	}
}

// TestUnknownClientExpiry: a client that only pinged (and never mounted)
// expires with its TTL like any other; calls from it after that do not
// bring it back.
func TestUnknownClientExpiry(t *testing.T) {
	m, clk := newTestMaster(t, func(c *Config) { c.ClientTTL = 10 * time.Second })
	mustMount(t, m, "node", testSeg("n", 4096))
	need, err := m.Ping("c1")
	require.NoError(t, err)
	require.True(t, need)
	clk.Advance(6 * time.Second)
	_, err = m.Ping("node") // keep the node alive
	require.NoError(t, err)
	// c1's put refreshes the TTL of a client the master knows.
	_, err = m.PutStart("c1", "k", 64, ReplicaConfig{ReplicaNum: 1})
	require.NoError(t, err)
	clk.Advance(6 * time.Second)
	m.Tick()
	require.Equal(t, 2, m.Stats().Clients, "a put refreshes a known client's TTL")
	clk.Advance(5 * time.Second)
	_, err = m.Ping("node")
	require.NoError(t, err)
	m.Tick()
	require.Equal(t, 1, m.Stats().Clients, "c1 expired")
	require.NoError(t, m.PutEnd("c1", "k"))
	require.Equal(t, 1, m.Stats().Clients, "PutEnd from an expired client registered it")
}
