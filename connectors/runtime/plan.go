package runtime

import (
	"context"
	"errors"
	"time"
)

// Errors returned by this package; match with errors.Is.
var (
	// ErrInvalidConfig is matched by every config Validate error.
	ErrInvalidConfig = errors.New("runtime: invalid config")
	// ErrInvalidRequest is returned for engine input that breaks the
	// contract (tokens not in whole blocks, too few block ids, an
	// allocation the lookup did not offer).
	ErrInvalidRequest = errors.New("runtime: invalid request")
	// ErrClosed is returned after Worker.Close.
	ErrClosed = errors.New("runtime: closed")
)

// Plan is everything the workers must do in one engine step; the scheduler
// half builds it (Scheduler.BuildPlan) and every worker of the engine
// receives the same Plan (Worker.Start). It is plain data so an adapter
// can serialize it.
type Plan struct {
	// Loads copy blocks from the pool into the engine's blocks.
	Loads []LoadSpec
	// Saves copy the engine's blocks into the pool.
	Saves []SaveSpec
	// Finished lists the requests the engine finished (including aborts)
	// since the previous plan; workers drop their state and cancel their
	// unfinished loads.
	Finished []string
	// Tag is handed, unchanged, to the Loader and Saver of every job this
	// plan starts (JobOf); an adapter uses it to tie jobs to their engine
	// step (layer-wise transfer). Not serialized.
	Tag any `json:"-"`
}

// JobInfo describes the job a Loader or Saver call belongs to.
type JobInfo struct {
	ReqID string
	// Async is set for an asynchronous load.
	Async bool
	// Tag is the starting Plan's Tag.
	Tag any
}

type jobInfoKey struct{}

// JobOf returns the job of a Loader or Saver call, from its context; ok
// is false for a context no Worker made.
func JobOf(ctx context.Context) (info JobInfo, ok bool) {
	info, ok = ctx.Value(jobInfoKey{}).(JobInfo)
	return info, ok
}

// LoadSpec loads Hashes[i]'s block into engine block BlockIDs[i].
type LoadSpec struct {
	ReqID    string
	Hashes   [][]byte
	BlockIDs []int
	// Async loads complete across steps and are reported by
	// Worker.GetFinished; synchronous ones complete within the step
	// (Worker.WaitForLoad).
	Async bool
}

// SaveSpec stores engine block BlockIDs[i] under Hashes[i].
type SaveSpec struct {
	ReqID    string
	Hashes   [][]byte
	BlockIDs []int
}

// Loader reads pool objects into engine blocks: keys[i] into block
// blockIDs[i]. It returns one error per key (nil = landed) and must return
// when ctx is done. An adapter implements it with the store client's
// BatchGetInto and a kvpool.Layout's Scatter (or zero-copy reads into
// registered engine memory).
type Loader interface {
	Load(ctx context.Context, keys []string, blockIDs []int) []error
}

// Saver writes engine blocks to the pool: block blockIDs[i] under
// keys[i]. It returns one error per key (nil = stored, or already present)
// and must return when ctx is done. An adapter implements it with a
// kvpool.Layout's Gather and the store client's BatchPutFrom.
type Saver interface {
	Save(ctx context.Context, keys []string, blockIDs []int) []error
}

// Default deadlines.
const (
	DefaultLookupTimeout = 5 * time.Second
	DefaultLoadTimeout   = 30 * time.Second
	DefaultSaveTimeout   = 30 * time.Second
	DefaultMaxInFlight   = 4
)
