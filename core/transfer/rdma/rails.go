package rdma

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/mooncake-go/mooncake/core/transfer"
	"github.com/mooncake-go/mooncake/core/transfer/topology"
)

// Path selection, shared by both builds so it is tested without hardware.
// The verbs data path (transport.go) calls rails.choose for every slice
// and groupSpans to batch slices by path.

// errUnreachable marks a control-channel failure (the peer's handshake
// endpoint cannot be dialled or broke): retrying on another rail cannot
// help, so such errors are not retried.
var errUnreachable = errors.New("peer unreachable")

// path is one (local device, peer device) pair: an endpoint.
type path struct {
	local  int    // index into rails.names (and the transport's opened devices)
	remote string // the peer's device name
}

// rails maps buffer locations to this transport's opened devices and to a
// peer's devices. Immutable after newRails; the Selector is safe for
// concurrent use.
type rails struct {
	names    []string       // opened devices; index = device index
	index    map[string]int // name -> index
	matrix   map[string][2][]string
	sel      *topology.Selector
	affinity bool
}

// newRails builds the selection state for the opened devices names (at
// least one) from matrix (nil: no matrix), restricted to them (see
// prepareMatrix); that restricted matrix is what peers are sent.
func newRails(names []string, matrix map[string][2][]string, opts topology.SelectorOptions, affinity bool) *rails {
	r := &rails{names: slices.Clone(names), index: make(map[string]int, len(names)), affinity: affinity}
	for i, n := range names {
		r.index[n] = i
	}
	r.matrix = prepareMatrix(matrix, names)
	r.sel = topology.NewSelector(r.matrix, opts)
	return r
}

// localDevice returns the index of the device that carries a slice of a
// local buffer at location on attempt retry (topology.Selector.Pick).
// Errors: topology.ErrNoDevice (wrapped), which cannot happen for rails
// built by newRails with at least one device.
func (r *rails) localDevice(location string, retry int) (int, error) {
	name, err := r.sel.Pick(location, retry)
	if err != nil {
		return 0, err
	}
	i, ok := r.index[name]
	if !ok { // prepareMatrix keeps only opened devices
		return 0, fmt.Errorf("%w: %q is not an opened device", topology.ErrNoDevice, name)
	}
	return i, nil
}

// choose returns the path of one slice from a local buffer at localLoc to
// a peer buffer at remoteLoc, given the peer's matrix (as peerMatrix
// returns it), on attempt retry: the local device from this transport's
// matrix, the peer device from the peer's, with destination affinity to
// the local device's name when configured. Errors: topology.ErrNoDevice
// (wrapped).
func (r *rails) choose(localLoc string, peer map[string][2][]string, remoteLoc string, retry int) (path, error) {
	i, err := r.localDevice(localLoc, retry)
	if err != nil {
		return path{}, err
	}
	dev, err := r.sel.PickRemote(peer, remoteLoc, retry, r.names[i], r.affinity)
	if err != nil {
		return path{}, err
	}
	return path{local: i, remote: dev}, nil
}

// prepareMatrix returns matrix restricted to the devices in names (each
// entry keeps only those, in order, a device listed as preferred dropped
// from other, duplicates dropped); when that leaves no device at all, it
// returns {"*": [names, []]}, so every device serves every location. The
// result shares nothing with matrix.
func prepareMatrix(matrix map[string][2][]string, names []string) map[string][2][]string {
	out := make(map[string][2][]string, len(matrix))
	found := false
	for loc, e := range matrix {
		seen := map[string]bool{}
		var r [2][]string
		for k, list := range e {
			r[k] = []string{}
			for _, d := range list {
				if !seen[d] && slices.Contains(names, d) {
					seen[d] = true
					r[k] = append(r[k], d)
				}
			}
		}
		found = found || len(seen) > 0
		out[loc] = r
	}
	if !found {
		return map[string][2][]string{topology.WildcardLocation: {slices.Clone(names), {}}}
	}
	return out
}

