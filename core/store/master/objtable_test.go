package master

import (
	"math/rand/v2"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestObjTableAgainstMap runs random puts, replacements and deletions on
// an objTable and a Go map side by side; the table must agree on every
// lookup and listing, and shrink back once emptied.
func TestObjTableAgainstMap(t *testing.T) {
	for seed := range uint64(8) {
		rng := rand.New(rand.NewPCG(seed, 99))
		tab := newObjTable()
		ref := map[string]*object{}
		keys := 50 + rng.IntN(3000)
		key := func() string { return "k" + strconv.Itoa(rng.IntN(keys)) }
		for step := range 20000 {
			switch op := rng.IntN(10); {
			case op < 5 && step < 15000:
				o := &object{key: key()}
				tab.put(o)
				ref[o.key] = o
			case op < 8:
				k := key()
				tab.del(k)
				delete(ref, k)
			default:
				k := key()
				require.Same(t, ref[k], tab.get(k), "seed %d step %d: get(%q)", seed, step, k)
			}
			require.Equal(t, len(ref), tab.len(), "seed %d step %d", seed, step)
			if step%500 == 0 || step == 19999 {
				seen := map[string]bool{}
				for o := range tab.all {
					require.False(t, seen[o.key], "seed %d: %q listed twice", seed, o.key)
					seen[o.key] = true
					require.Same(t, ref[o.key], o)
				}
				require.Len(t, seen, len(ref))
				for k, o := range ref {
					require.Same(t, o, tab.get(k), "seed %d step %d: get(%q)", seed, step, k)
				}
			}
		}
		for k := range ref {
			tab.del(k)
		}
		assert.Zero(t, tab.len())
		assert.LessOrEqual(t, len(tab.slots), objTableMin, "seed %d: %d slots left after emptying", seed, len(tab.slots))
		assert.Nil(t, tab.get("k1"))
	}
}

// TestObjTableLoad: the table stays between 1/8 and 3/4 full while it
// grows and shrinks.
func TestObjTableLoad(t *testing.T) {
	tab := newObjTable()
	const n = 100_000
	for i := range n {
		tab.put(&object{key: strconv.Itoa(i)})
		require.LessOrEqual(t, tab.len()*4, len(tab.slots)*3)
	}
	for i := range n {
		tab.del(strconv.Itoa(i))
		if len(tab.slots) > objTableMin {
			require.GreaterOrEqual(t, tab.len()*8, len(tab.slots), "after %d deletions", i+1)
		}
	}
	require.Equal(t, objTableMin, len(tab.slots))
}

// TestObjectReplicas: the inline replica and objectExtra hold what was
// put, and objectExtra goes once nothing needs it.
func TestObjectReplicas(t *testing.T) {
	a, b := &segment{Segment: Segment{ID: "a"}}, &segment{Segment: Segment{ID: "b"}}
	var one [1]replica
	o := &object{}
	assert.Zero(t, o.nreps())
	assert.Empty(t, o.replicas(&one))

	o.addReplica(replica{seg: a, offset: 64})
	assert.Equal(t, []replica{{seg: a, offset: 64}}, o.replicas(&one))
	assert.Nil(t, o.x, "one contiguous replica lives inline")

	o.addReplica(replica{seg: b, offset: 128})
	assert.Equal(t, []replica{{seg: a, offset: 64}, {seg: b, offset: 128}}, o.replicas(&one))
	assert.Equal(t, 2, o.nreps())

	o.setReplicas([]replica{{seg: b, offset: 128}})
	assert.Equal(t, []replica{{seg: b, offset: 128}}, o.replicas(&one))
	assert.Nil(t, o.x, "back to inline")

	striped := replica{seg: a, offset: 0, stripe: []piece{{seg: a, offset: 0, size: 10}, {seg: b, offset: 0, size: 10}}}
	o.setReplicas([]replica{striped})
	assert.Nil(t, o.seg, "a striped replica is not inline")
	assert.Equal(t, []replica{striped}, o.replicas(&one))

	o.dropReplicas()
	assert.Zero(t, o.nreps())
	assert.Nil(t, o.x)

	tier := &diskTier{seg: a}
	o.setDisk(tier)
	o.addReplica(replica{seg: a, offset: 8})
	assert.Same(t, tier, o.disk())
	assert.Equal(t, 1, o.nreps())
	o.setTask(&tierTask{kind: TaskLoad})
	o.setDisk(nil)
	assert.NotNil(t, o.x, "the task is still there")
	o.setTask(nil)
	assert.Nil(t, o.x, "nothing left in objectExtra")
	assert.Equal(t, []replica{{seg: a, offset: 8}}, o.replicas(&one))
}

// TestOwnersInterned: objects written by one client share its id, which
// is dropped when the last of them leaves the table.
func TestOwnersInterned(t *testing.T) {
	m, _ := newTestMaster(t, nil)
	mustMount(t, m, "node", testSeg("a", 1<<20))
	for i := range 10 {
		mustPut(t, m, string([]byte("writer-1")), "k"+strconv.Itoa(i), 64, 1)
	}
	mustPut(t, m, "writer-2", "other", 64, 1)
	require.Len(t, m.owners.index, 2)
	in, err := m.Stat("k3")
	require.NoError(t, err)
	assert.Equal(t, "writer-1", in.Owner)
	for i := range 10 {
		require.NoError(t, m.Remove("k"+strconv.Itoa(i), false))
	}
	assert.Len(t, m.owners.index, 1, "writer-1 is no one's owner any more")
	_, ok := m.owners.index["writer-2"]
	assert.True(t, ok)
	// Its slot is reused.
	mustPut(t, m, "writer-3", "k0", 64, 1)
	assert.Len(t, m.owners.names, 2)
	require.ErrorContains(t, m.PutEnd("writer-1", "k0"), `written by "writer-3"`)
}

// TestObjSetShrinks: an objSet is rebuilt once under 1/8 of its peak and
// keeps every member across the rebuild.
func TestObjSetShrinks(t *testing.T) {
	s := newObjSet()
	objs := make([]*object, 4000)
	for i := range objs {
		objs[i] = &object{key: strconv.Itoa(i)}
		s.add(objs[i])
	}
	require.Equal(t, 4000, s.peak)
	for _, o := range objs[10:] {
		s.del(o)
	}
	assert.Equal(t, 10, s.len())
	assert.Less(t, s.peak, 4000/8, "not rebuilt")
	for _, o := range objs[:10] {
		_, ok := s.m[o]
		assert.True(t, ok, "%q lost in the rebuild", o.key)
	}
}
