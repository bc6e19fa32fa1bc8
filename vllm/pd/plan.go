package pd

import "github.com/mooncake-go/mooncake/core/transfer"

// run is a stretch of n blocks consecutive on both sides: producer blocks
// src..src+n-1 go to consumer blocks dst..dst+n-1.
type run struct {
	src, dst, n int
}

// coalesce groups src[i] -> dst[i] (equal lengths) into runs where both
// sides are consecutive, as upstream's group_concurrent_contiguous.
func coalesce(src, dst []int) []run {
	var out []run
	for i := range src {
		if k := len(out) - 1; k >= 0 && out[k].src+out[k].n == src[i] && out[k].dst+out[k].n == dst[i] {
			out[k].n++
			continue
		}
		out = append(out, run{src: src[i], dst: dst[i], n: 1})
	}
	return out
}

// writes builds one WRITE request per run per region: region i of local
// goes to region i of remote in segment seg. Regions have equal block
// sizes (checked by the caller).
func writes(local []Region, remote []wireRegion, runs []run, seg transfer.SegmentID) []transfer.Request {
	reqs := make([]transfer.Request, 0, len(local)*len(runs))
	for i, l := range local {
		lb, rb, bs := l.base(), remote[i].Base, l.BlockBytes
		for _, r := range runs {
			reqs = append(reqs, transfer.Request{
				Op:           transfer.Write,
				Source:       lb + uint64(r.src)*bs,
				Target:       seg,
				TargetOffset: rb + uint64(r.dst)*bs,
				Length:       uint64(r.n) * bs,
			})
		}
	}
	return reqs
}
