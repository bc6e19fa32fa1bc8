package vllm

import (
	"encoding/json"
	"errors"
	"testing"
)

// newPDScheduler is a pd-mode scheduler (no pool).
func newPDScheduler(t *testing.T, role string, extra map[string]any, over map[string]any) *Scheduler {
	t.Helper()
	if extra == nil {
		extra = map[string]any{}
	}
	extra["mc_mode"] = "pd"
	sc, err := NewScheduler(testContext(t), mustSettings(t, role, extra, over), map[string]string{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sc.Close() })
	return sc
}

func TestSchedulerPDConsumer(t *testing.T) {
	ctx := testContext(t)
	remote := &Params{DoRemotePrefill: true, TransferID: "xfer-1", RemoteEngineID: "prefill-0", RemoteHost: "10.0.0.5", RemotePort: 8998}

	t.Run("lookup", func(t *testing.T) {
		sc := newPDScheduler(t, KVConsumer, nil, nil)
		n, async, err := sc.Lookup(ctx, LookupArgs{ReqID: "r", NumTokens: 37, NumComputedTokens: 8, Params: remote})
		if err != nil || n != 29 || !async {
			t.Errorf("Lookup = %d, %v, %v; want 29 async", n, async, err)
		}
		n, async, _ = sc.Lookup(ctx, LookupArgs{ReqID: "r", NumTokens: 8, NumComputedTokens: 8, Params: remote})
		if n != 0 || async {
			t.Errorf("Lookup with everything local = %d, %v; want 0", n, async)
		}
		n, _, _ = sc.Lookup(ctx, LookupArgs{ReqID: "r", NumTokens: 37, Params: &Params{DoRemoteDecode: true}})
		if n != 0 {
			t.Errorf("Lookup without do_remote_prefill = %d", n)
		}
		prod := newPDScheduler(t, KVProducer, nil, nil)
		if n, _, _ := prod.Lookup(ctx, LookupArgs{ReqID: "r", NumTokens: 37, Params: remote}); n != 0 {
			t.Errorf("producer Lookup = %d, want 0", n)
		}
	})
	t.Run("recv into unhashed blocks", func(t *testing.T) {
		sc := newPDScheduler(t, KVConsumer, nil, nil)
		err := sc.UpdateAfterAlloc(AllocArgs{ReqID: "r", BlockIDs: []int{3, 4, 5, 6}, UnhashedBlockIDs: []int{5, 6}, NumExternalTokens: 7, Params: remote})
		if err != nil {
			t.Fatal(err)
		}
		// Everything local: the producer is still told, with no blocks.
		err = sc.UpdateAfterAlloc(AllocArgs{ReqID: "q", BlockIDs: []int{3, 4}, UnhashedBlockIDs: []int{9}, NumExternalTokens: 0,
			Params: &Params{DoRemotePrefill: true, TransferID: "xfer-2", RemoteBootstrapAddr: "http://boot:1234", RemoteEngineID: "prefill-1"}})
		if err != nil {
			t.Fatal(err)
		}
		m := buildMeta(t, sc)
		want := []Recv{
			{ReqID: "r", TransferID: "xfer-1", BootstrapAddr: "http://10.0.0.5:8998", EngineID: "prefill-0", BlockIDs: []int{5, 6}},
			{ReqID: "q", TransferID: "xfer-2", BootstrapAddr: "http://boot:1234", EngineID: "prefill-1"},
		}
		if !metaEqual(m, Meta{Recvs: want}) {
			t.Errorf("meta = %+v, want recvs %+v", m, want)
		}
	})
	t.Run("bad params", func(t *testing.T) {
		sc := newPDScheduler(t, KVConsumer, nil, nil)
		for _, p := range []*Params{
			{DoRemotePrefill: true, RemoteHost: "h", RemotePort: 1},    // no transfer id
			{DoRemotePrefill: true, TransferID: "x"},                   // no bootstrap
			{DoRemotePrefill: true, TransferID: "x", RemoteHost: "h"},  // no port
			{DoRemotePrefill: true, TransferID: "x", RemotePort: 8998}, // no host
		} {
			err := sc.UpdateAfterAlloc(AllocArgs{ReqID: "r", NumExternalTokens: 4, UnhashedBlockIDs: []int{1}, Params: p})
			if !errors.Is(err, ErrBadInput) {
				t.Errorf("params %+v: err = %v, want ErrBadInput", *p, err)
			}
		}
		if m := buildMeta(t, sc); !m.Empty() {
			t.Errorf("meta after bad params = %+v", m)
		}
	})
	t.Run("abort before alloc frees the producer", func(t *testing.T) {
		sc := newPDScheduler(t, KVConsumer, nil, nil)
		fin, err := sc.RequestFinished(FinishArgs{ReqID: "r", BlockIDs: []int{1, 2}, Params: remote})
		if err != nil || fin.Hold || fin.Params != nil {
			t.Errorf("RequestFinished = %+v, %v; want no hold", fin, err)
		}
		m := buildMeta(t, sc)
		want := []Recv{{ReqID: "r", TransferID: "xfer-1", BootstrapAddr: "http://10.0.0.5:8998", EngineID: "prefill-0", Release: true}}
		if !metaEqual(m, Meta{Recvs: want}) {
			t.Errorf("meta = %+v, want recvs %+v", m, want)
		}
	})
}

