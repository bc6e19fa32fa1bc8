package master

import "hash/maphash"

// objTable is the object table: key -> *object, an open-addressing hash
// table with linear probing over a power-of-two array of pointers. Each
// object holds its own key, so a slot costs 8 bytes, against a Go map's
// string header, pointer and control byte per slot (map[string]*object
// costs 40-57 bytes per key at its usual load; this one 11-21). It grows
// at 3/4 load and, unlike a Go map, shrinks: once fewer than 1/8 of its
// slots are used it is rebuilt at 1/4 to 1/2 load, so a master that had
// a million objects gives that memory back when they are removed.
// Deletion shifts the following entries back (no tombstones), so lookups
// stay short under churn.
//
// The hash is hash/maphash with a seed drawn per table (not from
// Config.Rand): keys are chosen by clients, and a fixed hash would let one
// choose keys that all collide. Only the order of all() depends on it, and
// nothing observable depends on that order (Go maps iterate in random
// order too). Not safe for concurrent use.
type objTable struct {
	seed  maphash.Seed
	slots []*object // len is 0 or a power of two; nil = empty slot
	n     int       // objects in the table
}

// objTableMin is the smallest non-empty table, in slots.
const objTableMin = 64

func newObjTable() *objTable { return &objTable{seed: maphash.MakeSeed()} }

func (t *objTable) len() int { return t.n }

// home is key's preferred slot.
func (t *objTable) home(key string) int {
	return int(maphash.String(t.seed, key) & uint64(len(t.slots)-1))
}

// get returns the object under key, or nil.
func (t *objTable) get(key string) *object {
	if t.n == 0 {
		return nil
	}
	mask := len(t.slots) - 1
	for i := t.home(key); ; i = (i + 1) & mask {
		o := t.slots[i]
		if o == nil {
			return nil
		}
		if o.key == key {
			return o
		}
	}
}

// put stores o under o.key, replacing any object there.
func (t *objTable) put(o *object) {
	if (t.n+1)*4 > len(t.slots)*3 {
		t.resize(max(objTableMin, 2*len(t.slots)))
	}
	mask := len(t.slots) - 1
	for i := t.home(o.key); ; i = (i + 1) & mask {
		x := t.slots[i]
		if x == nil {
			t.slots[i] = o
			t.n++
			return
		}
		if x.key == o.key {
			t.slots[i] = o
			return
		}
	}
}

// del removes the object under key, if any, and shrinks a sparse table.
func (t *objTable) del(key string) {
	if t.n == 0 {
		return
	}
	mask := len(t.slots) - 1
	i := t.home(key)
	for {
		o := t.slots[i]
		if o == nil {
			return
		}
		if o.key == key {
			break
		}
		i = (i + 1) & mask
	}
	// Backward-shift deletion: move up every later entry of the run whose
	// home slot does not lie cyclically in (i, j].
	for j := (i + 1) & mask; ; j = (j + 1) & mask {
		o := t.slots[j]
		if o == nil {
			break
		}
		h := t.home(o.key)
		if (j > i && (h <= i || h > j)) || (j < i && h <= i && h > j) {
			t.slots[i] = o
			i = j
		}
	}
	t.slots[i] = nil
	t.n--
	if len(t.slots) > objTableMin && t.n*8 < len(t.slots) {
		size := objTableMin
		for size < 2*t.n {
			size *= 2
		}
		t.resize(size)
	}
}

// resize rehashes every object into a new array of size slots.
func (t *objTable) resize(size int) {
	old := t.slots
	t.slots = make([]*object, size)
	t.n = 0
	mask := size - 1
	for _, o := range old {
		if o == nil {
			continue
		}
		i := t.home(o.key)
		for t.slots[i] != nil {
			i = (i + 1) & mask
		}
		t.slots[i] = o
		t.n++
	}
}

// all yields every object; the table must not change meanwhile.
func (t *objTable) all(yield func(*object) bool) {
	for _, o := range t.slots {
		if o != nil && !yield(o) {
			return
		}
	}
}
