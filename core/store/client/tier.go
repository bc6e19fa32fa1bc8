package client

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/mooncake-go/mooncake/core/store"
	"github.com/mooncake-go/mooncake/core/store/disk"
	pb "github.com/mooncake-go/mooncake/core/store/storepb"
)

// The SSD tier's owner side (core/store/master/tier.go has the protocol).
//
// A client with Config.StorageRootDir opens a disk.Store there, attaches
// it to its segment at the master (MountLocalDisk) and runs one worker
// goroutine that long-polls the master for tasks (PollTierTasks) and
// carries them out on its own segment's memory: an offload copies
// [Addr, Addr+Size) into a checksummed file, a load reads and verifies a
// file into [Addr, Addr+Size). Results, and the files the store evicted
// to make room, go back in one CompleteTierTasks call per batch (loads
// first, so a waiting reader is answered before the batch's offloads are
// written). A file whose offload the master no longer wants
// (TASK_NOT_FOUND: the object was removed, or a failover happened) is
// deleted again. A corrupt or missing file fails its load, which makes
// the master drop the object: readers get OBJECT_NOT_FOUND, never wrong
// bytes.

const (
	// tierBatch is how many tasks one poll takes.
	tierBatch = 16
	// tierPollWait is how long one poll waits for a task.
	tierPollWait = time.Second
	// tierRetry is the pause after a failed poll (master unreachable,
	// standby).
	tierRetry = 100 * time.Millisecond
)

// openTier opens the disk tier and attaches it at the master. Errors:
// INVALID_PARAMS (no segment, a bad or busy directory); UNABLE_OFFLOAD
// (the master runs without enable_offload); the RPC's.
func (c *Client) openTier(ctx context.Context) error {
	if c.segment == nil {
		return store.Errorf(store.InvalidParams, "storage_root_dir %q needs global_segment_size > 0: the disk tier stages objects through the segment", c.cfg.StorageRootDir)
	}
	// Ask the master first, so that a refusal (no enable_offload) leaves
	// the directory untouched.
	capacity, err := disk.ResolveCapacity(c.cfg.StorageRootDir, c.cfg.StorageQuota)
	if err != nil {
		return store.Errorf(store.InvalidParams, "storage_root_dir: %v", err)
	}
	if err := c.mountTier(ctx, capacity); err != nil {
		return err
	}
	d, err := disk.Open(disk.Config{Dir: c.cfg.StorageRootDir, Capacity: capacity})
	if err != nil {
		uctx, cancel := c.rpcCtx(context.Background())
		_, _ = c.rpc.UnmountLocalDisk(uctx, &pb.UnmountSegmentRequest{ClientId: c.id, SegmentId: c.segID})
		cancel()
		return store.Errorf(store.InvalidParams, "storage_root_dir: %v", err)
	}
	c.disk = d
	return nil
}

func (c *Client) mountTier(ctx context.Context, capacity uint64) error {
	ctx, cancel := c.rpcCtx(ctx)
	defer cancel()
	st, err := c.rpc.MountLocalDisk(ctx, &pb.MountLocalDiskRequest{ClientId: c.id, SegmentId: c.segID, Capacity: capacity})
	if err != nil {
		return rpcErr("mount local disk", err)
	}
	return statusErr(st)
}

// DiskTier is the client's disk tier store, or nil without
// Config.StorageRootDir (for operators and tests: file paths, counters).
func (c *Client) DiskTier() *disk.Store { return c.disk }

// tierLoop serves the master's disk tier tasks until Close.
func (c *Client) tierLoop(ctx context.Context) {
	defer close(c.tierDone)
	for ctx.Err() == nil {
		resp, err := c.rpc.PollTierTasks(ctx, &pb.PollTierTasksRequest{ClientId: c.id, SegmentId: c.segID, Max: tierBatch, WaitMs: uint32(tierPollWait.Milliseconds())})
		if err == nil {
			err = statusErr(resp.Status)
		}
		if err != nil {
			select {
			case <-ctx.Done():
			case <-time.After(tierRetry):
			}
			continue
		}
		c.runTierTasks(ctx, resp.Tasks)
	}
}

