package store

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mooncake-go/mooncake/abi/cbridge"
	"github.com/mooncake-go/mooncake/core/store/client"
)

// The Go layer of store.h 1.1.

func pattern(n, seed int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*7 + seed + i>>9)
	}
	return b
}

func TestPortRange(t *testing.T) {
	for _, c := range []struct {
		env    map[string]string
		lo, hi int
	}{
		{nil, 12300, 14300},
		{map[string]string{envMinPort: "20000", envMaxPort: "20010"}, 20000, 20010},
		{map[string]string{envMinPort: "20010", envMaxPort: "20000"}, 12300, 14300}, // min > max: defaults
		{map[string]string{envMinPort: "x", envMaxPort: "70000"}, 12300, 14300},
		{map[string]string{envMaxPort: "13000"}, 12300, 13000},
	} {
		lo, hi := portRange(c.env)
		assert.Equal(t, []int{c.lo, c.hi}, []int{lo, hi}, "env %v", c.env)
	}
}

func TestForceTCP(t *testing.T) {
	for v, want := range map[string]bool{"": false, "true": true, "TRUE": true, "1": true, "on": true, "yes": true, "false": false, "0": false, "no": false} {
		assert.Equal(t, want, forceTCP(map[string]string{envForceTCP: v}), "MC_FORCE_TCP=%q", v)
	}
	assert.False(t, forceTCP(nil))
	// A client set up with it still works (tcp only).
	t.Setenv(envForceTCP, "true")
	p := startMaster(t)
	mustStore(t, args(p, 16*mib, 0))
	s := mustStore(t, args(p, 0, mib))
	require.NoError(t, s.put("forced-tcp", []byte("over tcp")))
	buf := make([]byte, 16)
	n, err := s.get("forced-tcp", buf)
	require.NoError(t, err)
	assert.Equal(t, "over tcp", string(buf[:n]))
}

func TestSetupPortInUpstreamRange(t *testing.T) {
	p := startMaster(t)
	s := mustStore(t, args(p, 0, mib))
	_, port, err := net.SplitHostPort(s.name)
	require.NoError(t, err)
	n, err := strconv.Atoi(port)
	require.NoError(t, err)
	assert.GreaterOrEqual(t, n, 12300)
	assert.LessOrEqual(t, n, 14300)

	t.Setenv(envMinPort, "0") // not a port: the default range
	free := mustFreePort(t)
	t.Setenv(envMinPort, strconv.Itoa(free))
	t.Setenv(envMaxPort, strconv.Itoa(free))
	s2 := mustStore(t, args(p, 0, mib))
	assert.Equal(t, "127.0.0.1:"+strconv.Itoa(free), s2.name)
}

func mustFreePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

func TestCopyingBatches(t *testing.T) {
	p := startMaster(t)
	mustStore(t, args(p, 32*mib, 0))
	s := mustStore(t, args(p, 0, 2*mib))

	vals := [][]byte{pattern(1000, 1), pattern(64<<10, 2), pattern(3*mib, 3)}
	errs := s.batchPut([]string{"a", "b", "too-big"}, vals, nil)
	require.NoError(t, errs[0])
	require.NoError(t, errs[1])
	wantCode(t, "value larger than the local buffer", errs[2], cbridge.StoreBufferOverflow)

	require.NoError(t, s.putParts("parts", [][]byte{[]byte("ab"), []byte("cd"), []byte("e")}, nil))
	wantCode(t, "empty parts", s.putParts("none", nil, nil), cbridge.StoreInvalidParams)

	dsts := map[int][]byte{}
	n, gerrs := s.batchGet([]string{"a", "missing", "b", "parts", "a"}, func(i int, size uint64) ([]byte, error) {
		dsts[i] = make([]byte, size)
		return dsts[i], nil
	})
	require.NoError(t, gerrs[0])
	wantCode(t, "missing", gerrs[1], cbridge.StoreObjectNotFound)
	require.NoError(t, gerrs[2])
	require.NoError(t, gerrs[3])
	require.NoError(t, gerrs[4])
	assert.Equal(t, []int{1000, 0, 64 << 10, 5, 1000}, n)
	assert.Equal(t, vals[0], dsts[0])
	assert.Equal(t, vals[1], dsts[2])
	assert.Equal(t, []byte("abcde"), dsts[3])
	assert.Equal(t, vals[0], dsts[4])
	_, hasMissing := dsts[1]
	assert.False(t, hasMissing, "alloc called for a missing key")

	// A destination alloc refuses fails that key alone.
	_, gerrs = s.batchGet([]string{"a", "b"}, func(i int, size uint64) ([]byte, error) {
		if i == 0 {
			return make([]byte, size-1), nil
		}
		return make([]byte, size), nil
	})
	wantCode(t, "short destination", gerrs[0], cbridge.StoreBufferOverflow)
	require.NoError(t, gerrs[1])
}

