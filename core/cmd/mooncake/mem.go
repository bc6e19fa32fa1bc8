package main

import (
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/mooncake-go/mooncake/core/kvpool/geometry"
)

// Memory a command is about to map, checked against what this machine can
// give it. A segment is a sparse memory file: mapping 1 TiB on a 23 GiB
// machine succeeds, and the process is killed (or the pool's writers get
// SIGBUS) only once the pages are written. So `mooncake node` and the
// in-process pool of `mooncake replay` refuse sizes over their share of the
// available memory up front, naming both figures.

// memFiles are the files availableMemory reads: /proc/meminfo, and the
// cgroup (v2, then v1) memory limit and usage of this process's container.
var memFiles = struct{ meminfo, v2max, v2cur, v1max, v1cur string }{
	"/proc/meminfo",
	"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory.current",
	"/sys/fs/cgroup/memory/memory.limit_in_bytes", "/sys/fs/cgroup/memory/memory.usage_in_bytes",
}

// availableMemory is the memory in bytes this process can still take
// without swapping or being killed: MemAvailable from /proc/meminfo, or less
// when a cgroup memory limit leaves less (limit minus usage). 0 when
// unknown (no /proc/meminfo), in which case no check is made.
func availableMemory() int64 {
	return availableMemoryFrom(func(p string) ([]byte, error) { return os.ReadFile(p) })
}

// availableMemoryFrom is availableMemory reading files through read.
func availableMemoryFrom(read func(path string) ([]byte, error)) int64 {
	var avail int64
	if b, err := read(memFiles.meminfo); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if f := strings.Fields(line); len(f) >= 2 && f[0] == "MemAvailable:" {
				if kb, err := strconv.ParseInt(f[1], 10, 64); err == nil && kb > 0 {
					avail = kb << 10
				}
			}
		}
	}
	if avail <= 0 {
		return 0
	}
	number := func(p string) (int64, bool) {
		b, err := read(p)
		if err != nil {
			return 0, false
		}
		n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64) // "max" (no limit) fails
		return n, err == nil && n > 0
	}
	for _, pair := range [][2]string{{memFiles.v2max, memFiles.v2cur}, {memFiles.v1max, memFiles.v1cur}} {
		limit, ok := number(pair[0])
		if !ok || limit >= 1<<62 { // cgroup v1 writes "no limit" as a huge number
			continue
		}
		used, _ := number(pair[1])
		avail = min(avail, max(limit-used, 0))
		break
	}
	return avail
}

// checkMemory refuses need bytes of memory for what (the flag or the
// thing being sized, as the user knows it) when it exceeds share (0 <
// share <= 1) of avail bytes; avail <= 0 (unknown) passes. The error names
// both sizes; callers add the command name, what to pass instead, and exit
// status 2 (a usage error: this machine cannot run what was asked).
func checkMemory(what string, need, avail int64, share float64) error {
	if avail <= 0 || float64(need) <= share*float64(avail) {
		return nil
	}
	limit := "this machine's available memory"
	if share < 1 {
		limit = shareText(share) + " of " + limit
	}
	return fmt.Errorf("%s (%s) exceeds %s (%s)", what, geometry.FormatSize(need), limit, geometry.FormatSize(avail))
}

// shareText writes 0.5 as "half", other shares as percentages.
func shareText(share float64) string {
	if share == 0.5 {
		return "half"
	}
	return strconv.FormatFloat(100*share, 'g', 3, 64) + "%"
}
