package pd

import (
	"context"
	"errors"
	"net"
	"strings"
	"testing"
	"time"
)

// TestPushOrders moves blocks with Ready before Recv and with Recv before
// Ready (the consumer's request waits on the producer), with block ids
// that coalesce into several runs, and checks every consumer block:
// targets hold the producer's bytes, all others are untouched.
func TestPushOrders(t *testing.T) {
	src := []int{3, 4, 5, 9, 10, 15}
	dst := []int{7, 8, 2, 11, 12, 1}
	for _, recvFirst := range []bool{false, true} {
		name := map[bool]string{false: "ReadyThenRecv", true: "RecvThenReady"}[recvFirst]
		t.Run(name, func(t *testing.T) {
			pp := newPair(t, nil)
			id := "xfer-" + name
			if !recvFirst {
				if err := pp.p.Ready(id, src); err != nil {
					t.Fatal(err)
				}
			}
			if err := pp.c.Recv(id, pp.p.BootstrapAddr(), "prefill-engine", dst); err != nil {
				t.Fatal(err)
			}
			if recvFirst {
				poll(t, within, "the request to wait on the producer", func() bool { return pp.p.waiting(id) })
				if err := pp.p.Ready(id, src); err != nil {
					t.Fatal(err)
				}
			}
			if r := result(t, pp.c, id); r.Err != nil || r.FailedBlocks != nil {
				t.Fatalf("result %+v", r)
			}
			sent(t, pp.p, id)
			if err := checkBlocksLanded(pp.cRegions, producerSeed, consumerSeed, src, dst); err != nil {
				t.Fatal(err)
			}
			// The producer's own blocks are only read.
			if err := checkBlocksLanded(pp.pRegions, producerSeed, producerSeed, nil, nil); err != nil {
				t.Fatalf("producer memory changed: %v", err)
			}
		})
	}
}

// TestPushPrefixHit: the consumer had a local prefix hit and asks for
// fewer blocks; it receives the producer's last N blocks. With an empty
// list nothing is written and both sides still finish.
func TestPushPrefixHit(t *testing.T) {
	pp := newPair(t, nil)
	src := []int{2, 3, 4, 5, 6}
	if err := pp.p.Ready("hit", src); err != nil {
		t.Fatal(err)
	}
	dst := []int{10, 11}
	if err := pp.c.Recv("hit", "http://"+pp.p.BootstrapAddr(), "prefill-engine", dst); err != nil {
		t.Fatal(err)
	}
	if r := result(t, pp.c, "hit"); r.Err != nil {
		t.Fatal(r.Err)
	}
	sent(t, pp.p, "hit")
	if err := checkBlocksLanded(pp.cRegions, producerSeed, consumerSeed, src[3:], dst); err != nil {
		t.Fatal(err)
	}

	snap := snapshot(pp.cRegions)
	if err := pp.p.Ready("full-hit", []int{7, 8}); err != nil {
		t.Fatal(err)
	}
	if err := pp.c.Recv("full-hit", pp.p.BootstrapAddr(), "prefill-engine", nil); err != nil {
		t.Fatal(err)
	}
	if r := result(t, pp.c, "full-hit"); r.Err != nil {
		t.Fatal(r.Err)
	}
	sent(t, pp.p, "full-hit")
	if !unchanged(pp.cRegions, snap) {
		t.Fatal("an empty receive changed consumer memory")
	}
}