// runTierTasks carries out one batch: loads, reported at once, then
// offloads with the evictions they caused.
func (c *Client) runTierTasks(ctx context.Context, tasks []*pb.TierTask) {
	var loads, offloads []*pb.TierTaskResult
	for _, t := range tasks {
		if t.Kind == int32(tierLoad) {
			loads = append(loads, c.load(t))
		}
	}
	c.report(ctx, loads)
	for _, t := range tasks {
		switch t.Kind {
		case int32(tierLoad):
		case int32(tierOffload):
			offloads = append(offloads, c.offload(t)...)
		default:
			// A kind this client does not know: say so, the master
			// abandons it.
			offloads = append(offloads, &pb.TierTaskResult{Kind: t.Kind, Key: t.Key, ObjectId: t.ObjectId, Reason: fmt.Sprintf("unknown task kind %d", t.Kind)})
		}
	}
	c.report(ctx, offloads)
}

// Task kinds on the wire (master.TaskKind).
const (
	tierOffload = 1
	tierLoad    = 2
	tierEvicted = 3
)

// segmentRange returns the part of the client's segment a task names.
func (c *Client) segmentRange(t *pb.TierTask) ([]byte, error) {
	base, n := c.segment.Addr(), uint64(c.segment.Len())
	if t.Size == 0 || t.Addr < base || t.Addr-base > n || t.Size > n-(t.Addr-base) {
		return nil, fmt.Errorf("range [%#x,+%d) outside the segment [%#x,+%d)", t.Addr, t.Size, base, n)
	}
	off := t.Addr - base
	return c.segment.Bytes()[off : off+t.Size], nil
}

// load reads t's file into the staging range.
func (c *Client) load(t *pb.TierTask) *pb.TierTaskResult {
	r := &pb.TierTaskResult{Kind: t.Kind, Key: t.Key, ObjectId: t.ObjectId}
	dst, err := c.segmentRange(t)
	if err == nil && t.DeadlineMs == 0 {
		err = errors.New("task arrived past its deadline") // the master may reuse the range
	}
	if err == nil {
		err = c.disk.Get(string(t.Key), t.ObjectId, dst)
	}
	r.Ok = err == nil
	if err != nil {
		r.Reason = store.ValidText(err.Error()) // a proto string: UTF-8 only
	}
	return r
}

// offload writes t's DRAM range into a file; the results include the
// files evicted to make room.
func (c *Client) offload(t *pb.TierTask) []*pb.TierTaskResult {
	r := &pb.TierTaskResult{Kind: t.Kind, Key: t.Key, ObjectId: t.ObjectId}
	src, err := c.segmentRange(t)
	var evicted []disk.Evicted
	if err == nil {
		evicted, err = c.disk.Put(string(t.Key), t.ObjectId, src)
	}
	r.Ok = err == nil
	if err != nil {
		r.Reason = store.ValidText(err.Error()) // a proto string: UTF-8 only
	}
	out := []*pb.TierTaskResult{r}
	for _, e := range evicted {
		out = append(out, &pb.TierTaskResult{Kind: tierEvicted, Key: []byte(e.Key), ObjectId: e.ID})
	}
	return out
}

// report sends results; an offload the master refused has its file
// deleted again.
func (c *Client) report(ctx context.Context, rs []*pb.TierTaskResult) {
	if len(rs) == 0 {
		return
	}
	rctx, cancel := c.rpcCtx(ctx)
	resp, err := c.rpc.CompleteTierTasks(rctx, &pb.CompleteTierTasksRequest{ClientId: c.id, SegmentId: c.segID, Results: rs})
	cancel()
	if err != nil || len(resp.Results) != len(rs) {
		// The master abandons the tasks at their deadline; files of
		// offloads it never recorded are orphans until overwritten or
		// evicted, and are never served (loads check the object id).
		return
	}
	for i, st := range resp.Results {
		if rs[i].Kind == tierOffload && rs[i].Ok && store.ErrorCode(st.GetCode()) != store.OK {
			_, _ = c.disk.Delete(string(rs[i].Key), rs[i].ObjectId)
		}
	}
}
