package memory

// ntMin is the smallest copy Copy does with non-temporal stores. Below it
// the destination likely stays hot in cache and Go's copy is as fast.
const ntMin = 16 << 10

// Copy copies min(len(dst), len(src)) bytes from src to dst and returns
// the count, like the built-in copy. On amd64 CPUs with AVX, a copy of at
// least 16 KiB whose ranges do not overlap uses non-temporal (streaming)
// stores, ending with a store fence: it bypasses the cache instead of
// reading each destination line first, which roughly triples throughput
// for the 16 KiB - 1 MiB pieces a KV block is made of (Go's copy streams
// only much larger copies). The bytes are visible to other threads and
// processes once Copy returns, as after copy. Meant for the transfer
// paths (shm, local copies) whose destination is not read again at once.
func Copy(dst, src []byte) int {
	n, streamed := copyUnfenced(dst, src, false, nil, ntMin)
	if streamed {
		fence()
	}
	return n
}

// gatherAhead is how far ahead of its loads Gather prefetches the
// source, in bytes (the constant is also in copy_amd64.s). The hardware
// prefetcher restarts at every piece of a scattered source and, on the
// 2-core dev machine, a gather of 32 KiB pieces read 0.8x as fast as one
// contiguous copy; prefetching 8 KiB ahead, on into the next piece, makes
// it as fast (core/memory BenchmarkPieces).
const gatherAhead = 8 << 10

// Gather copies the concatenation of srcs, in order, into dst, up to
// len(dst) bytes, and returns the bytes copied. It is Copy for each piece
// with one store fence at the end for all of them instead of one per
// piece (a fence waits for every streamed line to reach memory: per
// 32 KiB piece that is a noticeable stall), and with the source
// prefetched gatherAhead bytes ahead across the pieces. The bytes are
// visible once Gather returns.
func Gather(dst []byte, srcs [][]byte) int {
	n, fenced := 0, false
	for i, s := range srcs {
		if n == len(dst) {
			break
		}
		var next []byte
		if i+1 < len(srcs) {
			next = srcs[i+1]
		}
		k, streamed := copyUnfenced(dst[n:], s, true, next, ntMin)
		n += k
		fenced = fenced || streamed
	}
	if fenced {
		fence()
	}
	return n
}

// Scatter copies src into the buffers dsts, in order, up to len(src)
// bytes, and returns the bytes copied; one store fence at the end, as
// Gather.
func Scatter(dsts [][]byte, src []byte) int {
	n, fenced := 0, false
	for _, d := range dsts {
		if n == len(src) {
			break
		}
		k, streamed := copyUnfenced(d, src[n:], false, nil, ntMin)
		n += k
		fenced = fenced || streamed
	}
	if fenced {
		fence()
	}
	return n
}

// Streams reports whether StreamUnfenced (and Copy, for copies of at
// least 16 KiB) use streaming stores on this CPU: amd64 with AVX. Where it
// is false they are the built-in copy.
func Streams() bool { return hasNT }

// StreamUnfenced copies min(len(dst), len(src)) bytes from src to dst and
// returns the count, and for a copy of at least 128 bytes (Copy streams
// only from 16 KiB) it writes the part that starts 32-byte aligned and
// spans whole 128-byte steps with streaming stores (the head and tail
// around it, under 160 bytes together, are copied normally; a copy too
// short to hold one aligned step streams nothing), without a closing
// fence: Fence
// must run after the last of a run of calls, before the bytes are
// published (acknowledged to a peer, handed to another thread). It is for a
// large destination filled piece by piece whose pieces may be short, such
// as a payload read from a socket in chunks through a small buffer that
// stays in cache: the destination as a whole is not read again at once,
// so its lines are written without being read first. Overlapping ranges
// are copied with the built-in copy.
func StreamUnfenced(dst, src []byte) int {
	n, _ := copyUnfenced(dst, src, false, nil, streamMin)
	return n
}

// Fence orders every streaming store made before it (StreamUnfenced)
// before every later store; the bytes are visible to other threads and
// processes once it returns. A no-op where Streams is false.
func Fence() { fence() }

// streamMin is the smallest copy StreamUnfenced streams: one 128-byte
// step of the streaming loop.
const streamMin = 128

// copyUnfenced is Copy without the final fence; streamed reports whether
// it used streaming stores (then a fence must follow). With prefetch the
// source is prefetched ahead, on into next (see stream). Copies shorter
// than least use the built-in copy.
func copyUnfenced(dst, src []byte, prefetch bool, next []byte, least int) (n int, streamed bool) {
	n = min(len(dst), len(src))
	if n < least || !hasNT || overlap(dst[:n], src[:n]) {
		return copy(dst, src), false
	}
	d, s := dst[:n], src[:n]
	// Head: up to 31 bytes so that the streamed part starts 32-byte aligned
	// (VMOVNTDQ faults on an unaligned destination).
	head := int((32 - AddrOf(d)%32) % 32)
	copy(d[:head], s[:head])
	body := (n - head) &^ 127
	stream(d[head:head+body], s[head:head+body], prefetch, next)
	copy(d[head+body:], s[head+body:])
	return n, true
}

// overlap reports whether a and b (non-empty) share memory.
func overlap(a, b []byte) bool {
	ab, bb := AddrOf(a), AddrOf(b)
	return ab < bb+uint64(len(b)) && bb < ab+uint64(len(a))
}
