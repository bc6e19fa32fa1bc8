package pd

import (
	"bytes"
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/mooncake-go/mooncake/core/memory"
)

// Test geometry: two regions (think K and V of one layer) with different
// block sizes, one of them odd, so offsets are checked per region.
var testShape = []struct{ blockBytes, numBlocks uint64 }{
	{1024, 16},
	{3000, 16},
}

// pattern is the deterministic byte of region r, block b, offset i for
// the given seed.
func pattern(seed, r, b, i int) byte {
	return byte(seed*131 + r*71 + b*29 + i*7 + i>>8)
}

// regions maps memory for testShape, fills every block with seed's
// pattern, and returns the regions (closed when t ends, after any
// Producer/Consumer closed by a later-registered cleanup).
func regions(t testing.TB, seed int) []Region {
	t.Helper()
	rs, err := mapRegions(seed)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, r := range rs {
			_ = r.close()
		}
	})
	out := make([]Region, len(rs))
	for i, r := range rs {
		out[i] = r.Region
	}
	return out
}

type mappedRegion struct {
	Region
	close func() error
}

func mapRegions(seed int) ([]mappedRegion, error) {
	var out []mappedRegion
	for ri, s := range testShape {
		m, err := memory.Map(int(s.blockBytes * s.numBlocks))
		if err != nil {
			return nil, err
		}
		buf := m.Bytes()
		for b := 0; b < int(s.numBlocks); b++ {
			blk := buf[uint64(b)*s.blockBytes : uint64(b+1)*s.blockBytes]
			for i := range blk {
				blk[i] = pattern(seed, ri, b, i)
			}
		}
		out = append(out, mappedRegion{Region{Mem: buf, BlockBytes: s.blockBytes, NumBlocks: s.numBlocks}, m.Close})
	}
	return out, nil
}

// block returns region r's block b.
func block(rs []Region, r, b int) []byte {
	bs := rs[r].BlockBytes
	return rs[r].Mem[uint64(b)*bs : uint64(b+1)*bs]
}

// checkBlocksLanded verifies that consumer block dst[i] of every region
// holds producer block src[i] (producer pattern pseed) and that every
// other consumer block still holds the consumer's own pattern cseed.
func checkBlocksLanded(rs []Region, pseed, cseed int, src, dst []int) error {
	from := map[int]int{}
	for i, d := range dst {
		from[d] = src[i]
	}
	for r := range rs {
		for b := 0; b < int(rs[r].NumBlocks); b++ {
			seed, sb := cseed, b
			if s, ok := from[b]; ok {
				seed, sb = pseed, s
			}
			got := block(rs, r, b)
			for i := range got {
				if want := pattern(seed, r, sb, i); got[i] != want {
					return fmt.Errorf("region %d block %d byte %d = %#x, want %#x (pattern of seed %d block %d)", r, b, i, got[i], want, seed, sb)
				}
			}
		}
	}
	return nil
}

// pair is a started producer and consumer on 127.0.0.1.
type pair struct {
	p        *Producer
	c        *Consumer
	pRegions []Region
	cRegions []Region
}

const (
	producerSeed = 1
	consumerSeed = 2
)

// newPair starts a producer (serving its bootstrap on a free port) and a
// consumer; edit tweaks their configs. Both close when t ends.
func newPair(t *testing.T, edit func(p, c *Config)) *pair {
	t.Helper()
	pr, cr := regions(t, producerSeed), regions(t, consumerSeed)
	pc := Config{EngineID: "prefill-engine", BootstrapAddr: "127.0.0.1:0", Regions: pr, AbortTimeout: 30 * time.Second}
	cc := Config{EngineID: "decode-engine", Regions: cr, RecvTimeout: 20 * time.Second, BootstrapTimeout: 5 * time.Second}
	if edit != nil {
		edit(&pc, &cc)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	p, err := NewProducer(ctx, pc)
	if err != nil {
		t.Fatalf("NewProducer: %v", err)
	}
	t.Cleanup(func() { p.Close() })
	c, err := NewConsumer(ctx, cc)
	if err != nil {
		t.Fatalf("NewConsumer: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return &pair{p: p, c: c, pRegions: pr, cRegions: cr}
}

// within is how long a test waits for an outcome.
const within = 20 * time.Second

// poll calls f every couple of milliseconds until it returns true or d
// passes (then it fails the test with what).
func poll(t testing.TB, d time.Duration, what string, f func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	tick := time.NewTicker(2 * time.Millisecond)
	defer tick.Stop()
	for !f() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		<-tick.C
	}
}

// result waits for the consumer's outcome of id.
func result(t testing.TB, c *Consumer, id string) Result {
	t.Helper()
	var got *Result
	poll(t, within, "consumer result of "+id, func() bool {
		for _, r := range c.FinishedResults() {
			if r.TransferID == id {
				got = &r
			} else {
				t.Errorf("unexpected result %+v", r)
			}
		}
		return got != nil
	})
	return *got
}

// sent waits until the producer reports id finished.
func sent(t testing.TB, p *Producer, id string) {
	t.Helper()
	poll(t, within, "producer to finish "+id, func() bool {
		for _, f := range p.Finished() {
			if f == id {
				return true
			}
			t.Errorf("producer finished unexpected %q", f)
		}
		return false
	})
}

// waiting reports whether a consumer request for id waits on the producer.
func (p *Producer) waiting(id string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	x := p.mu.xfers[id]
	return x != nil && x.state == stWaiting && x.waiters > 0
}

// snapshot copies every region's bytes.
func snapshot(rs []Region) [][]byte {
	out := make([][]byte, len(rs))
	for i, r := range rs {
		out[i] = bytes.Clone(r.Mem)
	}
	return out
}

// unchanged reports whether rs still hold snap.
func unchanged(rs []Region, snap [][]byte) bool {
	for i, r := range rs {
		if !bytes.Equal(r.Mem, snap[i]) {
			return false
		}
	}
	return true
}
