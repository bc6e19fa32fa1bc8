package p2p

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/mooncake-go/mooncake/abi/cbridge"
	"github.com/mooncake-go/mooncake/core/p2p"
)

// Timeouts of one C call: quick calls (create, unregister, delete, list)
// and the long ones (register checksums the object; get_replica moves it).
const (
	callTimeout = 30 * time.Second
	longTimeout = 30 * time.Minute
)

// envBindAddress names the host the data plane binds and publishes.
const envBindAddress = "MC_TCP_BIND_ADDRESS"

// create is mc_p2p_create; env is the process environment (libc's view).
func create(uri, name string, env map[string]string) (*p2p.Store, error) {
	if strings.TrimSpace(strings.TrimPrefix(uri, "etcd://")) == "" {
		return nil, fmt.Errorf("%w: metadata_uri is empty (want an etcd endpoint list such as 127.0.0.1:2379)", cbridge.ErrInvalidArgument)
	}
	if strings.HasPrefix(uri, "http://") || strings.HasPrefix(uri, "https://") || uri == "P2PHANDSHAKE" {
		return nil, fmt.Errorf("%w: the P2P store keeps its metadata in etcd; %q is not an etcd endpoint list", cbridge.ErrInvalidArgument, uri)
	}
	var eps []string
	for _, e := range strings.FieldsFunc(strings.TrimPrefix(uri, "etcd://"), func(r rune) bool { return r == ',' || r == ';' }) {
		if e = strings.TrimSpace(e); e != "" {
			eps = append(eps, e)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	return p2p.New(ctx, p2p.Config{Etcd: eps, Name: name, BindHost: env[envBindAddress]})
}

func quick() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), callTimeout)
}

func long() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), longTimeout)
}

// listing is one element of mc_p2p_list's JSON.
type listing struct {
	Name         string   `json:"name"`
	TotalSize    uint64   `json:"total_size"`
	MaxShardSize uint64   `json:"max_shard_size"`
	SizeList     []uint64 `json:"size_list"`
	Shards       int      `json:"shards"`
	Holders      int      `json:"holders"`
	Origin       string   `json:"origin"`
}

// list is mc_p2p_list's JSON.
func list(s *p2p.Store, prefix string) ([]byte, error) {
	ctx, cancel := quick()
	defer cancel()
	l, err := s.List(ctx, prefix)
	if err != nil {
		return nil, err
	}
	out := make([]listing, 0, len(l))
	for _, p := range l {
		out = append(out, listing{p.Name, p.TotalSize, p.MaxShardSize, p.SizeList, p.Shards, p.Holders, p.Origin})
	}
	return json.Marshal(out)
}

// buffers checks the (addr, size) lists of C and returns them as slices
// over the caller's memory.
func buffers(addrs []uintptr, sizes []uint64) ([][]byte, error) {
	if len(addrs) == 0 {
		return nil, fmt.Errorf("%w: count is 0", cbridge.ErrInvalidArgument)
	}
	out := make([][]byte, len(addrs))
	for i := range addrs {
		b, err := cbridge.ForeignBytes(fmt.Sprintf("buffer %d", i), addrs[i], uintptr(sizes[i]))
		if err != nil {
			return nil, err
		}
		out[i] = b
	}
	return out, nil
}
