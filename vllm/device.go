package vllm

import (
	"context"
	"fmt"

	"github.com/mooncake-go/mooncake/core/memory"
	"github.com/mooncake-go/mooncake/core/transfer"
)

// DeviceStagingBytes is the host staging a store-mode worker with GPU KV
// caches allocates (off-heap, page-locked when the runtime can pin,
// registered with the pool once): four slots, each of at least one
// block's pool value, a pool job moving its blocks through one slot at a
// time.
const DeviceStagingBytes = 64 << 20

// stagingSlots is how many staging slots a worker has: loads and saves
// running at once each hold one.
const stagingSlots = 4

// deviceStaging is the host staging of a worker whose KV cache regions
// are device memory: the pool reads and writes blocks in a slot, and the
// worker copies each block's device parts to or from it with rt.
type deviceStaging struct {
	rt         transfer.DeviceRuntime
	region     *memory.Region
	unpin      func() error // nil when not pinned
	slots      chan []byte  // free slots
	slotBlocks int          // whole blocks a slot holds
}

// newDeviceStaging allocates (and pins, best effort) total bytes of
// staging for blocks of blockBytes: stagingSlots slots of
// max(blockBytes, total/stagingSlots) bytes rounded down to whole blocks.
func newDeviceStaging(rt transfer.DeviceRuntime, blockBytes, total int) (*deviceStaging, error) {
	per := max(1, total/stagingSlots/blockBytes)
	slot := per * blockBytes
	r, err := memory.Map(stagingSlots * slot)
	if err != nil {
		return nil, fmt.Errorf("vllm: host staging for GPU KV caches (%d x %d bytes): %w", stagingSlots, slot, err)
	}
	s := &deviceStaging{rt: rt, region: r, slots: make(chan []byte, stagingSlots), slotBlocks: per}
	b := r.Bytes()
	for i := range stagingSlots {
		s.slots <- b[i*slot : (i+1)*slot : (i+1)*slot]
	}
	if hp, ok := rt.(transfer.HostPinner); ok {
		if unpin, err := hp.PinHost(b); err == nil {
			s.unpin = unpin
		}
	}
	return s, nil
}

// close frees the staging; no job may hold a slot.
func (s *deviceStaging) close() error {
	if s.unpin != nil {
		_ = s.unpin() // best effort: unmapped next either way
	}
	return s.region.Close()
}

// devCopy is one device part of a block staged in a slot.
type devCopy struct {
	dev  int
	addr uint64 // device address of the part
	host []byte // its bytes in the slot
}

// poolIO performs one pool batch on the blocks' parts and returns one
// error per key (nil: the block's bytes moved).
type poolIO func(ks []string, parts [][][]byte) []error

// moveBlocks runs io on the blocks not yet failed in errs (their bytes in
// layer l's regions, or the whole block when l < 0), setting errs for
// those that fail. With host regions only that is one io call on the
// regions' bytes. With device regions the blocks go through staging slots
// in chunks: a save (load false) copies each chunk's device parts to its
// slot before io, a load copies the landed blocks' parts from the slot
// to the device after io (complete when moveBlocks returns: each copy is
// synchronised). A failed device copy fails its block. Waiting for a slot
// is bounded by ctx; ctx's error fails the blocks left.
func (w *Worker) moveBlocks(ctx context.Context, keys []string, blockIDs []int, errs []error, l int, load bool, io poolIO) {
	if w.staging == nil {
		idx, ks, parts := w.gather(keys, blockIDs, errs, l)
		if len(ks) == 0 {
			return
		}
		res := io(ks, parts)
		for j, i := range idx {
			errs[i] = res[j]
		}
		return
	}
	st := w.staging
	var todo []int // indexes of the blocks still to move
	for i := range keys {
		if errs[i] == nil {
			todo = append(todo, i)
		}
	}
	for len(todo) > 0 {
		chunk := todo[:min(len(todo), st.slotBlocks)]
		todo = todo[len(chunk):]
		var slot []byte
		select {
		case slot = <-st.slots:
		case <-ctx.Done():
			for _, i := range append(chunk, todo...) {
				errs[i] = fmt.Errorf("vllm: waiting for GPU staging: %w", ctx.Err())
			}
			return
		}
		w.moveChunk(chunk, keys, blockIDs, errs, l, load, io, slot)
		st.slots <- slot
	}
}

// moveChunk is moveBlocks for the blocks chunk (indexes into keys) through
// slot.
func (w *Worker) moveChunk(chunk []int, keys []string, blockIDs []int, errs []error, l int, load bool, io poolIO, slot []byte) {
	rt := w.staging.rt
	idx := make([]int, 0, len(chunk))
	ks := make([]string, 0, len(chunk))
	parts := make([][][]byte, 0, len(chunk))
	copies := make([][]devCopy, 0, len(chunk))
	regions := w.regionsOf(l)
	flat := make([][]byte, 0, len(chunk)*len(regions))
	pos := 0
	for _, i := range chunk {
		b := blockIDs[i]
		if err := w.checkBlock(b); err != nil {
			errs[i] = err
			continue
		}
		start := len(flat)
		var cs []devCopy
		for _, ri := range regions {
			r := w.regions[ri]
			off := uint64(b) * r.BlockBytes
			if r.Buf != nil {
				flat = append(flat, r.Buf[off:off+r.BlockBytes:off+r.BlockBytes])
				continue
			}
			h := slot[pos : pos+int(r.BlockBytes) : pos+int(r.BlockBytes)]
			pos += int(r.BlockBytes)
			flat = append(flat, h)
			cs = append(cs, devCopy{dev: r.Device, addr: r.DeviceAddr + off, host: h})
		}
		if !load {
			if err := copyOut(rt, cs); err != nil {
				errs[i] = fmt.Errorf("vllm: block %d: %w", b, err)
				continue
			}
		}
		key := keys[i]
		if l >= 0 {
			key = layerKey(key, l)
		}
		idx, ks = append(idx, i), append(ks, key)
		parts, copies = append(parts, flat[start:len(flat):len(flat)]), append(copies, cs)
	}
	if len(ks) == 0 {
		return
	}
	res := io(ks, parts)
	for j, i := range idx {
		if errs[i] = res[j]; errs[i] != nil || !load {
			continue
		}
		if err := copyIn(rt, copies[j]); err != nil {
			errs[i] = fmt.Errorf("vllm: block %d: %w", blockIDs[i], err)
		}
	}
}

// regionsOf lists the indexes of layer l's regions, or of every region
// when l < 0.
func (w *Worker) regionsOf(l int) []int {
	if l >= 0 {
		return w.byLayer[l]
	}
	return w.allRegions
}

// copyOut copies device parts to their host bytes.
func copyOut(rt transfer.DeviceRuntime, cs []devCopy) error {
	for _, c := range cs {
		if err := rt.CopyDtoH(c.dev, c.host, c.addr); err != nil {
			return fmt.Errorf("copy %d bytes from cuda:%d %#x: %w", len(c.host), c.dev, c.addr, err)
		}
	}
	return nil
}

// copyIn copies host bytes to their device parts (each complete on
// return).
func copyIn(rt transfer.DeviceRuntime, cs []devCopy) error {
	for _, c := range cs {
		if err := rt.CopyHtoD(c.dev, c.addr, c.host); err != nil {
			return fmt.Errorf("copy %d bytes to cuda:%d %#x: %w", len(c.host), c.dev, c.addr, err)
		}
	}
	return nil
}
