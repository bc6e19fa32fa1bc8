package store

/*
#cgo CFLAGS: -I${SRCDIR}/../include
#include <string.h>
#include "mooncake/store.h"
*/
import "C"

import (
	"fmt"

	"github.com/mooncake-go/mooncake/abi/cbridge"
	mcstore "github.com/mooncake-go/mooncake/core/store"
)

// The mcgo_store_* functions are called only by the trampolines in store.c,
// one per mc_store_* function of store.h, which pass store handles as
// uint64_t and caller addresses (single ones and arrays) as uintptr_t.
// Pointers that do arrive here (strings, out parameters, the key, pointer
// and size arrays) are C memory: read or written during the call, never
// kept.

// The key limit of the header is the master's.
const _ = uint(C.MC_STORE_MAX_KEY_LEN-MaxKeyLen) + uint(MaxKeyLen-C.MC_STORE_MAX_KEY_LEN)

// storeABIVersion is MC_STORE_ABI_VERSION.
const storeABIVersion uint32 = C.MC_STORE_ABI_VERSION_MAJOR<<16 | C.MC_STORE_ABI_VERSION_MINOR

// Keys cross in two forms (store.h): a NUL-terminated string (the plain
// functions, as upstream's store_c.h) or a pointer and a length in bytes
// (the _n functions, ABI 1.1: any bytes, NUL included). Each export takes
// both, with byLen saying which one its trampoline passed.

// cKey copies a NUL-terminated key, reading at most MaxKeyLen+1 bytes of
// it: NULL or "" is MC_ERR_INVALID_ARGUMENT, a longer key INVALID_KEY.
func cKey(p *C.char) (string, error) {
	if p == nil {
		return "", cbridge.Null("key")
	}
	n := C.strnlen(p, MaxKeyLen+1)
	if n > MaxKeyLen {
		return "", mcstore.Errorf(mcstore.InvalidKey, "key is longer than MC_STORE_MAX_KEY_LEN (%d bytes)", MaxKeyLen)
	}
	key := C.GoStringN(p, C.int(n))
	return key, checkKey(key)
}

// nKey copies the key [p, p+n): NULL or n == 0 is MC_ERR_INVALID_ARGUMENT,
// n > MaxKeyLen INVALID_KEY (the bytes are not read then).
func nKey(what string, p *C.char, n C.size_t) (string, error) {
	switch {
	case p == nil:
		return "", cbridge.Null(what)
	case n == 0:
		return "", invalid("%s is empty (length 0; a key is 1 to %d bytes)", what, MaxKeyLen)
	case n > MaxKeyLen:
		return "", mcstore.Errorf(mcstore.InvalidKey, "%s of %d bytes is longer than MC_STORE_MAX_KEY_LEN (%d)", what, uint64(n), MaxKeyLen)
	}
	return cbridge.GoStringN(what, p, uintptr(n))
}

// anyKey is nKey when byLen is set, else cKey.
func anyKey(p *C.char, n C.size_t, byLen C.int) (string, error) {
	if byLen != 0 {
		return nKey("key", p, n)
	}
	return cKey(p)
}

// fnName is the public name of the call: plain, or with _n for the
// pointer-and-length form.
func fnName(plain string, byLen C.int) string {
	if byLen != 0 {
		return plain + "_n"
	}
	return plain
}

// begin looks the handle up and registers a call in flight on it; the
// caller defers s.release().
func begin(h C.uint64_t) (*storeClient, error) {
	s, err := cbridge.Lookup[*storeClient](cbridge.Handles, cbridge.Handle(h), "store")
	if err != nil {
		return nil, err
	}
	if err := s.acquire(); err != nil {
		return nil, err
	}
	return s, nil
}

// beginKey is begin followed by anyKey(key, keyLen, byLen); on success the
// caller defers s.release(), on failure nothing is held.
func beginKey(h C.uint64_t, key *C.char, keyLen C.size_t, byLen C.int) (*storeClient, string, error) {
	s, err := begin(h)
	if err != nil {
		return nil, "", err
	}
	k, err := anyKey(key, keyLen, byLen)
	if err != nil {
		s.release()
		return nil, "", err
	}
	return s, k, nil
}

