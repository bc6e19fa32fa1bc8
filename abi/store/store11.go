package store

import (
	"context"
	"encoding/json"
	"math/rand/v2"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/mooncake-go/mooncake/abi/cbridge"
	mcstore "github.com/mooncake-go/mooncake/core/store"
	"github.com/mooncake-go/mooncake/core/store/client"
	pb "github.com/mooncake-go/mooncake/core/store/storepb"
)

// The calls of store.h 1.2 (see the header's History), behind the exports
// of exports11.go.

// Upstream's variables bounding the port a client without one in
// local_hostname listens on (its RealClient::setup_internal), and their
// defaults.
const (
	envMinPort     = "MC_STORE_CLIENT_MIN_PORT"
	envMaxPort     = "MC_STORE_CLIENT_MAX_PORT"
	defaultMinPort = 12300
	defaultMaxPort = 14300
	portAttempts   = 64 // random ports tried before giving up
)

// envForceTCP is upstream's variable forcing the tcp transport; here it
// keeps same-host peers on tcp instead of shared memory.
const envForceTCP = "MC_FORCE_TCP"

// forceTCP reports whether env sets MC_FORCE_TCP to a true value ("1",
// "true", "yes", "on", any case), as upstream reads it.
func forceTCP(env map[string]string) bool {
	switch strings.ToLower(strings.TrimSpace(env[envForceTCP])) {
	case "1", "true", "yes", "on":
		return true
	}
	return false
}

// healthTimeout bounds mc_store_health_check's ping.
const healthTimeout = 5 * time.Second

// portRange is [MC_STORE_CLIENT_MIN_PORT, MC_STORE_CLIENT_MAX_PORT] from
// env, upstream's defaults where a variable is unset or not a port, and
// the defaults when min > max (as upstream's ValidatePortRange).
func portRange(env map[string]string) (lo, hi int) {
	lo, hi = defaultMinPort, defaultMaxPort
	parse := func(name string, def int) int {
		if v, ok := env[name]; ok {
			if n, err := strconv.Atoi(v); err == nil && n > 0 && n <= 65535 {
				return n
			}
		}
		return def
	}
	l, h := parse(envMinPort, lo), parse(envMaxPort, hi)
	if l > h {
		return lo, hi
	}
	return l, h
}

// pickPort returns a port in portRange that host can listen on now (the
// listener is closed again; the engine binds it a moment later), trying
// random ones. Errors: MC_ERR_SOCKET (through the listen error) when none
// of portAttempts tries is free.
func pickPort(host string) (int, error) {
	lo, hi := portRange(cbridge.Environ())
	var last error
	for range portAttempts {
		p := lo + rand.IntN(hi-lo+1)
		ln, err := net.Listen("tcp", net.JoinHostPort(host, strconv.Itoa(p)))
		if err == nil {
			ln.Close()
			return p, nil
		}
		last = err
	}
	return 0, last
}

// putOptions is a decoded mc_store_replicate_config_t (nil = defaults).
type putOptions = client.PutOptions

// batchPut is mc_store_batch_put.
func (s *storeClient) batchPut(keys []string, values [][]byte, o *putOptions) []error {
	return s.c.BatchPut(context.Background(), keys, values, o)
}

// putParts is mc_store_put_parts.
func (s *storeClient) putParts(key string, parts [][]byte, o *putOptions) error {
	return s.c.PutParts(context.Background(), key, parts, o)
}

// batchPutFromParts is mc_store_batch_put_from_config and _parts.
func (s *storeClient) batchPutFromParts(keys []string, parts [][][]byte, o *putOptions) []error {
	return s.c.BatchPutFromParts(context.Background(), keys, parts, o)
}

// batchGetIntoParts is mc_store_batch_get_into_parts.
func (s *storeClient) batchGetIntoParts(keys []string, parts [][][]byte) ([]int, []error) {
	return s.c.BatchGetIntoParts(context.Background(), keys, parts)
}

// batchGet is mc_store_batch_get: alloc gives each found key's destination.
func (s *storeClient) batchGet(keys []string, alloc func(i int, size uint64) ([]byte, error)) ([]int, []error) {
	return s.c.BatchGetAlloc(context.Background(), keys, alloc)
}