// TestPushFailures: every failure is reported once on the consumer with
// all its block ids and the right sentinel, consumer memory is untouched,
// and the producer frees (reports) the transfers it held.
func TestPushFailures(t *testing.T) {
	type tc struct {
		name       string
		edit       func(p, c *Config)
		ready      []int // nil: not Ready
		dst        []int
		drop       bool // Drop before Recv
		want       error
		wantInMsg  string
		producerOK bool // producer reports the transfer finished
	}
	halfBlocks := func(p, c *Config) { c.Regions[1].BlockBytes = 1500 }
	oneRegion := func(p, c *Config) { c.Regions = c.Regions[:1] }
	cases := []tc{
		{name: "FewerProducerBlocks", ready: []int{2, 3}, dst: []int{4, 5, 6}, want: ErrShapeMismatch, wantInMsg: "producer holds 2", producerOK: true},
		{name: "BlockBytesMismatch", edit: halfBlocks, ready: []int{2}, dst: []int{3}, want: ErrShapeMismatch, wantInMsg: "region 1", producerOK: true},
		{name: "RegionCountMismatch", edit: oneRegion, ready: []int{2}, dst: []int{3}, want: ErrShapeMismatch, wantInMsg: "1 regions", producerOK: true},
		{name: "Dropped", ready: []int{2}, dst: []int{3}, drop: true, want: ErrDropped, producerOK: true},
		{name: "DroppedNeverReady", dst: []int{3}, drop: true, want: ErrDropped},
		{name: "ConsumerBlockZero", dst: []int{0, 3}, want: ErrInvalidArgument, wantInMsg: "null block"},
		{name: "ConsumerBlockOutOfRange", dst: []int{3, 16}, want: ErrInvalidArgument, wantInMsg: "outside [1, 16)"},
		{name: "ConsumerBlockDuplicate", dst: []int{3, 3}, want: ErrInvalidArgument, wantInMsg: "twice"},
		{name: "WrongEngine", dst: []int{3}, want: ErrBootstrap, wantInMsg: "not registered",
			edit: func(p, c *Config) { c.BootstrapTimeout = 2 * time.Second }},
	}
	for _, k := range cases {
		t.Run(k.name, func(t *testing.T) {
			pp := newPair(t, k.edit)
			id := "xfer-" + k.name
			if k.ready != nil {
				if err := pp.p.Ready(id, k.ready); err != nil {
					t.Fatal(err)
				}
			}
			if k.drop {
				pp.p.Drop(id)
			}
			engine := "prefill-engine"
			if k.name == "WrongEngine" {
				engine = "no-such-engine"
			}
			snap := snapshot(pp.cRegions)
			if err := pp.c.Recv(id, pp.p.BootstrapAddr(), engine, k.dst); err != nil {
				t.Fatal(err)
			}
			r := result(t, pp.c, id)
			if !errors.Is(r.Err, k.want) || !strings.Contains(r.Err.Error(), k.wantInMsg) {
				t.Fatalf("err = %v, want %v containing %q", r.Err, k.want, k.wantInMsg)
			}
			if len(r.FailedBlocks) != len(k.dst) {
				t.Fatalf("failed blocks %v, want %v", r.FailedBlocks, k.dst)
			}
			if !unchanged(pp.cRegions, snap) {
				t.Fatal("a failed receive changed consumer memory")
			}
			if k.producerOK {
				sent(t, pp.p, id)
			} else if f := pp.p.Finished(); len(f) != 0 {
				t.Fatalf("producer finished %v for a transfer it never held", f)
			}
		})
	}
}

// TestDropWhileWaiting: a consumer waiting on the producer is answered
// ErrDropped as soon as the producer drops the transfer.
func TestDropWhileWaiting(t *testing.T) {
	pp := newPair(t, nil)
	if err := pp.c.Recv("w", pp.p.BootstrapAddr(), "prefill-engine", []int{1, 2}); err != nil {
		t.Fatal(err)
	}
	poll(t, within, "the request to wait", func() bool { return pp.p.waiting("w") })
	pp.p.Drop("w")
	if r := result(t, pp.c, "w"); !errors.Is(r.Err, ErrDropped) || len(r.FailedBlocks) != 2 {
		t.Fatalf("result %+v, want ErrDropped with 2 failed blocks", r)
	}
	if f := pp.p.Finished(); len(f) != 0 {
		t.Fatalf("producer finished %v; it never held blocks", f)
	}
	if err := pp.p.Ready("w", []int{1}); !errors.Is(err, ErrDropped) {
		t.Fatalf("Ready after Drop = %v, want ErrDropped", err)
	}
}

