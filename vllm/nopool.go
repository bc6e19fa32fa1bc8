package vllm

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/mooncake-go/mooncake/connectors/config"
	"github.com/mooncake-go/mooncake/connectors/poolclient"
	"github.com/mooncake-go/mooncake/core/store/client"
)

// ErrPoolUnavailable is matched by the error of a store-mode connector
// whose pool could not be opened within mc_connect_timeout_ms (master or
// metadata server unreachable, segment not mounted), and by every load and
// save of a worker serving without its pool (mc_pool_required false).
var ErrPoolUnavailable = errors.New("vllm: KV cache pool unavailable")

// poolUnavailable wraps Open's error with the master it tried and the
// deadline, so the engine's log says what to fix. A setting this build
// cannot serve (poolclient.ErrUnsupported: a protocol other than tcp, a
// metadata server kind not built) is a configuration error instead: it
// is returned as ErrBadConfig, and mc_pool_required false does not serve
// past it.
func poolUnavailable(pc config.Config, timeout time.Duration, err error) error {
	if errors.Is(err, poolclient.ErrUnsupported) {
		return fmt.Errorf("%w: %w", ErrBadConfig, err)
	}
	return fmt.Errorf("%w: master %s, metadata %s, within %v (kv_connector_extra_config.mc_connect_timeout_ms; "+
		"mc_pool_required false serves without the cache): %w", ErrPoolUnavailable, pc.MasterServerAddress, metadataName(pc), timeout, err)
}

// degradable reports whether a pool that failed to open may be replaced by
// the no-pool stand-in (mc_pool_required false): unavailability only,
// never a configuration error.
func degradable(s Settings, err error) bool {
	return !s.PoolRequired && errors.Is(err, ErrPoolUnavailable)
}

func metadataName(pc config.Config) string {
	if pc.MetadataServer == "" {
		return "(the master's HTTP metadata server)"
	}
	return pc.MetadataServer
}

// noPool is the Pool of a worker serving without the cache: buffer
// registration succeeds (nothing is sent anywhere), every put and get
// fails with err, so planned loads are reported failed and saves are
// dropped through the worker's normal paths.
type noPool struct{ err error }

func (p noPool) BatchPutFromParts(_ context.Context, keys []string, _ [][][]byte, _ *client.PutOptions) []error {
	return p.fill(len(keys))
}

func (p noPool) BatchGetIntoParts(_ context.Context, keys []string, _ [][][]byte) ([]int, []error) {
	return make([]int, len(keys)), p.fill(len(keys))
}

func (noPool) RegisterBuffer(context.Context, []byte) error { return nil }

func (p noPool) fill(n int) []error {
	errs := make([]error, n)
	for i := range errs {
		errs[i] = p.err
	}
	return errs
}

// PoolError is the error that left this store-mode worker without its
// pool (mc_pool_required false: it serves without the cache), or nil; set
// by RegisterKVCaches.
func (w *Worker) PoolError() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if p, ok := w.pool.(noPool); ok {
		return p.err
	}
	return nil
}
