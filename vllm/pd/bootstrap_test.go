package pd

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestBootstrapServer checks /register and /query against upstream's
// behaviour: the answer's shape, 400 for a taken slot or a DP rank of
// another engine, identical re-registration accepted, methods enforced.
func TestBootstrapServer(t *testing.T) {
	b, err := NewBootstrapServer("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	hc := &http.Client{Timeout: 5 * time.Second}
	defer hc.CloseIdleConnections()
	base := "http://" + b.Addr()
	post := func(body string) int {
		t.Helper()
		resp, err := hc.Post(base+"/register", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	steps := []struct {
		body string
		want int
	}{
		{`{"engine_id":"e0","dp_rank":0,"tp_rank":0,"pp_rank":0,"addr":"tcp://127.0.0.1:5000"}`, 200},
		{`{"engine_id":"e0","dp_rank":0,"tp_rank":1,"pp_rank":0,"addr":"tcp://127.0.0.1:5001"}`, 200},
		{`{"engine_id":"e0","dp_rank":0,"tp_rank":1,"pp_rank":0,"addr":"tcp://127.0.0.1:5001"}`, 200}, // identical retry
		{`{"engine_id":"e0","dp_rank":0,"tp_rank":1,"pp_rank":0,"addr":"tcp://127.0.0.1:6000"}`, 400}, // slot taken
		{`{"engine_id":"other","dp_rank":0,"tp_rank":2,"pp_rank":0,"addr":"tcp://127.0.0.1:6001"}`, 400},
		{`{"engine_id":"e1","dp_rank":1,"tp_rank":0,"pp_rank":0,"addr":"tcp://127.0.0.1:5100"}`, 200},
		{`{"engine_id":"","dp_rank":2,"tp_rank":0,"pp_rank":0,"addr":"x"}`, 400},
		{`{"engine_id":"e2","dp_rank":-1,"tp_rank":0,"pp_rank":0,"addr":"x"}`, 400},
		{`not json`, 400},
	}
	for i, s := range steps {
		if got := post(s.body); got != s.want {
			t.Fatalf("step %d %s: status %d, want %d", i, s.body, got, s.want)
		}
	}
	resp, err := hc.Get(base + "/query")
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var generic map[string]struct {
		EngineID   string                       `json:"engine_id"`
		WorkerAddr map[string]map[string]string `json:"worker_addr"`
	}
	if err := json.Unmarshal(raw, &generic); err != nil {
		t.Fatalf("query answer %s: %v", raw, err)
	}
	if generic["0"].EngineID != "e0" || generic["0"].WorkerAddr["1"]["0"] != "tcp://127.0.0.1:5001" || generic["1"].WorkerAddr["0"]["0"] != "tcp://127.0.0.1:5100" {
		t.Fatalf("query answer %s", raw)
	}
	if r, err := hc.Get(base + "/register"); err != nil || r.StatusCode != http.StatusMethodNotAllowed {
		t.Fatalf("GET /register: %v %v", r, err)
	} else {
		r.Body.Close()
	}
	// The client side parses what the server answers.
	table, err := queryOnce(context.Background(), hc, base)
	if err != nil || table[1].EngineID != "e1" || sideAddr(table[0].WorkerAddr[0][0]) != "127.0.0.1:5000" {
		t.Fatalf("queryOnce = %v, %v", table, err)
	}
}

// TestDuplicateProducer: a second producer for the same (dp, tp) slot is
// refused by the bootstrap (400) and NewProducer fails with ErrBootstrap.
func TestDuplicateProducer(t *testing.T) {
	pp := newPair(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := NewProducer(ctx, Config{EngineID: "prefill-engine", BootstrapAddr: pp.p.BootstrapAddr(), ExternalBootstrap: true, Regions: regions(t, 3)})
	if !errors.Is(err, ErrBootstrap) || !strings.Contains(err.Error(), "already registered") {
		t.Fatalf("second producer: %v, want ErrBootstrap (already registered)", err)
	}
}

// TestSideChannelLimits: an oversized or malformed request is answered
// with an error, not served.
func TestSideChannelLimits(t *testing.T) {
	var buf bytes.Buffer
	buf.Write([]byte{0x7f, 0xff, 0xff, 0xff})
	var v recvRequest
	if err := readMessage(&buf, &v); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("oversized frame: %v", err)
	}
	pp := newPair(t, nil)
	table, err := queryOnce(context.Background(), &http.Client{Timeout: 5 * time.Second}, "http://"+pp.p.BootstrapAddr())
	if err != nil {
		t.Fatal(err)
	}
	addr := sideAddr(table[0].WorkerAddr[0][0])
	for _, raw := range [][]byte{{0, 0, 0, 3, 'b', 'a', 'd'}, {0x7f, 0, 0, 0}} {
		c, err := net.DialTimeout("tcp", addr, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		c.SetDeadline(time.Now().Add(10 * time.Second))
		c.Write(raw)
		var rep recvReply
		err = readMessage(c, &rep)
		c.Close()
		if err != nil || !errors.Is(rep.err(), ErrInvalidArgument) {
			t.Fatalf("reply to %q: %+v %v", raw, rep, err)
		}
	}
	// A request of another protocol version is refused.
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	if err := writeMessage(c, recvRequest{Version: 99, TransferID: "v"}); err != nil {
		t.Fatal(err)
	}
	var rep recvReply
	if err := readMessage(c, &rep); err != nil || !errors.Is(rep.err(), ErrUnsupported) {
		t.Fatalf("version 99: %+v %v", rep, err)
	}
}