// TestAbortTimeout: a Ready transfer nobody asks for is reported after
// AbortTimeout, and a late consumer gets ErrDropped.
func TestAbortTimeout(t *testing.T) {
	pp := newPair(t, func(p, c *Config) { p.AbortTimeout = 100 * time.Millisecond })
	start := time.Now()
	if err := pp.p.Ready("late", []int{4, 5}); err != nil {
		t.Fatal(err)
	}
	sent(t, pp.p, "late")
	if d := time.Since(start); d < 100*time.Millisecond {
		t.Fatalf("freed after %v, before AbortTimeout", d)
	}
	if err := pp.c.Recv("late", pp.p.BootstrapAddr(), "prefill-engine", []int{4, 5}); err != nil {
		t.Fatal(err)
	}
	if r := result(t, pp.c, "late"); !errors.Is(r.Err, ErrDropped) || !strings.Contains(r.Err.Error(), "expired") {
		t.Fatalf("late receive: %+v, want ErrDropped (expired)", r)
	}
}

// TestRecvTimeout: the producer never gets Ready; the consumer's receive
// fails with ErrTimeout after RecvTimeout instead of hanging, and the
// producer, told the budget, gave up too (Ready then still works).
func TestRecvTimeout(t *testing.T) {
	pp := newPair(t, func(p, c *Config) { c.RecvTimeout = 300 * time.Millisecond })
	if err := pp.c.Recv("slow", pp.p.BootstrapAddr(), "prefill-engine", []int{1}); err != nil {
		t.Fatal(err)
	}
	if r := result(t, pp.c, "slow"); !errors.Is(r.Err, ErrTimeout) {
		t.Fatalf("result %+v, want ErrTimeout", r)
	}
	poll(t, within, "the producer to stop waiting", func() bool { return !pp.p.waiting("slow") })
	if err := pp.p.Ready("slow", []int{1}); err != nil {
		t.Fatalf("Ready after the consumer gave up: %v", err)
	}
}

// TestDeadBootstrap: a consumer pointed at a bootstrap address where
// nothing listens fails within its timeouts.
func TestDeadBootstrap(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := ln.Addr().String()
	ln.Close()
	cr := regions(t, consumerSeed)
	c, err := NewConsumer(context.Background(), Config{EngineID: "d", Regions: cr, RecvTimeout: 400 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	start := time.Now()
	if err := c.Recv("x", dead, "prefill-engine", []int{1}); err != nil {
		t.Fatal(err)
	}
	r := result(t, c, "x")
	if !errors.Is(r.Err, ErrBootstrap) && !errors.Is(r.Err, ErrTimeout) {
		t.Fatalf("result %+v, want ErrBootstrap or ErrTimeout", r)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("took %v", d)
	}
	if err := c.Recv("bad-addr", "http://a/b/c", "e", []int{1}); err != nil {
		t.Fatal(err)
	}
	if r := result(t, c, "bad-addr"); !errors.Is(r.Err, ErrInvalidArgument) {
		t.Fatalf("bad address: %+v", r)
	}
}

// TestUnequalTP: a producer with TP 2 and a consumer with TP 1 fail with
// an "unsupported:" error at once (the bootstrap knows the TP size).
func TestUnequalTP(t *testing.T) {
	pp := newPair(t, func(p, c *Config) { p.TPSize = 2 })
	if err := pp.c.Recv("tp", pp.p.BootstrapAddr(), "prefill-engine", []int{1}); err != nil {
		t.Fatal(err)
	}
	r := result(t, pp.c, "tp")
	if !errors.Is(r.Err, ErrUnsupported) || !strings.HasPrefix(r.Err.Error(), "unsupported: heterogeneous TP") {
		t.Fatalf("result %+v, want unsupported: heterogeneous TP", r)
	}
}

// TestProducerArgs: Ready refuses bad block ids and repeats; Recv refuses
// an empty or pending id.
func TestProducerArgs(t *testing.T) {
	pp := newPair(t, nil)
	for _, ids := range [][]int{{0}, {16}, {-1}, {2, 2}} {
		if err := pp.p.Ready("a", ids); !errors.Is(err, ErrInvalidArgument) {
			t.Errorf("Ready(%v) = %v, want ErrInvalidArgument", ids, err)
		}
	}
	if err := pp.p.Ready("", []int{1}); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("Ready with empty id = %v", err)
	}
	if err := pp.p.Ready("a", []int{1}); err != nil {
		t.Fatal(err)
	}
	if err := pp.p.Ready("a", []int{1}); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("second Ready = %v", err)
	}
	if err := pp.c.Recv("", "x:1", "e", nil); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("Recv with empty id = %v", err)
	}
	if err := pp.c.Recv("p", pp.p.BootstrapAddr(), "prefill-engine", []int{2}); err != nil {
		t.Fatal(err)
	}
	if err := pp.c.Recv("p", pp.p.BootstrapAddr(), "prefill-engine", []int{2}); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("Recv of a pending id = %v", err)
	}
	pp.p.Drop("p")
	if r := result(t, pp.c, "p"); !errors.Is(r.Err, ErrDropped) {
		t.Fatalf("%+v", r)
	}
}