// batchGetRanges is mc_store_batch_get_ranges.
func (s *storeClient) batchGetRanges(rs []client.Range) ([]int, []error) {
	return s.c.BatchGetRanges(context.Background(), rs)
}

// batchRemove is mc_store_batch_remove.
func (s *storeClient) batchRemove(keys []string, force bool) []error {
	return s.c.BatchRemove(context.Background(), keys, force)
}

// removeByRegex is mc_store_remove_by_regex.
func (s *storeClient) removeByRegex(expr string, force bool) (int, error) {
	return s.c.RemoveByRegex(context.Background(), expr, force)
}

// removeAll is mc_store_remove_all.
func (s *storeClient) removeAll(force bool) (int, error) {
	return s.c.RemoveAll(context.Background(), force)
}

// health is mc_store_health_check.
func (s *storeClient) health() error {
	ctx, cancel := context.WithTimeout(context.Background(), healthTimeout)
	defer cancel()
	return s.c.Health(ctx)
}

// Replica descriptors as mc_store_get_replica_desc writes them (JSON).
type (
	descKey struct {
		Code     int32         `json:"code"`
		Replicas []descReplica `json:"replicas"`
	}
	descReplica struct {
		Status  string      `json:"status"`
		Kind    string      `json:"kind"`
		Size    uint64      `json:"size"`
		Segment string      `json:"segment"`
		Address uint64      `json:"address"`
		Slices  []descSlice `json:"slices"`
	}
	descSlice struct {
		Segment string `json:"segment"`
		Address uint64 `json:"address"`
		Size    uint64 `json:"size"`
	}
)

// replicaStatus names pb.Replica.status as upstream's ReplicaStatus.
func replicaStatus(st int32) string {
	switch st {
	case 1:
		return "INITIALIZED"
	case 2:
		return "PROCESSING"
	case 3:
		return "COMPLETE"
	case 4:
		return "REMOVED"
	case 5:
		return "FAILED"
	}
	return "UNDEFINED"
}

// replicaDesc is mc_store_get_replica_desc: the master's replica list per
// key (which grants a lease, as a read), as JSON.
func (s *storeClient) replicaDesc(keys []string, errs []error) ([]byte, error) {
	out := make([]descKey, len(keys))
	var ask []string
	var idx []int
	for i, k := range keys {
		out[i] = descKey{Replicas: []descReplica{}}
		if errs[i] != nil {
			out[i].Code = code(errs[i])
			continue
		}
		ask, idx = append(ask, k), append(idx, i)
	}
	if len(ask) > 0 {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		r, err := s.rpc.BatchGetReplicaList(ctx, &pb.KeysRequest{ClientId: s.c.ID(), Keys: pb.Keys(ask)})
		if err != nil {
			return nil, mcstore.Errorf(mcstore.RPCFail, "get replica list: %v", err)
		}
		if len(r.Results) != len(ask) {
			return nil, mcstore.Errorf(mcstore.RPCFail, "get replica list: %d results for %d keys", len(r.Results), len(ask))
		}
		for j, res := range r.Results {
			d := &out[idx[j]]
			if c := res.GetStatus().GetCode(); c != 0 {
				d.Code = code(&mcstore.Error{Code: mcstore.ErrorCode(c), Msg: res.GetStatus().GetMessage()})
				continue
			}
			for _, rep := range res.Replicas {
				dr := descReplica{Status: replicaStatus(rep.Status), Kind: "memory", Size: rep.Size, Segment: rep.Segment, Address: rep.Addr, Slices: []descSlice{}}
				if rep.Type == 1 {
					dr.Kind = "local_disk"
				}
				for _, sl := range rep.Slices {
					dr.Slices = append(dr.Slices, descSlice{Segment: sl.Segment, Address: sl.Addr, Size: sl.Size})
				}
				if len(dr.Slices) == 0 {
					dr.Slices = append(dr.Slices, descSlice{Segment: rep.Segment, Address: rep.Addr, Size: rep.Size})
				}
				d.Replicas = append(d.Replicas, dr)
			}
		}
	}
	return json.Marshal(out)
}
