package topology

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
)

// PriorityMatrix returns upstream's NIC priority matrix: for each memory
// location a pair [preferred HCAs, other HCAs], device names in name order,
// never nil slices (so the JSON is upstream's
// {"cpu:0": [["mlx5_0"], ["mlx5_1"]], ...}).
//
//   - "cpu:N" for each NUMA node: HCAs whose numa_node is N are preferred,
//     all others (including those with an unknown node, -1) are "other"
//     (upstream discoverCpuTopology).
//   - "cuda:N" for each GPU: the candidates are the HCAs on the GPU's NUMA
//     node, or all HCAs when none is; among the candidates those at the
//     smallest PCI distance are preferred, the rest are "other" (upstream
//     discoverCudaTopology, current version). The PCI distance is
//     upstream's getPciDistance: the number of '/' after the longest common
//     character prefix of the two resolved sysfs device paths, so two
//     devices behind the same bridge are at distance 0. When no distance
//     can be computed (unresolved paths) but NUMA narrowed the candidates,
//     the same-node candidates are preferred; upstream would prefer none.
//
// With no HCA every entry is [[], []]. Selector makes upstream's
// per-slice choice on the matrix (preferred list at random or round-robin,
// preferred then other on retries). The matrix is a pure function of t.
func (t *Topology) PriorityMatrix() map[string][2][]string {
	m := make(map[string][2][]string, len(t.NUMA)+len(t.GPUs))
	for _, n := range t.NUMA {
		pref, other := []string{}, []string{}
		for _, d := range t.RDMA {
			if d.NUMANode == n.ID {
				pref = append(pref, d.Name)
			} else {
				other = append(other, d.Name)
			}
		}
		m["cpu:"+strconv.Itoa(n.ID)] = [2][]string{pref, other}
	}
	for _, g := range t.GPUs {
		m["cuda:"+strconv.Itoa(g.Index)] = gpuEntry(g, t.RDMA)
	}
	return m
}

// gpuEntry computes one "cuda:N" entry (see PriorityMatrix).
func gpuEntry(g GPU, hcas []RDMADevice) [2][]string {
	var cands []RDMADevice
	numaFiltered := false
	if g.NUMANode >= 0 {
		for _, d := range hcas {
			if d.NUMANode == g.NUMANode {
				cands = append(cands, d)
			}
		}
		numaFiltered = len(cands) > 0
	}
	if !numaFiltered {
		cands = hcas
	}
	best := -1
	preferred := map[string]bool{}
	for _, d := range cands {
		dist := pciDistance(d.PCIPath, g.PCIPath)
		switch {
		case dist < 0:
		case best < 0 || dist < best:
			best = dist
			preferred = map[string]bool{d.Name: true}
		case dist == best:
			preferred[d.Name] = true
		}
	}
	if best < 0 && numaFiltered {
		for _, d := range cands {
			preferred[d.Name] = true
		}
	}
	pref, other := []string{}, []string{}
	for _, d := range hcas {
		if preferred[d.Name] {
			pref = append(pref, d.Name)
		} else {
			other = append(other, d.Name)
		}
	}
	return [2][]string{pref, other}
}

// pciDistance is upstream's getPciDistance on two resolved device paths:
// skip the longest common character prefix, then count the '/' left in
// both. -1 when either path is unknown.
func pciDistance(p1, p2 string) int {
	if p1 == "" || p2 == "" {
		return -1
	}
	i := 0
	for i < len(p1) && i < len(p2) && p1[i] == p2[i] {
		i++
	}
	return strings.Count(p1[i:], "/") + strings.Count(p2[i:], "/")
}

// ParseMatrix decodes a priority matrix in upstream's JSON form (the
// document MC_CUSTOM_TOPO_JSON names, or the bench's
// --nic_priority_matrix): an object mapping each location to an array of
// exactly two arrays of device names. Errors: ErrInvalidMatrix (wrapped,
// naming the location) for empty input, invalid JSON, or an entry of
// another shape, as upstream's Topology::parse returns ERR_MALFORMED_JSON.
// Missing inner arrays decode as empty, non-nil slices.
func ParseMatrix(data []byte) (map[string][2][]string, error) {
	if len(strings.TrimSpace(string(data))) == 0 {
		return nil, fmt.Errorf("%w: empty document", ErrInvalidMatrix)
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(data, &raw); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalidMatrix, err)
	}
	if raw == nil {
		return nil, fmt.Errorf("%w: not an object", ErrInvalidMatrix)
	}
	m := make(map[string][2][]string, len(raw))
	for loc, v := range raw {
		var pair [][]string
		if err := json.Unmarshal(v, &pair); err != nil || len(pair) != 2 {
			return nil, fmt.Errorf("%w: entry %q is not [[preferred...], [other...]]", ErrInvalidMatrix, loc)
		}
		for i := range pair {
			if pair[i] == nil {
				pair[i] = []string{}
			}
		}
		m[loc] = [2][]string{pair[0], pair[1]}
	}
	return m, nil
}