// batchDone ends a batch call that was carried out (cbridge.BatchDone).
func batchDone(fn string, errs []error) int32 { return cbridge.BatchDone(fn, errs) }

// code is err's status code as an int32 (0 for nil).
func code(err error) int32 { return int32(cbridge.CodeOf(err)) }

//export mcgo_store_setup
func mcgo_store_setup(host, meta *C.char, global, local C.uint64_t, proto, dev, master *C.char, out *C.uint64_t) (rc int32) {
	defer cbridge.Guard(&rc)()
	const fn = "mc_store_setup"
	switch {
	case host == nil:
		return cbridge.Fail(fn, cbridge.Null("local_hostname"))
	case meta == nil:
		return cbridge.Fail(fn, cbridge.Null("metadata_server"))
	case master == nil:
		return cbridge.Fail(fn, cbridge.Null("master_server_addr"))
	case out == nil:
		return cbridge.Fail(fn, cbridge.Null("out"))
	}
	s, err := newStore(setupArgs{
		LocalHostname:     C.GoString(host),
		MetadataServer:    C.GoString(meta),
		GlobalSegmentSize: uint64(global),
		LocalBufferSize:   uint64(local),
		Protocol:          cbridge.GoString(proto),
		DeviceName:        cbridge.GoString(dev),
		MasterAddr:        C.GoString(master),
	})
	return cbridge.DoneHandle(fn, out, s, err)
}

//export mcgo_store_destroy
func mcgo_store_destroy(h C.uint64_t) (rc int32) {
	defer cbridge.Guard(&rc)()
	const fn = "mc_store_destroy"
	s, err := cbridge.Take[*storeClient](cbridge.Handles, cbridge.Handle(h), "store")
	if err != nil {
		return cbridge.Fail(fn, err)
	}
	return cbridge.Done(fn, s.destroy())
}

//export mcgo_store_get_hostname
func mcgo_store_get_hostname(h C.uint64_t, buf C.uintptr_t, capacity C.size_t, outLen *C.size_t) (rc int32) {
	defer cbridge.Guard(&rc)()
	const fn = "mc_store_get_hostname"
	s, err := begin(h)
	if err != nil {
		return cbridge.Fail(fn, err)
	}
	defer s.release()
	if outLen == nil {
		return cbridge.Fail(fn, cbridge.Null("out_len"))
	}
	b, err := cbridge.ForeignBytes("buf", uintptr(buf), uintptr(capacity))
	if err != nil {
		return cbridge.Fail(fn, err)
	}
	if len(s.name) >= len(b) {
		return cbridge.Fail(fn, mcstore.Errorf(mcstore.BufferOverflow, "the name %q needs %d bytes with its NUL, cap is %d", s.name, len(s.name)+1, len(b)))
	}
	copy(b, s.name)
	b[len(s.name)] = 0
	*outLen = C.size_t(len(s.name))
	return cbridge.Succeed()
}

//export mcgo_store_register_buffer
func mcgo_store_register_buffer(h C.uint64_t, ptr C.uintptr_t, size C.size_t) (rc int32) {
	defer cbridge.Guard(&rc)()
	const fn = "mc_store_register_buffer"
	s, err := begin(h)
	if err != nil {
		return cbridge.Fail(fn, err)
	}
	defer s.release()
	buf, err := cbridge.ForeignBytes("ptr", uintptr(ptr), uintptr(size))
	if err != nil {
		return cbridge.Fail(fn, err)
	}
	return cbridge.Done(fn, s.register(buf))
}

//export mcgo_store_unregister_buffer
func mcgo_store_unregister_buffer(h C.uint64_t, ptr C.uintptr_t) (rc int32) {
	defer cbridge.Guard(&rc)()
	const fn = "mc_store_unregister_buffer"
	s, err := begin(h)
	if err != nil {
		return cbridge.Fail(fn, err)
	}
	defer s.release()
	if ptr == 0 {
		return cbridge.Fail(fn, cbridge.Null("ptr"))
	}
	return cbridge.Done(fn, s.unregister(uint64(ptr)))
}

