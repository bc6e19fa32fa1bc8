package server

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	grpcstatus "google.golang.org/grpc/status"

	"github.com/mooncake-go/mooncake/core/metadata/etcdmeta/etcdtest"
	"github.com/mooncake-go/mooncake/core/store/master"
	pb "github.com/mooncake-go/mooncake/core/store/storepb"
)

func TestParseEtcdEndpoints(t *testing.T) {
	for _, tt := range []struct {
		in   string
		want []string
	}{
		{"h1:2379", []string{"h1:2379"}},
		{"h1:2379,h2:2379", []string{"h1:2379", "h2:2379"}},
		{"etcd://h1:2379;h2:2379;h3:2379", []string{"h1:2379", "h2:2379", "h3:2379"}},
		{" h1:1 , ;h2:2; ", []string{"h1:1", "h2:2"}},
		{"", nil},
	} {
		if got := ParseEtcdEndpoints(tt.in); !slices.Equal(got, tt.want) {
			t.Errorf("ParseEtcdEndpoints(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func TestAdvertiseAddr(t *testing.T) {
	if got := advertiseAddr("127.0.0.1:50051"); got != "127.0.0.1:50051" {
		t.Errorf("advertiseAddr(127.0.0.1:50051) = %q", got)
	}
	for _, bound := range []string{"0.0.0.0:50051", "[::]:50051"} {
		got := advertiseAddr(bound)
		host, port, err := net.SplitHostPort(got)
		if err != nil || port != "50051" || host == "" {
			t.Errorf("advertiseAddr(%q) = %q", bound, got)
		}
		if ip := net.ParseIP(host); ip != nil && ip.IsUnspecified() {
			t.Errorf("advertiseAddr(%q) = %q: still unspecified", bound, got)
		}
	}
}

func health(t *testing.T, p *Process) map[string]string {
	t.Helper()
	resp, err := http.Get("http://" + p.MetricsAddr + "/health")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var body map[string]string
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		t.Fatal(err)
	}
	return body
}

// TestHAStandbyAndTakeover: of two masters on one etcd, one leads; the
// other refuses RPCs with Unavailable and reports "standby"; when the
// leader closes, the standby takes over with the committed object.
func TestHAStandbyAndTakeover(t *testing.T) {
	ep := etcdtest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var ps []*Process
	for range 2 {
		p, err := Start(ProcessConfig{RPCAddr: "127.0.0.1:0", MetricsAddr: "127.0.0.1:0",
			HA: &HAConfig{Endpoints: []string{ep}, ClusterID: "server_test", Logf: t.Logf}})
		if err != nil {
			t.Fatal(err)
		}
		defer p.Close()
		ps = append(ps, p)
	}
	var leader, standby *Process
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for leader == nil {
		for i, p := range ps {
			if p.Role() == "leader" {
				leader, standby = p, ps[1-i]
			}
		}
		select {
		case <-ctx.Done():
			t.Fatal("no leader")
		case <-tick.C:
		}
	}
	if h := health(t, standby); h["role"] != "standby" || h["leader"] != leader.RPCAddr {
		t.Fatalf("standby /health = %v", h)
	}
	if h := health(t, leader); h["role"] != "leader" || h["cluster_id"] != "server_test" {
		t.Fatalf("leader /health = %v", h)
	}
	dial := func(p *Process) pb.MasterClient {
		conn, err := grpc.NewClient(p.RPCAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		return pb.NewMasterClient(conn)
	}
	_, err := dial(standby).BatchExistKey(ctx, &pb.KeysRequest{Keys: pb.Keys([]string{"k"})})
	if grpcstatus.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "UNAVAILABLE_IN_CURRENT_MODE") {
		t.Fatalf("standby BatchExistKey: %v, want Unavailable", err)
	}
	lc := dial(leader)
	if st, err := lc.MountSegment(ctx, &pb.MountSegmentRequest{ClientId: "node", Segment: &pb.Segment{Id: "s", Name: "node", Base: 1 << 30, Size: 1 << 20, Protocol: "tcp"}}); err != nil || st.Code != 0 {
		t.Fatalf("MountSegment: %v %v", st, err)
	}
	put, err := lc.BatchPutStart(ctx, &pb.BatchPutStartRequest{ClientId: "w", Keys: pb.Keys([]string{"k"}), Sizes: []uint64{100}, Config: &pb.ReplicaConfig{ReplicaNum: 1}})
	if err != nil || put.Results[0].Status.GetCode() != 0 {
		t.Fatalf("BatchPutStart: %v %v", put, err)
	}
	if end, err := lc.BatchPutEnd(ctx, &pb.KeysRequest{ClientId: "w", Keys: pb.Keys([]string{"k"})}); err != nil || end.Results[0].GetCode() != 0 {
		t.Fatalf("BatchPutEnd: %v %v", end, err)
	}
	addr := put.Results[0].Replicas[0].Addr

	leader.Close()
	for standby.Role() != "leader" {
		select {
		case <-ctx.Done():
			t.Fatal("standby never took over")
		case <-tick.C:
		}
	}
	r, err := dial(standby).BatchGetReplicaList(ctx, &pb.KeysRequest{Keys: pb.Keys([]string{"k"})})
	if err != nil || r.Results[0].Status.GetCode() != 0 || r.Results[0].Replicas[0].Addr != addr {
		t.Fatalf("k on the new leader: %v, %v; want the replica at %#x", r, err, addr)
	}
	standby.Server.Do(func(m *master.Master) {
		if need, _ := m.Ping("node"); need {
			t.Error("the restored segment's client is unknown to the new leader")
		}
	})
}
