package vllm

import (
	"context"
	"net"
	"strconv"
	"strings"
	"sync"

	"github.com/mooncake-go/mooncake/vllm/pd"
)

// PD starts the P/D half of a worker (package vllm/pd): a Producer on
// kv_producer, a Consumer on kv_consumer, both on kv_both. The producer's
// bootstrap server listens on host:VLLM_MOONCAKE_BOOTSTRAP_PORT (TP rank
// 0 serves it), or the producers use bootstrap_server_address when the
// extra config names one (an externally run server).
var PD PDFactory = startPD

func startPD(ctx context.Context, s Settings, regions []Region) (Producer, Consumer, error) {
	rs := make([]pd.Region, len(regions))
	for i, r := range regions {
		rs[i] = pd.Region{Mem: r.Buf, DeviceAddr: r.DeviceAddr, Device: r.Device, BlockBytes: r.BlockBytes, NumBlocks: r.NumBlocks}
	}
	cfg := pd.Config{
		EngineID: s.EngineID, TPRank: s.TPRank, TPSize: s.TPSize, Host: s.Host,
		Regions: rs, Protocol: "tcp", AbortTimeout: s.AbortTimeout, RecvTimeout: s.LoadTimeout,
		BootstrapAddr: net.JoinHostPort(s.Host, strconv.Itoa(s.BootstrapPort)),
		CUDA:          s.CUDA,
	}
	if b := s.BootstrapAddr; b != "" {
		cfg.BootstrapAddr, cfg.ExternalBootstrap = strings.TrimPrefix(strings.TrimPrefix(b, "http://"), "https://"), true
	}
	var prod Producer
	var cons Consumer
	if s.KVRole != KVConsumer {
		p, err := pd.NewProducer(ctx, cfg)
		if err != nil {
			return nil, nil, err
		}
		prod = &pdProducer{p: p}
	}
	if s.KVRole != KVProducer {
		c, err := pd.NewConsumer(ctx, cfg)
		if err != nil {
			if prod != nil {
				prod.Close()
			}
			return nil, nil, err
		}
		cons = &pdConsumer{c: c, failed: map[string][]int{}}
	}
	return prod, cons, nil
}

// pdProducer adapts pd.Producer: a Ready refused (bad block ids, a
// repeated transfer id) is reported finished at once, so vLLM frees the
// request's blocks instead of holding them forever.
type pdProducer struct {
	p       *pd.Producer
	mu      sync.Mutex
	refused []string
}

func (a *pdProducer) Ready(id string, blocks []int) {
	if err := a.p.Ready(id, blocks); err != nil {
		a.mu.Lock()
		a.refused = append(a.refused, id)
		a.mu.Unlock()
	}
}

func (a *pdProducer) Drop(id string) { a.p.Drop(id) }

func (a *pdProducer) Finished() []string {
	a.mu.Lock()
	out := a.refused
	a.refused = nil
	a.mu.Unlock()
	return append(out, a.p.Finished()...)
}

func (a *pdProducer) Close() error { return a.p.Close() }

// News is pd.Producer's (Worker.WaitIdle waits on it).
func (a *pdProducer) News() <-chan struct{} { return a.p.News() }

// pdConsumer adapts pd.Consumer: a Recv refused (an empty or pending
// transfer id, a closed consumer) is reported finished at once with every
// block failed, so the request never waits forever.
type pdConsumer struct {
	c      *pd.Consumer
	mu     sync.Mutex
	done   []string
	failed map[string][]int
	errs   map[string]error // why each failed transfer failed, until TakeErrors
}

// News is pd.Consumer's (Worker.WaitIdle waits on it).
func (a *pdConsumer) News() <-chan struct{} { return a.c.News() }

func (a *pdConsumer) Recv(id, bootstrap, engine string, blocks []int) {
	if err := a.c.Recv(id, bootstrap, engine, blocks); err != nil {
		a.mu.Lock()
		a.done = append(a.done, id)
		if len(blocks) > 0 {
			a.failed[id] = append([]int(nil), blocks...)
		}
		a.noteLocked(id, err)
		a.mu.Unlock()
	}
}

func (a *pdConsumer) noteLocked(id string, err error) {
	if a.errs == nil {
		a.errs = map[string]error{}
	}
	a.errs[id] = err
}

func (a *pdConsumer) Finished() ([]string, map[string][]int) {
	res := a.c.FinishedResults()
	a.mu.Lock()
	defer a.mu.Unlock()
	failed := map[string][]int{}
	var done []string
	for _, r := range res {
		done = append(done, r.TransferID)
		if r.Err != nil {
			failed[r.TransferID] = r.FailedBlocks
			a.noteLocked(r.TransferID, r.Err)
		}
	}
	done = append(done, a.done...)
	for k, v := range a.failed {
		failed[k] = v
	}
	a.done, a.failed = nil, map[string][]int{}
	return done, failed
}

// TakeErrors returns why the transfers reported failed by Finished since
// the previous call failed, by transfer id (the optional errorTaker of
// Worker.GetFinished).
func (a *pdConsumer) TakeErrors() map[string]error {
	a.mu.Lock()
	defer a.mu.Unlock()
	e := a.errs
	a.errs = nil
	return e
}

func (a *pdConsumer) Close() error { return a.c.Close() }