//export mcgo_store_put
func mcgo_store_put(h C.uint64_t, key *C.char, keyLen C.size_t, byLen C.int, value C.uintptr_t, size C.size_t) (rc int32) {
	defer cbridge.Guard(&rc)()
	fn := fnName("mc_store_put", byLen)
	s, k, err := beginKey(h, key, keyLen, byLen)
	if err != nil {
		return cbridge.Fail(fn, err)
	}
	defer s.release()
	v, err := cbridge.ForeignBytes("value", uintptr(value), uintptr(size))
	if err != nil {
		return cbridge.Fail(fn, err)
	}
	return cbridge.Done(fn, s.put(k, v))
}

//export mcgo_store_get
func mcgo_store_get(h C.uint64_t, key *C.char, keyLen C.size_t, byLen C.int, buf C.uintptr_t, capacity C.size_t, outSize *C.size_t) (rc int32) {
	defer cbridge.Guard(&rc)()
	fn := fnName("mc_store_get", byLen)
	s, k, err := beginKey(h, key, keyLen, byLen)
	if err != nil {
		return cbridge.Fail(fn, err)
	}
	defer s.release()
	if outSize == nil {
		return cbridge.Fail(fn, cbridge.Null("out_size"))
	}
	b, err := cbridge.ForeignBytes("buf", uintptr(buf), uintptr(capacity))
	if err != nil {
		return cbridge.Fail(fn, err)
	}
	n, err := s.get(k, b)
	return cbridge.DoneOut(fn, outSize, C.size_t(n), err)
}

//export mcgo_store_put_from
func mcgo_store_put_from(h C.uint64_t, key *C.char, keyLen C.size_t, byLen C.int, ptr C.uintptr_t, size C.size_t) (rc int32) {
	defer cbridge.Guard(&rc)()
	fn := fnName("mc_store_put_from", byLen)
	s, k, err := beginKey(h, key, keyLen, byLen)
	if err != nil {
		return cbridge.Fail(fn, err)
	}
	defer s.release()
	buf, err := s.zeroCopy("ptr", uintptr(ptr), uintptr(size))
	if err != nil {
		return cbridge.Fail(fn, err)
	}
	return cbridge.Done(fn, s.batchPutFrom([]string{k}, [][]byte{buf})[0])
}

//export mcgo_store_get_into
func mcgo_store_get_into(h C.uint64_t, key *C.char, keyLen C.size_t, byLen C.int, ptr C.uintptr_t, size C.size_t, outRead *C.int64_t) (rc int32) {
	defer cbridge.Guard(&rc)()
	fn := fnName("mc_store_get_into", byLen)
	s, k, err := beginKey(h, key, keyLen, byLen)
	if err != nil {
		return cbridge.Fail(fn, err)
	}
	defer s.release()
	if outRead == nil {
		return cbridge.Fail(fn, cbridge.Null("out_read"))
	}
	buf, err := s.zeroCopy("ptr", uintptr(ptr), uintptr(size))
	if err != nil {
		return cbridge.Fail(fn, err)
	}
	n, errs := s.batchGetInto([]string{k}, [][]byte{buf})
	if errs[0] != nil {
		return cbridge.Fail(fn, errs[0])
	}
	*outRead = C.int64_t(n[0])
	return cbridge.Succeed()
}

// batch is the per-key state of a batch call: the keys (with their
// buffers, for a zero-copy batch) that passed validation, to hand on, and
// each position's outcome.
type batch struct {
	keys []string
	bufs [][]byte
	idx  []int   // keys[j] is at position idx[j] of the call's arrays
	vals []int64 // per position: the result of a key that succeeded
	errs []error // per position: why a key failed
}

