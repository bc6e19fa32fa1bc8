package server

import (
	"context"

	"github.com/mooncake-go/mooncake/core/store"
	"github.com/mooncake-go/mooncake/core/store/master"
	pb "github.com/mooncake-go/mooncake/core/store/storepb"
)

// Single-key RPCs, bulk removal, sizes, remount and operator listing. The
// single-key forms run the batch forms on one key, so both share every
// check and metric; errors travel in the response's Status (upstream
// ErrorCode), never as gRPC errors.

// replicaConfig converts a wire config; nil asks for one replica.
func replicaConfig(c *pb.ReplicaConfig) master.ReplicaConfig {
	if c == nil {
		return master.ReplicaConfig{ReplicaNum: 1}
	}
	return master.ReplicaConfig{
		ReplicaNum:        int(c.ReplicaNum),
		PreferredSegment:  c.PreferredSegment,
		PreferredSegments: c.PreferredSegments,
		HostID:            c.HostId,
		WithSoftPin:       c.WithSoftPin,
		WithHardPin:       c.WithHardPin,
	}
}

// segment converts a wire segment. A kind outside uint8 becomes an
// undefined store.SegmentKind, which the master refuses with
// INVALID_PARAMS.
func segment(g *pb.Segment) master.Segment {
	kind := store.SegmentKind(255)
	if k := g.GetKind(); k >= 0 && k < 255 {
		kind = store.SegmentKind(k)
	}
	return master.Segment{ID: g.Id, Name: g.Name, Base: g.Base, Size: g.Size, Protocol: g.Protocol, HostID: g.HostId, Kind: kind}
}

func segmentPB(g master.Segment) *pb.Segment {
	return &pb.Segment{Id: g.ID, Name: g.Name, Base: g.Base, Size: g.Size, Protocol: g.Protocol, HostId: g.HostID, Kind: pb.SegmentKind(g.Kind)}
}

func slicesPB(ss []master.Slice) []*pb.Slice {
	if len(ss) == 0 {
		return nil
	}
	out := make([]*pb.Slice, len(ss))
	for i, x := range ss {
		out[i] = &pb.Slice{Segment: x.Segment, SegmentId: x.SegmentID, Addr: x.Addr, Size: x.Size}
	}
	return out
}

func moreStats(out *pb.StatsResponse, st master.Stats) {
	out.SoftPinned, out.HardPinned, out.Clients = int64(st.SoftPinned), int64(st.HardPinned), int64(st.Clients)
	out.PartialPuts, out.StripedPuts, out.DiscardedBytes = st.PartialPuts, st.StripedPuts, st.DiscardedBytes
	out.DiskCapacity, out.DiskUsed, out.DiskObjects = st.DiskCapacity, st.DiskUsed, int64(st.DiskObjects)
	out.Offloads, out.OffloadFailures, out.DiskHits, out.DiskMisses = st.Offloads, st.OffloadFailures, st.DiskHits, st.DiskMisses
	out.DiskEvictions, out.TierTaskTimeouts, out.PendingOffloadBytes = st.DiskEvictions, st.TierTaskTimeouts, st.PendingOffloadBytes
	out.Reserved, out.Reservations = st.Reserved, int64(st.Reservations)
}

func keyInfoPB(in master.ObjectInfo) *pb.KeyInfo {
	return &pb.KeyInfo{
		Key: []byte(in.Key), Size: in.Size, Owner: in.Owner, Complete: in.Complete, Replicas: replicas(in.Replicas),
		LeaseMsLeft: uint64(in.LeaseLeft.Milliseconds()), SoftPin: in.SoftPin, HardPin: in.HardPin,
		SoftPinMsLeft: uint64(in.SoftPinLeft.Milliseconds()), ObjectId: in.ID,
	}
}

func segmentInfoPB(in master.SegmentInfo) *pb.SegmentInfo {
	return &pb.SegmentInfo{Segment: segmentPB(in.Segment), ClientId: in.Client, Used: in.Used, LargestFree: in.LargestFree, Objects: int64(in.Objects)}
}

