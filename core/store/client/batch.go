package client

import (
	"github.com/mooncake-go/mooncake/core/store"
)

// Batch calls are split so that every request fits one gRPC message.
//
// The master refuses a request over store.MaxRequestBytes (4 MiB, gRPC's
// default receive limit), and a batch call's request and answer grow with
// its keys: a single trace
// line of 16 MB holds about a million blocks, whose existence check alone
// is a 40 MB request. So each batch method sends its keys in chunks of at
// most maxBatchKeys keys and maxBatchKeyBytes key bytes (a chunk holds at
// least one key, and a key is at most 4 KiB), one RPC per chunk with its
// own RPC timeout, and joins the answers in key order. Answers carry a few
// hundred bytes per key (replica descriptors), so a chunk's answer stays
// well under the limit too; maxRecvBytes raises the client's receive limit
// for the rest (listings, pathological striping).

const (
	// maxBatchKeys is the most keys one batch RPC carries.
	maxBatchKeys = 2048
	// maxBatchKeyBytes is the most key bytes one batch RPC carries (a
	// chunk may exceed it by its last key only when that key is its
	// first).
	maxBatchKeyBytes = 1 << 20
	// maxRecvBytes is the largest answer the client accepts from the
	// master (gRPC's default would be 4 MiB).
	maxRecvBytes = store.MaxAnswerBytes
)

// chunkEnd returns hi such that keys[lo:hi] is the next chunk: at least
// one key, at most maxBatchKeys keys and, beyond its first key,
// maxBatchKeyBytes bytes of keys.
func chunkEnd[K ~string | ~[]byte](keys []K, lo int) int {
	hi, n := lo, 0
	for hi < len(keys) && hi-lo < maxBatchKeys && (hi == lo || n+len(keys[hi]) <= maxBatchKeyBytes) {
		n += len(keys[hi])
		hi++
	}
	return hi
}

// chunked calls call once per chunk [lo, hi) of keys, in order, and
// concatenates the results, which must come back one per key. It stops at
// the first chunk that fails (call's error, or a result count that does
// not match: RPC_FAIL naming what): the results so far are returned with
// that error, so keys from len(results) on have none.
func chunked[K ~string | ~[]byte, R any](keys []K, what string, call func(lo, hi int) ([]R, error)) ([]R, error) {
	out := make([]R, 0, len(keys))
	for lo := 0; lo < len(keys); {
		hi := chunkEnd(keys, lo)
		rs, err := call(lo, hi)
		if err == nil && len(rs) != hi-lo {
			err = store.Errorf(store.RPCFail, "%s: %d results for %d keys", what, len(rs), hi-lo)
		}
		if err != nil {
			return out, err
		}
		out = append(out, rs...)
		lo = hi
	}
	return out, nil
}