// TestConsumerClose: Close reports every pending receive as failed with
// ErrClosed; later Recvs are refused.
func TestConsumerClose(t *testing.T) {
	pp := newPair(t, nil)
	if err := pp.c.Recv("pending", pp.p.BootstrapAddr(), "prefill-engine", []int{5, 6}); err != nil {
		t.Fatal(err)
	}
	poll(t, within, "the request to wait", func() bool { return pp.p.waiting("pending") })
	if err := pp.c.Close(); err != nil {
		t.Fatal(err)
	}
	done, failed := pp.c.Finished()
	if len(done) != 1 || done[0] != "pending" || len(failed["pending"]) != 2 {
		t.Fatalf("after Close: done %v failed %v", done, failed)
	}
	if err := pp.c.Recv("after", pp.p.BootstrapAddr(), "prefill-engine", nil); !errors.Is(err, ErrClosed) {
		t.Fatalf("Recv after Close = %v", err)
	}
	if err := pp.c.Close(); !errors.Is(err, ErrClosed) {
		t.Fatalf("second Close = %v", err)
	}
}

// TestProducerGone: after the producer closed, a consumer that cached its
// address fails (unreachable), and the producer reported what it held.
func TestProducerGone(t *testing.T) {
	pp := newPair(t, nil)
	if err := pp.p.Ready("one", []int{1}); err != nil {
		t.Fatal(err)
	}
	if err := pp.c.Recv("one", pp.p.BootstrapAddr(), "prefill-engine", []int{1}); err != nil {
		t.Fatal(err)
	}
	if r := result(t, pp.c, "one"); r.Err != nil {
		t.Fatal(r.Err)
	}
	sent(t, pp.p, "one")
	if err := pp.p.Ready("held", []int{2}); err != nil {
		t.Fatal(err)
	}
	boot := pp.p.BootstrapAddr()
	if err := pp.p.Close(); err != nil {
		t.Fatal(err)
	}
	if f := pp.p.Finished(); len(f) != 1 || f[0] != "held" {
		t.Fatalf("Finished after Close = %v, want [held]", f)
	}
	if err := pp.c.Recv("two", boot, "prefill-engine", []int{2}); err != nil {
		t.Fatal(err)
	}
	if r := result(t, pp.c, "two"); !errors.Is(r.Err, ErrUnreachable) {
		t.Fatalf("result %+v, want ErrUnreachable", r)
	}
}

