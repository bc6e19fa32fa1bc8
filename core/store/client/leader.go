package client

import (
	"context"
	"net"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/resolver"
	grpcstatus "google.golang.org/grpc/status"

	"github.com/mooncake-go/mooncake/core/store"
	"github.com/mooncake-go/mooncake/core/store/ha"
	pb "github.com/mooncake-go/mooncake/core/store/storepb"
	"github.com/mooncake-go/mooncake/core/tlsconfig"
)

// Following the leader of highly available masters (core/store/ha).
//
// With Config.MasterAddr "etcd://h1:2379,h2:2379" (upstream's form, also
// with ';' between endpoints) the client does not dial a fixed master: a
// gRPC resolver watches the election keys of Config.ClusterID in etcd and
// points the connection at the current leader, so a failover redirects the
// client as soon as the new leader is elected. Calls that fail with gRPC
// code Unavailable (connection refused, a standby's refusal, a leader that
// lost its leadership before replicating the change) are retried with
// backoff until the call's deadline, but only when they are idempotent:
// lookups (exist, replica lists, sizes), Ping, statistics and listings, and
// segment mounts (a repeated mount is reported as already mounted, which
// the client treats as success), and disk tier mounts (a repeat with the
// same capacity is a no-op). Puts, removals and unmounts are never
// retried blindly: the caller gets RPC_FAIL and decides; retrying a put is
// safe (a put that did commit answers OBJECT_ALREADY_EXISTS, which counts
// as success).

// leaderScheme is the gRPC target scheme of the leader resolver.
const leaderScheme = "mooncake-leader"

// idempotent lists the master methods retried on Unavailable.
var idempotent = map[string]bool{
	pb.Master_BatchExistKey_FullMethodName:       true,
	pb.Master_BatchGetReplicaList_FullMethodName: true,
	pb.Master_ExistKey_FullMethodName:            true,
	pb.Master_GetReplicaList_FullMethodName:      true,
	pb.Master_BatchGetSize_FullMethodName:        true,
	pb.Master_Ping_FullMethodName:                true,
	pb.Master_GetStats_FullMethodName:            true,
	pb.Master_ListSegments_FullMethodName:        true,
	pb.Master_QuerySegment_FullMethodName:        true,
	pb.Master_ListKeys_FullMethodName:            true,
	pb.Master_MountSegment_FullMethodName:        true,
	pb.Master_ReMountSegment_FullMethodName:      true,
	pb.Master_MountLocalDisk_FullMethodName:      true,
}

// etcdEndpoints returns the endpoints of an "etcd://..." master address.
func etcdEndpoints(addr string) ([]string, bool) {
	rest, ok := strings.CutPrefix(addr, "etcd://")
	if !ok {
		return nil, false
	}
	var eps []string
	for _, f := range strings.FieldsFunc(rest, func(r rune) bool { return r == ',' || r == ';' }) {
		if f = strings.TrimSpace(f); f != "" {
			eps = append(eps, f)
		}
	}
	return eps, true
}

// dialMaster creates the client's master connection (dial).
func (c *Client) dialMaster() (*grpc.ClientConn, error) {
	return dial(c.cfg.MasterAddr, dialConfig{cluster: c.cfg.ClusterID, tls: c.cfg.TLS, etcdTLS: c.cfg.EtcdTLS}, c.stop)
}

// dialConfig is what dial needs beyond the address.
type dialConfig struct {
	cluster      string            // HA cluster of an etcd:// address; "" = the default
	tls, etcdTLS *tlsconfig.Config // mutual TLS to the master, TLS to etcd; nil = plaintext
}