// newBatch validates the keys ks of a batch (NUL-terminated, or of the
// lengths ls when ls is not nil) and, for a zero-copy batch (ps not nil),
// each key's range ps[i], sz[i] (s.zeroCopy): a bad key or range fails its
// position alone and is left out of b.keys and b.bufs.
func newBatch(s *storeClient, ks []*C.char, ls []C.size_t, ps []C.uintptr_t, sz []C.size_t) *batch {
	b := &batch{vals: make([]int64, len(ks)), errs: make([]error, len(ks))}
	for i := range ks {
		var k string
		var err error
		if ls != nil {
			k, err = nKey("key", ks[i], ls[i])
		} else {
			k, err = cKey(ks[i])
		}
		if err != nil {
			b.errs[i] = fmt.Errorf("keys[%d]: %w", i, err)
			continue
		}
		if ps != nil {
			buf, err := s.zeroCopy(fmt.Sprintf("ptrs[%d]", i), uintptr(ps[i]), uintptr(sz[i]))
			if err != nil {
				b.errs[i] = fmt.Errorf("key %q: %w", k, err)
				continue
			}
			b.bufs = append(b.bufs, buf)
		}
		b.keys, b.idx = append(b.keys, k), append(b.idx, i)
	}
	return b
}

// set records the outcome of b.keys[j]: its result v, or its error.
func (b *batch) set(j int, v int64, err error) {
	b.vals[b.idx[j]], b.errs[b.idx[j]] = v, err
}

// batchKeys reads the keys array of a batch of n > 0 keys and, when byLen
// is set, its key_lens array.
func batchKeys(keys **C.char, keyLens *C.size_t, byLen C.int, n C.size_t) ([]*C.char, []C.size_t, error) {
	ks, err := cbridge.Slice("keys", keys, uintptr(n))
	if err != nil {
		return nil, nil, err
	}
	if byLen == 0 {
		return ks, nil, nil
	}
	ls, err := cbridge.Slice("key_lens", keyLens, uintptr(n))
	if err != nil {
		return nil, nil, err
	}
	return ks, ls, nil
}

// keyBatch turns the C arrays of a batch of n keys into a batch and its out
// array (named outName) into a slice; n == 0 gives an empty batch.
func keyBatch[T any](s *storeClient, keys **C.char, keyLens *C.size_t, byLen C.int, n C.size_t, outName string, out *T) (*batch, []T, error) {
	if n == 0 {
		return &batch{}, nil, nil
	}
	ks, ls, err := batchKeys(keys, keyLens, byLen, n)
	if err != nil {
		return nil, nil, err
	}
	res, err := cbridge.Slice(outName, out, uintptr(n))
	if err != nil {
		return nil, nil, err
	}
	return newBatch(s, ks, ls, nil, nil), res, nil
}

// zeroCopyBatch is keyBatch for a zero-copy batch, with its ptrs and sizes
// arrays.
func zeroCopyBatch[T any](s *storeClient, keys **C.char, keyLens *C.size_t, byLen C.int, ptrs *C.uintptr_t, sizes *C.size_t, n C.size_t, outName string, out *T) (*batch, []T, error) {
	if n == 0 {
		return &batch{}, nil, nil
	}
	ks, ls, err := batchKeys(keys, keyLens, byLen, n)
	if err != nil {
		return nil, nil, err
	}
	ps, err := cbridge.Slice("ptrs", ptrs, uintptr(n))
	if err != nil {
		return nil, nil, err
	}
	sz, err := cbridge.Slice("sizes", sizes, uintptr(n))
	if err != nil {
		return nil, nil, err
	}
	res, err := cbridge.Slice(outName, out, uintptr(n))
	if err != nil {
		return nil, nil, err
	}
	return newBatch(s, ks, ls, ps, sz), res, nil
}

// report ends a batch call that was carried out: each position's result, or
// its error's code, goes to out, then batchDone.
func report[T ~int32 | ~int64](fn string, b *batch, out []T) int32 {
	for i, err := range b.errs {
		if err != nil {
			out[i] = T(code(err))
		} else {
			out[i] = T(b.vals[i])
		}
	}
	return batchDone(fn, b.errs)
}

//export mcgo_store_batch_put_from
func mcgo_store_batch_put_from(h C.uint64_t, keys **C.char, keyLens *C.size_t, byLen C.int, ptrs *C.uintptr_t, sizes *C.size_t, n C.size_t, out *C.int32_t) (rc int32) {
	defer cbridge.Guard(&rc)()
	fn := fnName("mc_store_batch_put_from", byLen)
	s, err := begin(h)
	if err != nil {
		return cbridge.Fail(fn, err)
	}
	defer s.release()
	b, codes, err := zeroCopyBatch(s, keys, keyLens, byLen, ptrs, sizes, n, "out_codes", out)
	if err != nil {
		return cbridge.Fail(fn, err)
	}
	if len(b.keys) > 0 {
		for j, err := range s.batchPutFrom(b.keys, b.bufs) {
			b.set(j, 0, err)
		}
	}
	return report(fn, b, codes)
}