// one returns the only element of a batch result, or fails the call with
// INTERNAL_ERROR in its status when the batch form broke its contract.
func one[T any](rs []T, fail func(*pb.Status) T) T {
	if len(rs) != 1 {
		return fail(status(store.Errorf(store.InternalError, "%d results for one key", len(rs))))
	}
	return rs[0]
}

func failStatus(s *pb.Status) *pb.Status { return s }

// PutStart implements storepb.MasterServer: BatchPutStart of one key.
func (s *Server) PutStart(ctx context.Context, req *pb.PutStartRequest) (*pb.PutStartResult, error) {
	r, err := s.BatchPutStart(ctx, &pb.BatchPutStartRequest{ClientId: req.ClientId, Keys: [][]byte{req.Key}, Sizes: []uint64{req.Size}, Config: req.Config})
	if err != nil {
		return nil, err
	}
	return one(r.Results, func(st *pb.Status) *pb.PutStartResult { return &pb.PutStartResult{Status: st} }), nil
}

// PutEnd implements storepb.MasterServer: BatchPutEnd of one key.
func (s *Server) PutEnd(ctx context.Context, req *pb.KeyRequest) (*pb.Status, error) {
	r, err := s.BatchPutEnd(ctx, &pb.KeysRequest{ClientId: req.ClientId, Keys: [][]byte{req.Key}})
	if err != nil {
		return nil, err
	}
	return one(r.Results, failStatus), nil
}

// PutRevoke implements storepb.MasterServer: BatchPutRevoke of one key.
func (s *Server) PutRevoke(ctx context.Context, req *pb.KeyRequest) (*pb.Status, error) {
	r, err := s.BatchPutRevoke(ctx, &pb.KeysRequest{ClientId: req.ClientId, Keys: [][]byte{req.Key}})
	if err != nil {
		return nil, err
	}
	return one(r.Results, failStatus), nil
}

// GetReplicaList implements storepb.MasterServer: BatchGetReplicaList of
// one key (grants a lease).
func (s *Server) GetReplicaList(ctx context.Context, req *pb.KeyRequest) (*pb.GetReplicaListResult, error) {
	r, err := s.BatchGetReplicaList(ctx, &pb.KeysRequest{ClientId: req.ClientId, Keys: [][]byte{req.Key}})
	if err != nil {
		return nil, err
	}
	return one(r.Results, func(st *pb.Status) *pb.GetReplicaListResult { return &pb.GetReplicaListResult{Status: st} }), nil
}

// ExistKey implements storepb.MasterServer: BatchExistKey of one key.
func (s *Server) ExistKey(ctx context.Context, req *pb.KeyRequest) (*pb.ExistResult, error) {
	r, err := s.BatchExistKey(ctx, &pb.KeysRequest{ClientId: req.ClientId, Keys: [][]byte{req.Key}})
	if err != nil {
		return nil, err
	}
	return one(r.Results, func(st *pb.Status) *pb.ExistResult { return &pb.ExistResult{Status: st} }), nil
}

// Remove implements storepb.MasterServer: BatchRemove of one key.
func (s *Server) Remove(ctx context.Context, req *pb.KeyRequest) (*pb.Status, error) {
	r, err := s.BatchRemove(ctx, &pb.KeysRequest{ClientId: req.ClientId, Keys: [][]byte{req.Key}, Force: req.Force})
	if err != nil {
		return nil, err
	}
	return one(r.Results, failStatus), nil
}

// RemoveByRegex implements storepb.MasterServer (master.RemoveByRegex).
func (s *Server) RemoveByRegex(ctx context.Context, req *pb.RemoveByRegexRequest) (*pb.CountResponse, error) {
	s.mu.Lock()
	r, err := s.mu.m.RemoveByRegexReport(req.Regex, req.Force)
	s.unlock()
	return &pb.CountResponse{Status: status(err), Count: int64(r.Removed),
		SkippedLeased: int64(r.Leased), SkippedBusy: int64(r.Busy), SkippedWriting: int64(r.Writing)}, nil
}

