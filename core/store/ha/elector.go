package ha

import (
	"context"
	"errors"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
)

// DefaultSessionTTL is the leadership lease (upstream: 5 s): a leader that
// stops refreshing it loses the leadership this long after its last
// refresh.
const DefaultSessionTTL = 5 * time.Second

// Elector runs for the leadership of one cluster with
// go.etcd.io/etcd/client/v3/concurrency: each Campaign creates a session (an
// etcd lease of the session TTL, kept alive) and an election on
// mooncake-store/<cluster_id>/master_view whose value is the candidate's
// RPC address. It is safe for concurrent use.
type Elector struct {
	cli  *clientv3.Client
	keys keys
	ttl  int // seconds
}

// NewElector returns an elector for clusterID (default DefaultClusterID)
// with a session TTL of ttl (default DefaultSessionTTL, rounded up to whole
// seconds). Errors: ErrInvalidClusterID.
func NewElector(cli *clientv3.Client, clusterID string, ttl time.Duration) (*Elector, error) {
	if clusterID == "" {
		clusterID = DefaultClusterID
	}
	if err := CheckClusterID(clusterID); err != nil {
		return nil, err
	}
	if ttl <= 0 {
		ttl = DefaultSessionTTL
	}
	return &Elector{cli: cli, keys: keysFor(clusterID), ttl: int((ttl + time.Second - 1) / time.Second)}, nil
}

// Term is one leadership, from a successful Campaign until its session
// ends. Every write the leader makes carries Fence, so that none lands
// once another master leads.
type Term struct {
	cli      *clientv3.Client
	session  *concurrency.Session
	election *concurrency.Election
	key      string             // the election key this term created
	rev      int64              // its create revision
	cancel   context.CancelFunc // the session's keep-alive context
}

// Campaign blocks until this candidate leads the cluster (or ctx ends),
// advertising addr to clients, and confirms the leadership with a fenced
// read. Errors: ctx's; ErrNotLeader (the session ended while waiting);
// etcd's. Nothing is left behind on error.
func (e *Elector) Campaign(ctx context.Context, addr string) (*Term, error) {
	lease, err := e.cli.Grant(ctx, int64(e.ttl))
	if err != nil {
		return nil, fmt.Errorf("ha: granting the session lease: %w", err)
	}
	// The keep-alive runs on its own context: ending ctx must not stop it
	// for a leader, and Resign needs it alive to revoke the lease.
	sctx, cancel := context.WithCancel(context.Background())
	s, err := concurrency.NewSession(e.cli, concurrency.WithLease(lease.ID), concurrency.WithTTL(e.ttl), concurrency.WithContext(sctx))
	if err != nil {
		cancel()
		rctx, rcancel := context.WithTimeout(context.Background(), time.Duration(e.ttl)*time.Second)
		_, _ = e.cli.Revoke(rctx, lease.ID)
		rcancel()
		return nil, fmt.Errorf("ha: session: %w", err)
	}
	t := &Term{cli: e.cli, session: s, election: concurrency.NewElection(s, e.keys.view()), cancel: cancel}
	if err := t.election.Campaign(ctx, addr); err != nil {
		t.Resign(context.Background())
		return nil, fmt.Errorf("ha: campaign: %w", err)
	}
	t.key, t.rev = t.election.Key(), t.election.Rev()
	if err := t.Check(ctx); err != nil {
		t.Resign(context.Background())
		return nil, err
	}
	return t, nil
}

// Done is closed when the session ends (its lease expired or could not be
// refreshed, or Resign/Abandon): the leadership is over.
func (t *Term) Done() <-chan struct{} { return t.session.Done() }

// Fence is the condition that this term still leads: the election key it
// created still exists with the same create revision.
func (t *Term) Fence() []clientv3.Cmp {
	return []clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(t.key), "=", t.rev)}
}

// Check confirms the leadership with a fenced read. Errors: ErrNotLeader;
// etcd's.
func (t *Term) Check(ctx context.Context) error {
	resp, err := t.cli.Txn(ctx).If(t.Fence()...).Commit()
	if err != nil {
		return fmt.Errorf("ha: confirming the leadership: %w", err)
	}
	if !resp.Succeeded {
		return fmt.Errorf("%w: election key %s is gone", ErrNotLeader, t.key)
	}
	return nil
}

// Key is the election key of this term; Rev its create revision (the view
// version clients see).
func (t *Term) Key() string { return t.key }

// Rev is the create revision of the election key.
func (t *Term) Rev() int64 { return t.rev }

// Resign ends the term at once: it deletes the election key (the next
// candidate takes over without waiting for the lease) and revokes the
// session lease. Errors: etcd's (the lease then expires on its own).
func (t *Term) Resign(ctx context.Context) error {
	rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	err := t.election.Resign(rctx)
	if cerr := t.session.Close(); cerr != nil && !errors.Is(cerr, context.Canceled) {
		err = errors.Join(err, cerr)
	}
	t.cancel()
	return err
}

// Abandon ends the term as a crash would: the lease is no longer refreshed
// but not revoked, so the next candidate takes over only when it expires.
func (t *Term) Abandon() {
	t.session.Orphan()
	t.cancel()
}

// Leader returns the RPC address of clusterID's leader and the create
// revision of its election key (the view version). Errors: ErrNoLeader;
// etcd's.
func Leader(ctx context.Context, cli *clientv3.Client, clusterID string) (addr string, rev int64, err error) {
	resp, err := cli.Get(ctx, ViewPrefix(clusterID), clientv3.WithFirstCreate()...)
	if err != nil {
		return "", 0, fmt.Errorf("ha: reading the master view: %w", err)
	}
	if len(resp.Kvs) == 0 {
		return "", 0, ErrNoLeader
	}
	return string(resp.Kvs[0].Value), resp.Kvs[0].CreateRevision, nil
}

// WatchLeader calls f with the leader's address ("" while there is none)
// at once and after every change of the master view, until ctx ends; it
// retries etcd errors with backoff. f runs on the calling goroutine; equal
// consecutive addresses may be reported.
func WatchLeader(ctx context.Context, cli *clientv3.Client, clusterID string, f func(addr string)) {
	prefix := ViewPrefix(clusterID)
	backoff := 50 * time.Millisecond
	for ctx.Err() == nil {
		resp, err := cli.Get(ctx, prefix, clientv3.WithFirstCreate()...)
		if err == nil {
			backoff = 50 * time.Millisecond
			addr := ""
			if len(resp.Kvs) > 0 {
				addr = string(resp.Kvs[0].Value)
			}
			f(addr)
			wctx, cancel := context.WithCancel(ctx)
			wch := cli.Watch(clientv3.WithRequireLeader(wctx), prefix, clientv3.WithPrefix(), clientv3.WithRev(resp.Header.Revision+1))
			changed := false
			for w := range wch {
				if w.Err() != nil {
					break
				}
				if len(w.Events) > 0 {
					changed = true
					break
				}
			}
			cancel()
			if changed {
				continue
			}
		}
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		backoff = min(2*backoff, time.Second)
	}
}