// peerMatrix turns a peer's published matrix and device list into the
// form choose wants: restricted to the devices the peer has keys for, with
// the wildcard entry resolved. Errors: ErrHandshake (wrapped) when the
// peer lists no device.
func peerMatrix(matrix map[string][2][]string, devices []string) (map[string][2][]string, error) {
	if len(devices) == 0 {
		return nil, fmt.Errorf("%w: peer lists no RDMA device", ErrHandshake)
	}
	return topology.Resolve(prepareMatrix(matrix, devices)), nil
}

// discoverMatrix is the default priority matrix for the opened devices:
// discovered from sysfs under sysfsRoot ("" = /sys), without NVML (GPU
// entries come from sysfs; this transport registers host memory only).
// nil when sysfs cannot be read; prepareMatrix then falls back to "every
// device for every location".
func discoverMatrix(sysfsRoot string, names []string) map[string][2][]string {
	t, err := topology.DiscoverWith(topology.Config{SysfsRoot: sysfsRoot, Filter: names, DisableNVML: true})
	if err != nil {
		return nil
	}
	return t.PriorityMatrix()
}

// span is one slice of a request: [off, off+len) of both buffers.
type span struct{ off, len uint64 }

// splitSpans splits [0, n) into slices of at most size bytes, in order.
func splitSpans(n, size uint64) []span {
	out := make([]span, 0, (n+size-1)/size)
	for off := uint64(0); off < n; off += size {
		out = append(out, span{off, min(size, n-off)})
	}
	return out
}

// groupSpans chooses a path for every span (choose is called once per
// span, in order) and groups the spans by path, keeping their order.
// Errors: choose's first error.
func groupSpans(spans []span, choose func() (path, error)) (map[path][]span, error) {
	groups := map[path][]span{}
	for _, s := range spans {
		p, err := choose()
		if err != nil {
			return nil, err
		}
		groups[p] = append(groups[p], s)
	}
	return groups, nil
}

// transferSpans carries spans (the slices of one request) with retries:
// attempt k (0 = first) chooses a path per pending span with choose(k),
// groups them by path and hands the groups to runGroups, which runs them
// and returns the spans of the paths that failed with an error; those are
// resubmitted as attempt k+1 while the error is retryable and k <
// maxRetry. It returns the number of attempts made and nil, or the last
// error (ctx's error when ctx ended).
func transferSpans(ctx context.Context, spans []span, maxRetry int, choose func(retry int) (path, error),
	run func(map[path][]span) ([]span, error)) (int, error) {
	for retry := 0; ; retry++ {
		groups, err := groupSpans(spans, func() (path, error) { return choose(retry) })
		if err != nil {
			return retry + 1, err
		}
		failed, err := run(groups)
		if err == nil {
			return retry + 1, nil
		}
		if !retryable(ctx, err) || retry >= maxRetry {
			if ctx.Err() != nil {
				err = ctx.Err()
			}
			return retry + 1, err
		}
		spans = failed
	}
}

// runGroups runs each path's spans with runPath, concurrently when there
// are several paths, and returns the spans of the paths that failed and
// one of their errors, a non-retryable one if any (so it is not retried).
func runGroups(ctx context.Context, groups map[path][]span, runPath func(path, []span) error) ([]span, error) {
	if len(groups) == 1 {
		for k, spans := range groups {
			if err := runPath(k, spans); err != nil {
				return spans, err
			}
		}
		return nil, nil
	}
	type result struct {
		spans []span
		err   error
	}
	results := make(chan result, len(groups))
	for k, spans := range groups {
		go func() { results <- result{spans, runPath(k, spans)} }()
	}
	var failed []span
	var first error
	for range groups {
		r := <-results
		if r.err != nil {
			failed = append(failed, r.spans...)
			if first == nil || (retryable(ctx, first) && !retryable(ctx, r.err)) {
				first = r.err
			}
		}
	}
	return failed, first
}

// retryable reports whether a failed attempt may be resubmitted on
// another path: not when ctx is done, the transport or peer closed, the
// target refused the range, the arguments are wrong, or the peer's control
// channel is unreachable.
func retryable(ctx context.Context, err error) bool {
	switch {
	case ctx.Err() != nil,
		errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded),
		errors.Is(err, transfer.ErrClosed), errors.Is(err, transfer.ErrRejected),
		errors.Is(err, transfer.ErrInvalidArgument), errors.Is(err, errUnreachable):
		return false
	}
	return true
}