// RemoveAll implements storepb.MasterServer (master.RemoveAll).
func (s *Server) RemoveAll(ctx context.Context, req *pb.RemoveAllRequest) (*pb.CountResponse, error) {
	s.mu.Lock()
	n := s.mu.m.RemoveAll(req.Force)
	s.unlock()
	return &pb.CountResponse{Status: status(nil), Count: int64(n)}, nil
}

// BatchGetSize implements storepb.MasterServer: per key, the value's size
// (master.GetSize) and its description (master.Stat); no lease is granted.
// A precommitted key is answered once its write ends (awaitSeals).
func (s *Server) BatchGetSize(ctx context.Context, req *pb.KeysRequest) (*pb.BatchGetSizeResponse, error) {
	s.awaitSeals(ctx, req.Keys)
	out := &pb.BatchGetSizeResponse{Results: make([]*pb.GetSizeResult, len(req.Keys))}
	s.mu.Lock()
	defer s.unlock()
	for i, kb := range req.Keys {
		k := string(kb)
		n, err := s.mu.m.GetSize(k)
		r := &pb.GetSizeResult{Status: status(err), Size: n}
		if err == nil {
			if in, err := s.mu.m.Stat(k); err == nil {
				r.Info = keyInfoPB(in)
			}
		}
		out.Results[i] = r
	}
	return out, nil
}

// ReMountSegment implements storepb.MasterServer (master.ReMountSegment).
func (s *Server) ReMountSegment(ctx context.Context, req *pb.ReMountSegmentRequest) (*pb.Status, error) {
	segs := make([]master.Segment, len(req.Segments))
	for i, g := range req.Segments {
		if g == nil {
			return status(store.Errorf(store.InvalidParams, "remount: segment %d is missing", i)), nil
		}
		segs[i] = segment(g)
	}
	s.mu.Lock()
	defer s.unlock()
	return status(s.mu.m.ReMountSegment(segs, req.ClientId)), nil
}

// ListSegments implements storepb.MasterServer (operator listing).
func (s *Server) ListSegments(ctx context.Context, req *pb.ListSegmentsRequest) (*pb.ListSegmentsResponse, error) {
	s.mu.Lock()
	segs := s.mu.m.ListSegments()
	s.unlock()
	out := &pb.ListSegmentsResponse{Segments: make([]*pb.SegmentInfo, len(segs))}
	for i, g := range segs {
		out.Segments[i] = segmentInfoPB(g)
	}
	return out, nil
}

// QuerySegment implements storepb.MasterServer (master.QuerySegment).
func (s *Server) QuerySegment(ctx context.Context, req *pb.QuerySegmentRequest) (*pb.QuerySegmentResponse, error) {
	s.mu.Lock()
	g, err := s.mu.m.QuerySegment(req.SegmentId)
	s.unlock()
	out := &pb.QuerySegmentResponse{Status: status(err)}
	if err == nil {
		out.Segment = segmentInfoPB(g)
	}
	return out, nil
}

// ListKeys implements storepb.MasterServer (master.ListKeys; no leases).
func (s *Server) ListKeys(ctx context.Context, req *pb.ListKeysRequest) (*pb.ListKeysResponse, error) {
	limit := int(req.Limit)
	if int64(limit) != req.Limit {
		limit = -1 // does not fit an int: reported as INVALID_PARAMS
	}
	s.mu.Lock()
	keys, total, err := s.mu.m.ListKeys(string(req.Prefix), limit)
	s.unlock()
	out := &pb.ListKeysResponse{Status: status(err), Total: int64(total), Keys: make([]*pb.KeyInfo, len(keys))}
	for i, k := range keys {
		out.Keys[i] = keyInfoPB(k)
	}
	return out, nil
}
