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

func null(what string) error {
	return fmt.Errorf("%w: %s is NULL", cbridge.ErrInvalidArgument, what)
}

// goString copies a C string; NULL gives "".
func goString(s *C.char) string {
	if s == nil {
		return ""
	}
	return C.GoString(s)
}

// cKey copies a key, reading at most MaxKeyLen+1 bytes of it: NULL or ""
// is MC_ERR_INVALID_ARGUMENT, a longer key INVALID_KEY.
func cKey(p *C.char) (string, error) {
	if p == nil {
		return "", null("key")
	}
	n := C.strnlen(p, MaxKeyLen+1)
	if n > MaxKeyLen {
		return "", mcstore.Errorf(mcstore.InvalidKey, "key of more than %d bytes", MaxKeyLen)
	}
	key := C.GoStringN(p, C.int(n))
	return key, checkKey(key)
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

// batchDone ends a batch call that was carried out: MC_OK, with
// mc_last_error "" when every key succeeded, else the number of failed keys
// and the first failure.
func batchDone(fn string, errs []error) int32 {
	failed, first := 0, -1
	for i, err := range errs {
		if err != nil {
			failed++
			if first < 0 {
				first = i
			}
		}
	}
	if failed == 0 {
		return cbridge.Succeed()
	}
	cbridge.SetError(fmt.Sprintf("%s: %d of %d keys failed; first: keys[%d]: %v", fn, failed, len(errs), first, errs[first]))
	return int32(cbridge.OK)
}

// code is err's status code as an int32 (0 for nil).
func code(err error) int32 { return int32(cbridge.CodeOf(err)) }

//export mcgo_store_setup
func mcgo_store_setup(host, meta *C.char, global, local C.uint64_t, proto, dev, master *C.char, out *C.uint64_t) (rc int32) {
	defer cbridge.Recover(&rc)
	const fn = "mc_store_setup"
	switch {
	case host == nil:
		return cbridge.Fail(fn, null("local_hostname"))
	case meta == nil:
		return cbridge.Fail(fn, null("metadata_server"))
	case master == nil:
		return cbridge.Fail(fn, null("master_server_addr"))
	case out == nil:
		return cbridge.Fail(fn, null("out"))
	}
	s, err := newStore(setupArgs{
		LocalHostname:     C.GoString(host),
		MetadataServer:    C.GoString(meta),
		GlobalSegmentSize: uint64(global),
		LocalBufferSize:   uint64(local),
		Protocol:          goString(proto),
		DeviceName:        goString(dev),
		MasterAddr:        C.GoString(master),
	})
	if err != nil {
		return cbridge.Fail(fn, err)
	}
	*out = C.uint64_t(cbridge.Handles.Add(s))
	return cbridge.Succeed()
}

//export mcgo_store_destroy
func mcgo_store_destroy(h C.uint64_t) (rc int32) {
	defer cbridge.Recover(&rc)
	const fn = "mc_store_destroy"
	s, err := cbridge.Take[*storeClient](cbridge.Handles, cbridge.Handle(h), "store")
	if err != nil {
		return cbridge.Fail(fn, err)
	}
	return cbridge.Done(fn, s.destroy())
}

//export mcgo_store_get_hostname
func mcgo_store_get_hostname(h C.uint64_t, buf C.uintptr_t, capacity C.size_t, outLen *C.size_t) (rc int32) {
	defer cbridge.Recover(&rc)
	const fn = "mc_store_get_hostname"
	s, err := begin(h)
	if err != nil {
		return cbridge.Fail(fn, err)
	}
	defer s.release()
	if outLen == nil {
		return cbridge.Fail(fn, null("out_len"))
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
	defer cbridge.Recover(&rc)
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
	defer cbridge.Recover(&rc)
	const fn = "mc_store_unregister_buffer"
	s, err := begin(h)
	if err != nil {
		return cbridge.Fail(fn, err)
	}
	defer s.release()
	if ptr == 0 {
		return cbridge.Fail(fn, null("ptr"))
	}
	return cbridge.Done(fn, s.unregister(uint64(ptr)))
}

//export mcgo_store_put
func mcgo_store_put(h C.uint64_t, key *C.char, value C.uintptr_t, size C.size_t) (rc int32) {
	defer cbridge.Recover(&rc)
	const fn = "mc_store_put"
	s, err := begin(h)
	if err != nil {
		return cbridge.Fail(fn, err)
	}
	defer s.release()
	k, err := cKey(key)
	if err != nil {
		return cbridge.Fail(fn, err)
	}
	v, err := cbridge.ForeignBytes("value", uintptr(value), uintptr(size))
	if err != nil {
		return cbridge.Fail(fn, err)
	}
	return cbridge.Done(fn, s.put(k, v))
}

//export mcgo_store_get
func mcgo_store_get(h C.uint64_t, key *C.char, buf C.uintptr_t, capacity C.size_t, outSize *C.size_t) (rc int32) {
	defer cbridge.Recover(&rc)
	const fn = "mc_store_get"
	s, err := begin(h)
	if err != nil {
		return cbridge.Fail(fn, err)
	}
	defer s.release()
	k, err := cKey(key)
	if err != nil {
		return cbridge.Fail(fn, err)
	}
	if outSize == nil {
		return cbridge.Fail(fn, null("out_size"))
	}
	b, err := cbridge.ForeignBytes("buf", uintptr(buf), uintptr(capacity))
	if err != nil {
		return cbridge.Fail(fn, err)
	}
	n, err := s.get(k, b)
	if err != nil {
		return cbridge.Fail(fn, err)
	}
	*outSize = C.size_t(n)
	return cbridge.Succeed()
}

//export mcgo_store_put_from
func mcgo_store_put_from(h C.uint64_t, key *C.char, ptr C.uintptr_t, size C.size_t) (rc int32) {
	defer cbridge.Recover(&rc)
	const fn = "mc_store_put_from"
	s, err := begin(h)
	if err != nil {
		return cbridge.Fail(fn, err)
	}
	defer s.release()
	k, err := cKey(key)
	if err != nil {
		return cbridge.Fail(fn, err)
	}
	buf, err := s.zeroCopy("ptr", uintptr(ptr), uintptr(size))
	if err != nil {
		return cbridge.Fail(fn, err)
	}
	return cbridge.Done(fn, s.batchPutFrom([]string{k}, [][]byte{buf})[0])
}

//export mcgo_store_get_into
func mcgo_store_get_into(h C.uint64_t, key *C.char, ptr C.uintptr_t, size C.size_t, outRead *C.int64_t) (rc int32) {
	defer cbridge.Recover(&rc)
	const fn = "mc_store_get_into"
	s, err := begin(h)
	if err != nil {
		return cbridge.Fail(fn, err)
	}
	defer s.release()
	k, err := cKey(key)
	if err != nil {
		return cbridge.Fail(fn, err)
	}
	if outRead == nil {
		return cbridge.Fail(fn, null("out_read"))
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

// batchArgs validates the arrays of a zero-copy batch and each entry:
// entries with a bad key or range get their error in errs and are left out
// of keys/bufs; idx maps keys/bufs back to positions.
func batchArgs(s *storeClient, ks []*C.char, ps []C.uintptr_t, sz []C.size_t) (keys []string, bufs [][]byte, idx []int, errs []error) {
	errs = make([]error, len(ks))
	for i := range ks {
		k, err := cKey(ks[i])
		if err != nil {
			errs[i] = fmt.Errorf("keys[%d]: %w", i, err)
			continue
		}
		buf, err := s.zeroCopy(fmt.Sprintf("ptrs[%d]", i), uintptr(ps[i]), uintptr(sz[i]))
		if err != nil {
			errs[i] = fmt.Errorf("key %q: %w", k, err)
			continue
		}
		keys, bufs, idx = append(keys, k), append(bufs, buf), append(idx, i)
	}
	return keys, bufs, idx, errs
}

// batchArrays turns the C arrays of a zero-copy batch into slices.
func batchArrays(keys **C.char, ptrs *C.uintptr_t, sizes *C.size_t, n C.size_t) ([]*C.char, []C.uintptr_t, []C.size_t, error) {
	ks, err := cbridge.Slice("keys", keys, uintptr(n))
	if err != nil {
		return nil, nil, nil, err
	}
	ps, err := cbridge.Slice("ptrs", ptrs, uintptr(n))
	if err != nil {
		return nil, nil, nil, err
	}
	sz, err := cbridge.Slice("sizes", sizes, uintptr(n))
	if err != nil {
		return nil, nil, nil, err
	}
	return ks, ps, sz, nil
}

//export mcgo_store_batch_put_from
func mcgo_store_batch_put_from(h C.uint64_t, keys **C.char, ptrs *C.uintptr_t, sizes *C.size_t, n C.size_t, out *C.int32_t) (rc int32) {
	defer cbridge.Recover(&rc)
	const fn = "mc_store_batch_put_from"
	s, err := begin(h)
	if err != nil {
		return cbridge.Fail(fn, err)
	}
	defer s.release()
	if n == 0 {
		return cbridge.Succeed()
	}
	ks, ps, sz, err := batchArrays(keys, ptrs, sizes, n)
	if err != nil {
		return cbridge.Fail(fn, err)
	}
	codes, err := cbridge.Slice("out_codes", out, uintptr(n))
	if err != nil {
		return cbridge.Fail(fn, err)
	}
	valid, bufs, idx, errs := batchArgs(s, ks, ps, sz)
	if len(valid) > 0 {
		for j, err := range s.batchPutFrom(valid, bufs) {
			errs[idx[j]] = err
		}
	}
	for i, err := range errs {
		codes[i] = C.int32_t(code(err))
	}
	return batchDone(fn, errs)
}

//export mcgo_store_batch_get_into
func mcgo_store_batch_get_into(h C.uint64_t, keys **C.char, ptrs *C.uintptr_t, sizes *C.size_t, n C.size_t, out *C.int64_t) (rc int32) {
	defer cbridge.Recover(&rc)
	const fn = "mc_store_batch_get_into"
	s, err := begin(h)
	if err != nil {
		return cbridge.Fail(fn, err)
	}
	defer s.release()
	if n == 0 {
		return cbridge.Succeed()
	}
	ks, ps, sz, err := batchArrays(keys, ptrs, sizes, n)
	if err != nil {
		return cbridge.Fail(fn, err)
	}
	results, err := cbridge.Slice("out_results", out, uintptr(n))
	if err != nil {
		return cbridge.Fail(fn, err)
	}
	valid, bufs, idx, errs := batchArgs(s, ks, ps, sz)
	read := make([]int, len(ks))
	if len(valid) > 0 {
		got, gerrs := s.batchGetInto(valid, bufs)
		for j := range valid {
			read[idx[j]], errs[idx[j]] = got[j], gerrs[j]
		}
	}
	for i, err := range errs {
		if err != nil {
			results[i] = C.int64_t(code(err))
		} else {
			results[i] = C.int64_t(read[i])
		}
	}
	return batchDone(fn, errs)
}

//export mcgo_store_is_exist
func mcgo_store_is_exist(h C.uint64_t, key *C.char) (rc int32) {
	defer cbridge.Recover(&rc)
	const fn = "mc_store_is_exist"
	s, err := begin(h)
	if err != nil {
		return cbridge.Fail(fn, err)
	}
	defer s.release()
	k, err := cKey(key)
	if err != nil {
		return cbridge.Fail(fn, err)
	}
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
func mcgo_store_batch_is_exist(h C.uint64_t, keys **C.char, n C.size_t, out *C.int32_t) (rc int32) {
	defer cbridge.Recover(&rc)
	const fn = "mc_store_batch_is_exist"
	s, err := begin(h)
	if err != nil {
		return cbridge.Fail(fn, err)
	}
	defer s.release()
	if n == 0 {
		return cbridge.Succeed()
	}
	ks, err := cbridge.Slice("keys", keys, uintptr(n))
	if err != nil {
		return cbridge.Fail(fn, err)
	}
	res, err := cbridge.Slice("out", out, uintptr(n))
	if err != nil {
		return cbridge.Fail(fn, err)
	}
	errs := make([]error, len(ks))
	var valid []string
	var idx []int
	for i := range ks {
		k, err := cKey(ks[i])
		if err != nil {
			errs[i] = fmt.Errorf("keys[%d]: %w", i, err)
			continue
		}
		valid, idx = append(valid, k), append(idx, i)
	}
	exists := make([]bool, len(ks))
	if len(valid) > 0 {
		got, err := s.batchIsExist(valid)
		for j := range valid {
			if err != nil {
				errs[idx[j]] = err
			} else {
				exists[idx[j]] = got[j]
			}
		}
	}
	for i, err := range errs {
		switch {
		case err != nil:
			res[i] = C.int32_t(code(err))
		case exists[i]:
			res[i] = 1
		default:
			res[i] = 0
		}
	}
	return batchDone(fn, errs)
}

//export mcgo_store_remove
func mcgo_store_remove(h C.uint64_t, key *C.char, force C.int) (rc int32) {
	defer cbridge.Recover(&rc)
	const fn = "mc_store_remove"
	s, err := begin(h)
	if err != nil {
		return cbridge.Fail(fn, err)
	}
	defer s.release()
	k, err := cKey(key)
	if err != nil {
		return cbridge.Fail(fn, err)
	}
	return cbridge.Done(fn, s.remove(k, force != 0))
}

//export mcgo_store_get_size
func mcgo_store_get_size(h C.uint64_t, key *C.char, out *C.uint64_t) (rc int32) {
	defer cbridge.Recover(&rc)
	const fn = "mc_store_get_size"
	s, err := begin(h)
	if err != nil {
		return cbridge.Fail(fn, err)
	}
	defer s.release()
	k, err := cKey(key)
	if err != nil {
		return cbridge.Fail(fn, err)
	}
	if out == nil {
		return cbridge.Fail(fn, null("out_size"))
	}
	n, err := s.getSize(k)
	if err != nil {
		return cbridge.Fail(fn, err)
	}
	*out = C.uint64_t(n)
	return cbridge.Succeed()
}
