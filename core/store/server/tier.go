package server

import (
	"context"
	"time"

	"github.com/mooncake-go/mooncake/core/store"
	"github.com/mooncake-go/mooncake/core/store/master"
	pb "github.com/mooncake-go/mooncake/core/store/storepb"
)

// SSD tier RPCs (master/tier.go). Errors travel in the response's Status.

// MaxPollWait caps PollTierTasksRequest.WaitMs.
const MaxPollWait = 30 * time.Second

// MountLocalDisk implements storepb.MasterServer (master.MountLocalDisk).
func (s *Server) MountLocalDisk(ctx context.Context, req *pb.MountLocalDiskRequest) (*pb.Status, error) {
	s.mu.Lock()
	defer s.unlock()
	return status(s.mu.m.MountLocalDisk(req.SegmentId, req.ClientId, req.Capacity)), nil
}

// UnmountLocalDisk implements storepb.MasterServer
// (master.UnmountLocalDisk).
func (s *Server) UnmountLocalDisk(ctx context.Context, req *pb.UnmountSegmentRequest) (*pb.Status, error) {
	s.mu.Lock()
	defer s.unlock()
	return status(s.mu.m.UnmountLocalDisk(req.SegmentId, req.ClientId)), nil
}

// PollTierTasks implements storepb.MasterServer: master.TakeTierTasks,
// waiting up to WaitMs (at most MaxPollWait) for a task when none is
// queued, so an owner learns of a task as soon as it is queued without
// polling fast. An empty task list after the wait is not an error.
func (s *Server) PollTierTasks(ctx context.Context, req *pb.PollTierTasksRequest) (*pb.PollTierTasksResponse, error) {
	wait := min(time.Duration(req.WaitMs)*time.Millisecond, MaxPollWait)
	var timeout <-chan time.Time
	for {
		s.mu.Lock()
		ts, err := s.mu.m.TakeTierTasks(req.SegmentId, req.ClientId, int(req.Max))
		now := s.mu.m.Config().Now() // the master's clock sets the deadlines
		wake := s.mu.tierCh
		s.unlock()
		if err != nil || len(ts) > 0 || wait <= 0 {
			return &pb.PollTierTasksResponse{Status: status(err), Tasks: tierTasksPB(ts, now)}, nil
		}
		if timeout == nil {
			t := time.NewTimer(wait)
			defer t.Stop()
			timeout = t.C
		}
		select {
		case <-wake:
		case <-timeout:
			wait = 0 // one last look
		case <-ctx.Done():
			return &pb.PollTierTasksResponse{Status: status(nil)}, nil
		case <-s.stop:
			return &pb.PollTierTasksResponse{Status: status(store.Errorf(store.UnavailableInCurrentMode, "master shutting down"))}, nil
		}
	}
}

func tierTasksPB(ts []master.TierTask, now time.Time) []*pb.TierTask {
	out := make([]*pb.TierTask, len(ts))
	for i, t := range ts {
		out[i] = &pb.TierTask{Kind: int32(t.Kind), Key: []byte(t.Key), ObjectId: t.ObjectID, Addr: t.Addr, Size: t.Size,
			DeadlineMs: uint64(max(t.Deadline.Sub(now), 0).Milliseconds())}
	}
	return out
}

// CompleteTierTasks implements storepb.MasterServer:
// master.CompleteTierTask per result, statuses in input order.
func (s *Server) CompleteTierTasks(ctx context.Context, req *pb.CompleteTierTasksRequest) (*pb.StatusList, error) {
	out := &pb.StatusList{Results: make([]*pb.Status, len(req.Results))}
	s.mu.Lock()
	defer s.unlock()
	for i, r := range req.Results {
		if r == nil {
			out.Results[i] = status(store.Errorf(store.InvalidParams, "result %d is empty", i))
			continue
		}
		out.Results[i] = status(s.mu.m.CompleteTierTask(req.SegmentId, req.ClientId, master.TaskResult{
			Kind: master.TaskKind(r.Kind), Key: string(r.Key), ObjectID: r.ObjectId, OK: r.Ok, Reason: r.Reason}))
	}
	return out, nil
}
