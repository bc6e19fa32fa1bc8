package topology

import (
	"bufio"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// WildcardLocation is upstream's kWildcardLocation: a buffer whose NUMA
// placement is unknown; the engine may use any HCA for it.
const WildcardLocation = "*"

// LocationOf returns the location tag ("cpu:N") of the host memory mapping
// that contains addr in this process, or WildcardLocation ("*") when it
// cannot tell: no mapping contains addr, none of its pages is resident yet,
// or the kernel has no NUMA accounting.
//
// Upstream's getMemoryLocation asks numa_move_pages for every page and may
// split a buffer into per-node entries; this reads <ProcRoot>/self/maps to
// find the mapping and <ProcRoot>/self/numa_maps for its per-node resident
// page counts (N<node>=<pages>), and reports the node holding most of the
// mapping's pages: one answer per mapping, not per page, and no cgo or
// unsafe. Touch (fault in) a buffer before asking. Reading numa_maps makes
// the kernel walk the page tables of the mappings listed before the one
// wanted, so call this at registration time, not per request. GPU memory is
// not recognised (the cuda package knows device pointers): the caller tags
// those "cuda:N" itself.
func (t *Topology) LocationOf(addr uintptr) string {
	proc := t.procRoot
	if proc == "" {
		proc = "/proc"
	}
	start, ok := mappingStart(filepath.Join(proc, "self", "maps"), uint64(addr))
	if !ok {
		return WildcardLocation
	}
	node, ok := dominantNode(filepath.Join(proc, "self", "numa_maps"), start)
	if !ok {
		return WildcardLocation
	}
	return "cpu:" + strconv.Itoa(node)
}

// mappingStart finds the mapping containing addr in a maps file
// ("start-end perms offset dev inode path", hex addresses).
func mappingStart(path string, addr uint64) (uint64, bool) {
	f, err := os.Open(path)
	if err != nil {
		return 0, false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		rng, _, _ := strings.Cut(sc.Text(), " ")
		lo, hi, ok := strings.Cut(rng, "-")
		if !ok {
			continue
		}
		a, err1 := strconv.ParseUint(lo, 16, 64)
		b, err2 := strconv.ParseUint(hi, 16, 64)
		if err1 == nil && err2 == nil && a <= addr && addr < b {
			return a, true
		}
	}
	return 0, false
}

// dominantNode returns the node with the most resident pages of the
// mapping starting at start in a numa_maps file ("start policy key=value
// ... N0=12 N1=3 ..."); ties go to the lower node.
func dominantNode(path string, start uint64) (int, bool) {
	f, err := os.Open(path)
	if err != nil {
		return 0, false
	}
	defer f.Close()
	want := strconv.FormatUint(start, 16)
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 64*1024), 1024*1024)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) == 0 || strings.TrimLeft(fields[0], "0") != strings.TrimLeft(want, "0") {
			continue
		}
		best, bestPages := -1, uint64(0)
		for _, kv := range fields[1:] {
			k, v, ok := strings.Cut(kv, "=")
			if !ok || len(k) < 2 || k[0] != 'N' {
				continue
			}
			node, err1 := strconv.Atoi(k[1:])
			pages, err2 := strconv.ParseUint(v, 10, 64)
			if err1 != nil || err2 != nil {
				continue
			}
			if pages > bestPages || (pages == bestPages && best >= 0 && node < best) {
				best, bestPages = node, pages
			}
		}
		return best, best >= 0
	}
	return 0, false
}