func TestSchedulerPDProducer(t *testing.T) {
	decode := &Params{DoRemoteDecode: true, TransferID: "xfer-9"}

	t.Run("length capped sends", func(t *testing.T) {
		sc := newPDScheduler(t, KVProducer, nil, map[string]any{"host": "10.0.0.7", "engine_id": "prefill-7"})
		if err := sc.UpdateAfterAlloc(AllocArgs{ReqID: "r", BlockIDs: []int{1, 2, 3}, Params: decode}); err != nil {
			t.Fatal(err)
		}
		if sc.Tracked() != 1 {
			t.Errorf("Tracked = %d, want 1", sc.Tracked())
		}
		fin, err := sc.RequestFinished(FinishArgs{ReqID: "r", BlockIDs: []int{1, 2, 3}, LengthCapped: true, Params: decode})
		if err != nil || !fin.Hold {
			t.Fatalf("RequestFinished = %+v, %v; want hold", fin, err)
		}
		var got Params
		if err := json.Unmarshal(fin.Params, &got); err != nil {
			t.Fatal(err)
		}
		want := Params{DoRemotePrefill: true, TransferID: "xfer-9", RemoteEngineID: "prefill-7",
			RemoteBootstrapAddr: "http://10.0.0.7:8998", RemoteHost: "10.0.0.7", RemotePort: 8998}
		if got != want {
			t.Errorf("params = %+v\nwant     %+v", got, want)
		}
		m := buildMeta(t, sc)
		if !metaEqual(m, Meta{Sends: []Send{{ReqID: "r", TransferID: "xfer-9", BlockIDs: []int{1, 2, 3}}}}) {
			t.Errorf("meta = %+v", m)
		}
		if sc.Tracked() != 0 {
			t.Errorf("Tracked = %d after finish, want 0", sc.Tracked())
		}
	})
	t.Run("transfer id defaults to request id", func(t *testing.T) {
		sc := newPDScheduler(t, KVBoth, nil, nil)
		sc.UpdateAfterAlloc(AllocArgs{ReqID: "r", BlockIDs: []int{1}, Params: &Params{DoRemoteDecode: true}})
		fin, _ := sc.RequestFinished(FinishArgs{ReqID: "r", BlockIDs: []int{1}, LengthCapped: true})
		var got Params
		if err := json.Unmarshal(fin.Params, &got); err != nil || got.TransferID != "r" {
			t.Errorf("params %s, %v; want transfer_id r", fin.Params, err)
		}
	})
	t.Run("bootstrap_server_address override", func(t *testing.T) {
		for addr, want := range map[string]string{"boot.example:7000": "http://boot.example:7000", "https://boot.example": "https://boot.example"} {
			sc := newPDScheduler(t, KVProducer, map[string]any{"bootstrap_server_address": addr}, nil)
			sc.UpdateAfterAlloc(AllocArgs{ReqID: "r", BlockIDs: []int{1}, Params: decode})
			fin, err := sc.RequestFinished(FinishArgs{ReqID: "r", BlockIDs: []int{1}, LengthCapped: true})
			var got Params
			if err == nil {
				err = json.Unmarshal(fin.Params, &got)
			}
			if err != nil || got.RemoteBootstrapAddr != want || got.RemotePort != 8998 {
				t.Errorf("bootstrap %q: params %+v, %v; want remote_bootstrap_addr %q", addr, got, err, want)
			}
		}
	})
	t.Run("bootstrap port from env", func(t *testing.T) {
		s, err := ParseSettings(settingsJSON(t, KVProducer, map[string]any{"mc_mode": "pd"}, nil), map[string]string{EnvBootstrapPort: "9123"})
		if err != nil {
			t.Fatal(err)
		}
		sc, err := NewScheduler(testContext(t), s, nil)
		if err != nil {
			t.Fatal(err)
		}
		sc.UpdateAfterAlloc(AllocArgs{ReqID: "r", BlockIDs: []int{1}, Params: decode})
		fin, _ := sc.RequestFinished(FinishArgs{ReqID: "r", BlockIDs: []int{1}, LengthCapped: true})
		var got Params
		if err := json.Unmarshal(fin.Params, &got); err != nil || got.RemoteBootstrapAddr != "http://127.0.0.1:9123" || got.RemotePort != 9123 {
			t.Errorf("params = %+v, %v", got, err)
		}
	})
	t.Run("not length capped drops", func(t *testing.T) {
		sc := newPDScheduler(t, KVProducer, nil, nil)
		sc.UpdateAfterAlloc(AllocArgs{ReqID: "r", BlockIDs: []int{1, 2}, Params: decode})
		fin, err := sc.RequestFinished(FinishArgs{ReqID: "r", BlockIDs: []int{1, 2}, LengthCapped: false})
		if err != nil || fin.Hold || fin.Params != nil {
			t.Errorf("RequestFinished = %+v, %v; want no hold, no params", fin, err)
		}
		if m := buildMeta(t, sc); !metaEqual(m, Meta{Drops: []Drop{{ReqID: "r", TransferID: "xfer-9"}}}) {
			t.Errorf("meta = %+v", m)
		}
	})
	t.Run("unknown request", func(t *testing.T) {
		sc := newPDScheduler(t, KVProducer, nil, nil)
		fin, err := sc.RequestFinished(FinishArgs{ReqID: "never", LengthCapped: true})
		if err != nil || fin.Hold {
			t.Errorf("RequestFinished = %+v, %v", fin, err)
		}
		if m := buildMeta(t, sc); !m.Empty() {
			t.Errorf("meta = %+v", m)
		}
	})
	t.Run("consumer ignores do_remote_decode", func(t *testing.T) {
		sc := newPDScheduler(t, KVConsumer, nil, nil)
		sc.UpdateAfterAlloc(AllocArgs{ReqID: "r", BlockIDs: []int{1}, Params: decode})
		if fin, _ := sc.RequestFinished(FinishArgs{ReqID: "r", LengthCapped: true}); fin.Hold {
			t.Error("consumer holds a do_remote_decode request")
		}
	})
	t.Run("preempted", func(t *testing.T) {
		sc := newPDScheduler(t, KVBoth, nil, nil)
		sc.Preempted([]string{"a", "b"})
		if m := buildMeta(t, sc); !metaEqual(m, Meta{Preempted: []string{"a", "b"}}) {
			t.Errorf("meta = %+v", m)
		}
	})
}