//export mcgo_store_batch_get_into
func mcgo_store_batch_get_into(h C.uint64_t, keys **C.char, keyLens *C.size_t, byLen C.int, ptrs *C.uintptr_t, sizes *C.size_t, n C.size_t, out *C.int64_t) (rc int32) {
	defer cbridge.Guard(&rc)()
	fn := fnName("mc_store_batch_get_into", byLen)
	s, err := begin(h)
	if err != nil {
		return cbridge.Fail(fn, err)
	}
	defer s.release()
	b, results, err := zeroCopyBatch(s, keys, keyLens, byLen, ptrs, sizes, n, "out_results", out)
	if err != nil {
		return cbridge.Fail(fn, err)
	}
	if len(b.keys) > 0 {
		got, errs := s.batchGetInto(b.keys, b.bufs)
		for j := range b.keys {
			b.set(j, int64(got[j]), errs[j])
		}
	}
	return report(fn, b, results)
}

//export mcgo_store_is_exist
func mcgo_store_is_exist(h C.uint64_t, key *C.char, keyLen C.size_t, byLen C.int) (rc int32) {
	defer cbridge.Guard(&rc)()
	fn := fnName("mc_store_is_exist", byLen)
	s, k, err := beginKey(h, key, keyLen, byLen)
	if err != nil {
		return cbridge.Fail(fn, err)
	}
	defer s.release()
	ok, err := s.batchIsExist([]string{k})
	if err != nil {
		return cbridge.Fail(fn, err)
	}
	cbridge.Succeed()
	if ok[0] {
		return 1
	}
	return 0
}

//export mcgo_store_batch_is_exist
func mcgo_store_batch_is_exist(h C.uint64_t, keys **C.char, keyLens *C.size_t, byLen C.int, n C.size_t, out *C.int32_t) (rc int32) {
	defer cbridge.Guard(&rc)()
	fn := fnName("mc_store_batch_is_exist", byLen)
	s, err := begin(h)
	if err != nil {
		return cbridge.Fail(fn, err)
	}
	defer s.release()
	b, res, err := keyBatch(s, keys, keyLens, byLen, n, "out", out)
	if err != nil {
		return cbridge.Fail(fn, err)
	}
	if len(b.keys) > 0 {
		got, err := s.batchIsExist(b.keys)
		for j := range b.keys {
			switch {
			case err != nil:
				b.set(j, 0, err)
			case got[j]:
				b.set(j, 1, nil)
			default:
				b.set(j, 0, nil)
			}
		}
	}
	return report(fn, b, res)
}

//export mcgo_store_remove
func mcgo_store_remove(h C.uint64_t, key *C.char, keyLen C.size_t, byLen C.int, force C.int) (rc int32) {
	defer cbridge.Guard(&rc)()
	fn := fnName("mc_store_remove", byLen)
	s, k, err := beginKey(h, key, keyLen, byLen)
	if err != nil {
		return cbridge.Fail(fn, err)
	}
	defer s.release()
	return cbridge.Done(fn, s.remove(k, force != 0))
}

//export mcgo_store_get_size
func mcgo_store_get_size(h C.uint64_t, key *C.char, keyLen C.size_t, byLen C.int, out *C.uint64_t) (rc int32) {
	defer cbridge.Guard(&rc)()
	fn := fnName("mc_store_get_size", byLen)
	s, k, err := beginKey(h, key, keyLen, byLen)
	if err != nil {
		return cbridge.Fail(fn, err)
	}
	defer s.release()
	if out == nil {
		return cbridge.Fail(fn, cbridge.Null("out_size"))
	}
	n, err := s.getSize(k)
	return cbridge.DoneOut(fn, out, C.uint64_t(n), err)
}
