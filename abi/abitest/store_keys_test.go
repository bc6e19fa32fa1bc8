package abitest

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// keyBytes returns key followed by a byte that is not part of it, so a
// call that honoured a NUL terminator or read past key_len would see
// another key: the pointer to pass with len(key).
func keyBytes(key string) *byte {
	b := append([]byte(key), 'X', 0)
	return &b[0]
}

// keyArrays copies keys, unterminated and each followed by 'X', into
// memory off the Go heap and returns the const char* const* and size_t
// arrays of the _n batch calls (no Go pointers in either).
func keyArrays(t *testing.T, keys ...string) (ptrs, lens []uintptr) {
	t.Helper()
	n := 1
	for _, k := range keys {
		n += len(k) + 1
	}
	r := region(t, n)
	off := 0
	for _, k := range keys {
		copy(r.Bytes()[off:], k)
		r.Bytes()[off+len(k)] = 'X'
		ptrs = append(ptrs, uintptr(r.Addr())+uintptr(off))
		lens = append(lens, uintptr(len(k)))
		off += len(k) + 1
	}
	return ptrs, lens
}

// TestStoreBinaryKeys: the _n functions carry keys as bytes (any byte,
// NUL included, not UTF-8) through every store call, byte for byte, and
// refuse NULL, empty and too long keys saying why.
func TestStoreBinaryKeys(t *testing.T) {
	l := load(t)
	lockThread(t)
	assert.GreaterOrEqual(t, l.c(t, "MC_STORE_ABI_VERSION_MINOR"), int32(1))
	m := startMaster(t)
	s := newStore(t, l, m, 32*mib, 4*mib)
	r := region(t, 64<<10)
	val := r.Bytes()[:5000]
	for i := range val {
		val[i] = byte(i*7 + 3)
	}
	out := region(t, 64<<10)
	long := strings.Repeat("\xfe", 4096)

	keys := []string{"\xff\xfe", "a\x00b", "\x00", "tail\x80", long}
	for i, k := range keys {
		n := uintptr(100 + i)
		l.expect(t, "put_n "+k[:min(len(k), 8)], l.storePutN(s, keyBytes(k), uintptr(len(k)), uintptr(r.Addr()), n), "MC_OK")
		var got uintptr
		l.expect(t, "get_n", l.storeGetN(s, keyBytes(k), uintptr(len(k)), uintptr(out.Addr()), 64<<10, &got), "MC_OK")
		require.Equal(t, n, got, "%q", k)
		assert.Equal(t, val[:n], out.Bytes()[:n], "%q", k)
		var size uint64
		l.expect(t, "get_size_n", l.storeGetSizeN(s, keyBytes(k), uintptr(len(k)), &size), "MC_OK")
		assert.Equal(t, uint64(n), size, "%q", k)
		assert.Equal(t, int32(1), l.storeIsExistN(s, keyBytes(k), uintptr(len(k))), "%q: %s", k, l.lastError())
	}
	// "a\x00b" is not "a"; the plain form of a key without NUL is the same
	// key as its _n form.
	assert.Equal(t, int32(0), l.storeIsExist(s, cstr("a")))
	l.expect(t, "put plain", l.storePut(s, cstr("plain"), uintptr(r.Addr()), 10), "MC_OK")
	assert.Equal(t, int32(1), l.storeIsExistN(s, keyBytes("plain"), 5))
	assert.Equal(t, int32(1), l.storeIsExist(s, cstr("tail\x80")))

	// Zero copy, single and batch.
	const blk = 4096
	src, dst := region(t, 8*blk), region(t, 8*blk)
	for i := range src.Bytes() {
		src.Bytes()[i] = byte(i*13 + i>>9)
	}
	l.expect(t, "register src", l.storeRegister(s, uintptr(src.Addr()), 8*blk), "MC_OK")
	l.expect(t, "register dst", l.storeRegister(s, uintptr(dst.Addr()), 8*blk), "MC_OK")
	bkeys := []string{"b\xff0", "b\x001", "b\xc3\x282"}
	kp, kl := keyArrays(t, bkeys...)
	sptrs := []uintptr{uintptr(src.Addr()), uintptr(src.Addr()) + blk, uintptr(src.Addr()) + 2*blk}
	dptrs := []uintptr{uintptr(dst.Addr()), uintptr(dst.Addr()) + blk, uintptr(dst.Addr()) + 2*blk}
	sizes := []uintptr{blk, blk, blk}
	codes := make([]int32, 3)
	l.expect(t, "batch_put_from_n", l.storeBatchPutFromN(s, &kp[0], &kl[0], &sptrs[0], &sizes[0], 3, &codes[0]), "MC_OK")
	assert.Equal(t, []int32{0, 0, 0}, codes)
	present := make([]int32, 3)
	l.expect(t, "batch_is_exist_n", l.storeBatchIsExistN(s, &kp[0], &kl[0], 3, &present[0]), "MC_OK")
	assert.Equal(t, []int32{1, 1, 1}, present)
	res := make([]int64, 3)
	l.expect(t, "batch_get_into_n", l.storeBatchGetIntoN(s, &kp[0], &kl[0], &dptrs[0], &sizes[0], 3, &res[0]), "MC_OK")
	assert.Equal(t, []int64{blk, blk, blk}, res)
	assert.Equal(t, src.Bytes()[:3*blk], dst.Bytes()[:3*blk])
	l.expect(t, "put_from_n", l.storePutFromN(s, keyBytes("z\xff"), 2, uintptr(src.Addr())+5*blk, 100), "MC_OK")
	clear(dst.Bytes())
	var read int64
	l.expect(t, "get_into_n", l.storeGetIntoN(s, keyBytes("z\xff"), 2, uintptr(dst.Addr()), blk, &read), "MC_OK")
	require.Equal(t, int64(100), read)
	assert.Equal(t, src.Bytes()[5*blk:5*blk+100], dst.Bytes()[:100])

	// Remove.
	l.expect(t, "remove_n", l.storeRemoveN(s, keyBytes("\xff\xfe"), 2, 1), "MC_OK")
	assert.Equal(t, int32(0), l.storeIsExistN(s, keyBytes("\xff\xfe"), 2))
	l.expect(t, "remove_n again", l.storeRemoveN(s, keyBytes("\xff\xfe"), 2, 1), "MC_STORE_ERR_OBJECT_NOT_FOUND")

	// Bad keys: clear errors naming the function and the problem.
	var n uintptr
	var size uint64
	for _, c := range []struct {
		name string
		call func() int32
		want string
		msg  string
	}{
		{"put_n: NULL key", func() int32 { return l.storePutN(s, nil, 3, uintptr(r.Addr()), 1) }, "MC_ERR_INVALID_ARGUMENT", "mc_store_put_n: invalid argument: key is NULL"},
		{"put_n: key_len 0", func() int32 { return l.storePutN(s, keyBytes("k"), 0, uintptr(r.Addr()), 1) }, "MC_ERR_INVALID_ARGUMENT", "key is empty"},
		{"put_n: key_len 4097", func() int32 { return l.storePutN(s, keyBytes(long+"x"), 4097, uintptr(r.Addr()), 1) }, "MC_STORE_ERR_INVALID_KEY", "key of 4097 bytes is longer than MC_STORE_MAX_KEY_LEN (4096)"},
		{"get_n: huge key_len, not read", func() int32 { return l.storeGetN(s, keyBytes("k"), 1<<62, uintptr(out.Addr()), 8, &n) }, "MC_STORE_ERR_INVALID_KEY", "longer than MC_STORE_MAX_KEY_LEN"},
		{"get_size_n: NULL key", func() int32 { return l.storeGetSizeN(s, (*byte)(nil), 1, &size) }, "MC_ERR_INVALID_ARGUMENT", "key is NULL"},
		{"is_exist_n: key_len 0", func() int32 { return l.storeIsExistN(s, keyBytes("k"), 0) }, "MC_ERR_INVALID_ARGUMENT", "mc_store_is_exist_n"},
		{"put: key of 4097 bytes", func() int32 { return l.storePut(s, cstr(long+"x"), uintptr(r.Addr()), 1) }, "MC_STORE_ERR_INVALID_KEY", "mc_store_put: "},
		{"batch_is_exist_n: NULL key_lens", func() int32 { return l.storeBatchIsExistN(s, &kp[0], nil, 3, &present[0]) }, "MC_ERR_INVALID_ARGUMENT", "key_lens is NULL"},
		{"batch_put_from_n: NULL key_lens", func() int32 { return l.storeBatchPutFromN(s, &kp[0], nil, &sptrs[0], &sizes[0], 3, &codes[0]) }, "MC_ERR_INVALID_ARGUMENT", "key_lens is NULL"},
	} {
		msg := l.expect(t, c.name, c.call(), c.want)
		assert.Contains(t, msg, c.msg, c.name)
	}
	// In a batch, a bad key length fails its position alone.
	mp, ml := keyArrays(t, "b\xff0", "", long+"x", "b\x001")
	mp[1] = uintptr(src.Addr()) // any readable address: length 0 is refused first
	mres := make([]int32, 4)
	msg := l.expectPartial(t, "batch_is_exist_n with bad keys", l.storeBatchIsExistN(s, &mp[0], &ml[0], 4, &mres[0]))
	assert.Equal(t, []int32{1, l.c(t, "MC_ERR_INVALID_ARGUMENT"), l.c(t, "MC_STORE_ERR_INVALID_KEY"), 1}, mres)
	assert.Contains(t, msg, "mc_store_batch_is_exist_n: 2 of 4 keys failed")
}
