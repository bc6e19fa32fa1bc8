// Package affinity keeps the threads that move bytes on every CPU the
// process started with, not on the one CPU an engine pinned its own
// thread to.
//
// Why: vLLM's CPU worker (and any engine that binds its OpenMP threads)
// pins its main thread to one compute core with sched_setaffinity. Our
// shared library is called on that thread, and when Go code running
// there starts goroutines and the runtime needs another OS thread, the
// new thread is cloned from the pinned one and inherits its one-CPU
// mask, for good. Over a run more and more of the runtime's threads are
// pinned to the engine's compute core: copies that should spread over
// the cores (and over the cores vLLM reserves for the engine core and
// the KV connector) queue behind each other and behind the engine's own
// work on that core. Measured in real vLLM on 2 cores: a load of 128 KV
// blocks ran at 10-13 GB/s or 22-25 GB/s depending on which threads its
// copies landed on.
//
// Widen undoes that for the calling goroutine's thread. Call it only
// from goroutines the library started itself (the transfer engine's
// workers, a connector's jobs): an exported function's own goroutine
// runs on the engine's thread, whose pinning is the engine's to choose.
package affinity

import (
	"runtime"

	"golang.org/x/sys/unix"
)

// startMask is the calling thread's CPU mask when the package was
// initialised, i.e. what the Go runtime started with: the Python package
// mooncake_go loads the library with the loading thread widened to every
// CPU the process may use (MC_KEEP_AFFINITY=1 keeps the caller's mask,
// e.g. a taskset: then that is the start mask); startCPUs counts it (0
// when it could not be read).
var (
	startMask unix.CPUSet
	startCPUs int
)

func init() {
	if unix.SchedGetaffinity(0, &startMask) == nil {
		startCPUs = startMask.Count()
	}
}

// StartCPUs is the number of CPUs in the mask the process's Go runtime
// started with (the set Widen restores); 0 when it could not be read.
func StartCPUs() int { return startCPUs }

// Widen lets the OS thread running the calling goroutine run on every CPU
// of the start mask again when its mask is a strict subset of it (it was
// cloned from a thread an engine pinned). A thread already on the whole
// start mask, or on CPUs outside it (someone widened or moved it on
// purpose), is left alone, as is everything when the start mask has one
// CPU or could not be read. It costs one sched_getaffinity system call
// (two when it changes the mask); errors are ignored (the thread keeps
// its mask). Reports whether it changed the mask.
//
// The goroutine may later run on another thread: call Widen where a
// goroutine that moves bytes starts, so each thread that runs such
// goroutines is widened the first time it does. Called now by the
// transfer engine's batch workers, a tcp connection's reader and writer,
// the shm prefault and the connector runtime's jobs.
func Widen() bool {
	if startCPUs < 2 {
		return false
	}
	// Read and set the mask of one thread: unlocked, the goroutine could
	// move to another thread between the two calls.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var cur unix.CPUSet
	if unix.SchedGetaffinity(0, &cur) != nil || cur == startMask {
		return false
	}
	for i := range cur {
		if cur[i]&^startMask[i] != 0 {
			return false // CPUs outside the start mask: not ours to undo
		}
	}
	return unix.SchedSetaffinity(0, &startMask) == nil
}