func TestRangesOverStripedReplica(t *testing.T) {
	p := startMaster(t)
	// Two 1 MiB segments: a 1.5 MiB value fits neither and is striped.
	mustStore(t, args(p, mib, 0))
	mustStore(t, args(p, mib, 0))
	s := mustStore(t, args(p, 0, 4*mib))
	val := pattern(3*mib/2, 9)
	require.NoError(t, s.put("striped", val))
	text, err := s.replicaDesc([]string{"striped"}, []error{nil})
	require.NoError(t, err)
	var desc []descKey
	require.NoError(t, json.Unmarshal(text, &desc))
	require.Len(t, desc, 1)
	require.Len(t, desc[0].Replicas, 1)
	require.Greater(t, len(desc[0].Replicas[0].Slices), 1, "value not striped: %s", text)

	region := mapped(t, 3*mib)
	require.NoError(t, s.register(region.Bytes()))
	buf := region.Bytes()
	ranges := []client.Range{
		{Key: "striped", Offset: 0, Dst: buf[0:10]},
		{Key: "striped", Offset: mib - 5, Dst: buf[100 : 100+10]}, // crosses the slice boundary
		{Key: "striped", Offset: uint64(len(val)) - 7, Dst: buf[200:207]},
		{Key: "striped", Offset: uint64(len(val)) - 7, Dst: buf[300:308]}, // one byte past the end
		{Key: "missing", Offset: 0, Dst: buf[400:401]},
		{Key: "striped", Offset: 5, Dst: nil}, // empty: nothing moves
		{Key: "striped", Offset: 0, Dst: buf[mib : mib+len(val)]},
	}
	n, errs := s.batchGetRanges(ranges)
	require.NoError(t, errs[0])
	require.NoError(t, errs[1])
	require.NoError(t, errs[2])
	wantCode(t, "range past the end", errs[3], cbridge.StoreInvalidParams)
	wantCode(t, "missing key", errs[4], cbridge.StoreObjectNotFound)
	require.NoError(t, errs[5])
	require.NoError(t, errs[6])
	assert.Equal(t, []int{10, 10, 7, 0, 0, 0, len(val)}, n)
	assert.Equal(t, val[:10], buf[:10])
	assert.Equal(t, val[mib-5:mib+5], buf[100:110])
	assert.Equal(t, val[len(val)-7:], buf[200:207])
	assert.True(t, bytes.Equal(val, buf[mib:mib+len(val)]))
}

func TestRemovalAndDescriptors(t *testing.T) {
	p := startMaster(t)
	node := mustStore(t, args(p, 16*mib, 0))
	s := mustStore(t, args(p, 0, mib))
	for i := range 5 {
		require.NoError(t, s.put(fmt.Sprintf("rx-%d", i), []byte("v")))
	}
	require.NoError(t, s.put("keep", []byte("value")))

	text, err := s.replicaDesc([]string{"keep", "missing", ""}, []error{nil, nil, invalid("key is empty")})
	require.NoError(t, err)
	var desc []descKey
	require.NoError(t, json.Unmarshal(text, &desc))
	require.Len(t, desc, 3)
	assert.Equal(t, int32(0), desc[0].Code)
	require.Len(t, desc[0].Replicas, 1)
	r := desc[0].Replicas[0]
	assert.Equal(t, "COMPLETE", r.Status)
	assert.Equal(t, "memory", r.Kind)
	assert.Equal(t, uint64(5), r.Size)
	assert.Equal(t, node.name, r.Segment)
	assert.NotZero(t, r.Address)
	assert.Equal(t, int32(cbridge.StoreObjectNotFound), desc[1].Code)
	assert.Empty(t, desc[1].Replicas)
	assert.Equal(t, int32(cbridge.InvalidArgument), desc[2].Code)

	// keep is leased now (the descriptor read granted one).
	errs := s.batchRemove([]string{"rx-0", "missing", "keep"}, false)
	require.NoError(t, errs[0])
	wantCode(t, "missing", errs[1], cbridge.StoreObjectNotFound)
	wantCode(t, "leased", errs[2], cbridge.StoreObjectHasLease)

	count, err := s.removeByRegex("^rx-[12]$", false)
	require.NoError(t, err)
	assert.Equal(t, 2, count)
	_, err = s.removeByRegex("([", false)
	wantCode(t, "bad regex", err, cbridge.StoreInvalidParams)

	count, err = s.removeAll(false) // rx-3, rx-4; keep is leased
	require.NoError(t, err)
	assert.Equal(t, 2, count)
	count, err = s.removeAll(true)
	require.NoError(t, err)
	assert.Equal(t, 1, count)
	exist, err := s.batchIsExist([]string{"keep", "rx-4"})
	require.NoError(t, err)
	assert.Equal(t, []bool{false, false}, exist)

	require.NoError(t, s.health())
}

func TestHealthWhenMasterGone(t *testing.T) {
	p := startMaster(t)
	s := mustStore(t, args(p, 0, mib))
	require.NoError(t, s.health())
	p.Close()
	err := s.health()
	require.Error(t, err)
	c := cbridge.CodeOf(err)
	assert.True(t, c == cbridge.StoreRPCFail || c == cbridge.StoreRPCTimeout, "code %d: %v", c, err)
	assert.True(t, strings.Contains(err.Error(), "ping"), err.Error())
}
