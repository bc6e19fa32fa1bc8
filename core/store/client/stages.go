package client

import (
	"context"
	"time"
)

// Stage names one step of a put or a get, as Stages records it.
type Stage int

// The steps of a put (PutStart RPC, WRITE transfer, PutEnd RPC) and of a
// get (GetReplicaList RPC, READ transfer).
const (
	StagePutStart    Stage = iota // master PutStart (allocation), one RPC (building the transfer requests after it is in no stage)
	StageWrite                    // transfer engine WRITE into every replica, acknowledged
	StagePutEnd                   // master PutEnd, one RPC
	StageReplicaList              // master GetReplicaList (lease granted), one RPC
	StageRead                     // transfer engine READ from the chosen replica
	NumStages
)

var stageNames = [NumStages]string{"put_start", "write", "put_end", "replica_list", "read"}

// String is the stage's name: put_start, write, put_end, replica_list, read.
func (s Stage) String() string {
	if s < 0 || s >= NumStages {
		return "unknown"
	}
	return stageNames[s]
}

// Stages receives the time each step of one call took; a call made with a
// context from WithStages adds to it (a batch call adds once per step, not
// per key). Not safe for concurrent use: give each goroutine its own.
// Ours: upstream has no per-stage timing.
type Stages struct {
	D [NumStages]time.Duration // summed per stage since the last Reset
}

// Reset zeroes every stage.
func (s *Stages) Reset() { s.D = [NumStages]time.Duration{} }

type stagesKey struct{}

// WithStages returns ctx carrying s: calls of this package made with it
// add the duration of each of their steps to s.
func WithStages(ctx context.Context, s *Stages) context.Context {
	return context.WithValue(ctx, stagesKey{}, s)
}

// stagesOf is the recorder ctx carries, or nil.
func stagesOf(ctx context.Context) *Stages {
	s, _ := ctx.Value(stagesKey{}).(*Stages)
	return s
}

// since adds the time since t0 to stage st of s (nil s: nothing) and
// returns now, the start of the next stage.
func (s *Stages) since(st Stage, t0 time.Time) time.Time {
	if s == nil {
		return t0
	}
	now := time.Now()
	s.D[st] += now.Sub(t0)
	return now
}

// restart returns now, the start of the next stage, when s records (the
// time since t0 then counts in no stage), else t0.
func (s *Stages) restart(t0 time.Time) time.Time {
	if s == nil {
		return t0
	}
	return time.Now()
}