// dial creates a master connection: to addr (host:port), or, for an
// etcd:// address, to whichever master of cfg.cluster leads, retrying
// idempotent calls across a failover until their deadline or until stop is
// closed; with cfg.tls over mutual TLS (a failed call's message then says
// what TLS problem it looks like: tlsconfig.DialOptions). Errors:
// INVALID_PARAMS (no endpoint, bad cluster id); RPC_FAIL (gRPC refused the
// target).
func dial(addr string, cfg dialConfig, stop <-chan struct{}) (*grpc.ClientConn, error) {
	opts := append(tlsconfig.DialOptions(cfg.tls), grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(maxRecvBytes)),
		// fixed windows, no BDP pings (see store.GRPCWindow)
		grpc.WithInitialWindowSize(store.GRPCWindow), grpc.WithInitialConnWindowSize(store.GRPCWindow))
	cluster := cfg.cluster
	eps, ok := etcdEndpoints(addr)
	if !ok {
		conn, err := grpc.NewClient(addr, opts...)
		if err != nil {
			return nil, store.Errorf(store.RPCFail, "master %s: %v", addr, err)
		}
		return conn, nil
	}
	if len(eps) == 0 {
		return nil, store.Errorf(store.InvalidParams, "master %q names no etcd endpoint", addr)
	}
	if cluster == "" {
		cluster = ha.DefaultClusterID
	}
	if err := ha.CheckClusterID(cluster); err != nil {
		return nil, store.Errorf(store.InvalidParams, "%v", err)
	}
	b := &leaderBuilder{endpoints: eps, cluster: cluster, tls: cfg.etcdTLS, serverName: cfg.tls.Files().ServerName}
	opts = append(opts, grpc.WithResolvers(b), grpc.WithChainUnaryInterceptor(retryIdempotent(stop)))
	conn, err := grpc.NewClient(leaderScheme+":///"+cluster, opts...)
	if err != nil {
		return nil, store.Errorf(store.RPCFail, "master %s: %v", addr, err)
	}
	return conn, nil
}

// retryIdempotent retries idempotent calls that fail with Unavailable,
// with backoff, until the call's context ends or stop is closed.
func retryIdempotent(stop <-chan struct{}) grpc.UnaryClientInterceptor {
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		backoff := 10 * time.Millisecond
		for {
			err := invoker(ctx, method, req, reply, cc, opts...)
			if err == nil || !idempotent[method] || grpcstatus.Code(err) != codes.Unavailable {
				return err
			}
			t := time.NewTimer(backoff)
			select {
			case <-ctx.Done():
				t.Stop()
				return err
			case <-stop:
				t.Stop()
				return err
			case <-t.C:
			}
			backoff = min(2*backoff, 250*time.Millisecond)
		}
	}
}

// leaderBuilder builds resolvers that follow a cluster's leader.
type leaderBuilder struct {
	endpoints []string
	cluster   string
	tls       *tlsconfig.Config // etcd's; nil = plaintext
	// serverName is the name a TLS client verifies in the leader's
	// certificate (tlsconfig.Files.ServerName); "" = the leader's host.
	// It must be set per address: the channel's own authority is the
	// cluster id.
	serverName string
}

func (b *leaderBuilder) Scheme() string { return leaderScheme }

// Build starts watching the master view. Each resolver owns its etcd
// client (gRPC may rebuild the resolver when the channel leaves idle).
func (b *leaderBuilder) Build(_ resolver.Target, cc resolver.ClientConn, _ resolver.BuildOptions) (resolver.Resolver, error) {
	cli, err := clientv3.New(clientv3.Config{Endpoints: b.endpoints, Logger: zap.NewNop(), TLS: b.tls.Client()})
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &leaderResolver{cli: cli, cc: cc, cancel: cancel, done: make(chan struct{}), serverName: b.serverName}
	go r.run(ctx, b.cluster)
	return r, nil
}

// leaderResolver reports the current leader's address to gRPC.
type leaderResolver struct {
	cli        *clientv3.Client
	cc         resolver.ClientConn
	cancel     context.CancelFunc
	done       chan struct{}
	serverName string // leaderBuilder.serverName
}

func (r *leaderResolver) run(ctx context.Context, cluster string) {
	defer close(r.done)
	last := "\x00" // nothing reported yet
	ha.WatchLeader(ctx, r.cli, cluster, func(addr string) {
		if addr == last || ctx.Err() != nil {
			return
		}
		last = addr
		if addr == "" {
			r.cc.ReportError(ha.ErrNoLeader)
			return
		}
		// The leader's certificate must name the host it advertises (as
		// for a master dialled by host:port), unless a server name is
		// configured.
		name := r.serverName
		if name == "" {
			if host, _, err := net.SplitHostPort(addr); err == nil {
				name = host
			} else {
				name = addr
			}
		}
		_ = r.cc.UpdateState(resolver.State{Addresses: []resolver.Address{{Addr: addr, ServerName: name}}})
	})
}

// ResolveNow is a no-op: the watch reports every change.
func (r *leaderResolver) ResolveNow(resolver.ResolveNowOptions) {}

// Close stops the watch and closes the etcd client.
func (r *leaderResolver) Close() {
	r.cancel()
	<-r.done
	r.cli.Close()
}