// TestManyConcurrent runs several transfers at once in both orders.
func TestManyConcurrent(t *testing.T) {
	pp := newPair(t, nil)
	const n = 7
	for i := range n {
		id := "c" + string(rune('a'+i))
		b := []int{i + 1, i + 8}
		if i%2 == 0 {
			if err := pp.p.Ready(id, b); err != nil {
				t.Fatal(err)
			}
		}
		if err := pp.c.Recv(id, pp.p.BootstrapAddr(), "prefill-engine", b); err != nil {
			t.Fatal(err)
		}
		if i%2 == 1 {
			if err := pp.p.Ready(id, b); err != nil {
				t.Fatal(err)
			}
		}
	}
	got := map[string]bool{}
	poll(t, within, "all results", func() bool {
		for _, r := range pp.c.FinishedResults() {
			if r.Err != nil {
				t.Fatalf("%s: %v", r.TransferID, r.Err)
			}
			got[r.TransferID] = true
		}
		return len(got) == n
	})
	var src []int
	for i := range n {
		src = append(src, i+1, i+8)
	}
	if err := checkBlocksLanded(pp.cRegions, producerSeed, consumerSeed, src, src); err != nil {
		t.Fatal(err)
	}
}

// TestCoalesce checks the run grouping against the per-block mapping.
func TestCoalesce(t *testing.T) {
	cases := []struct {
		src, dst []int
		want     []run
	}{
		{nil, nil, nil},
		{[]int{1, 2, 3}, []int{5, 6, 7}, []run{{1, 5, 3}}},
		{[]int{1, 2, 3}, []int{5, 6, 9}, []run{{1, 5, 2}, {3, 9, 1}}},
		{[]int{3, 4, 5, 9, 10, 15}, []int{7, 8, 2, 11, 12, 1}, []run{{3, 7, 2}, {5, 2, 1}, {9, 11, 2}, {15, 1, 1}}},
		{[]int{4, 3}, []int{1, 2}, []run{{4, 1, 1}, {3, 2, 1}}},
	}
	for _, k := range cases {
		got := coalesce(k.src, k.dst)
		if len(got) != len(k.want) {
			t.Fatalf("coalesce(%v, %v) = %v, want %v", k.src, k.dst, got, k.want)
		}
		for i := range got {
			if got[i] != k.want[i] {
				t.Fatalf("coalesce(%v, %v) = %v, want %v", k.src, k.dst, got, k.want)
			}
		}
	}
}

// TestConfigValidate covers the refused configs.
func TestConfigValidate(t *testing.T) {
	mem := make([]byte, 4096)
	good := Region{Mem: mem, BlockBytes: 1024, NumBlocks: 4}
	cases := []struct {
		name string
		cfg  Config
		want error
	}{
		{"NoEngine", Config{Regions: []Region{good}}, ErrInvalidArgument},
		{"NoRegions", Config{EngineID: "e"}, ErrInvalidArgument},
		{"BadRank", Config{EngineID: "e", TPSize: 2, TPRank: 2, Regions: []Region{good}}, ErrInvalidArgument},
		{"ShortMem", Config{EngineID: "e", Regions: []Region{{Mem: mem, BlockBytes: 1024, NumBlocks: 5}}}, ErrInvalidArgument},
		{"ZeroBlock", Config{EngineID: "e", Regions: []Region{{Mem: mem, NumBlocks: 5}}}, ErrInvalidArgument},
		{"DeviceNoCUDA", Config{EngineID: "e", Regions: []Region{{DeviceAddr: 1 << 40, BlockBytes: 1, NumBlocks: 1}}}, ErrInvalidArgument},
		{"Protocol", Config{EngineID: "e", Protocol: "rdma", Regions: []Region{good}}, ErrUnsupported},
		{"UnspecifiedHost", Config{EngineID: "e", Host: "0.0.0.0", Regions: []Region{good}}, ErrInvalidArgument},
		{"Good", Config{EngineID: "e", Regions: []Region{good}}, nil},
	}
	for _, k := range cases {
		t.Run(k.name, func(t *testing.T) {
			if err := k.cfg.Validate(); !errors.Is(err, k.want) || (k.want == nil) != (err == nil) {
				t.Fatalf("Validate = %v, want %v", err, k.want)
			}
		})
	}
}
