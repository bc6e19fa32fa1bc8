//go:build !rdma

package rdma

import (
	"context"

	"github.com/mooncake-go/mooncake/core/metadata"
	"github.com/mooncake-go/mooncake/core/transfer"
)

// builtWithVerbs tells tests which twin they run against.
const builtWithVerbs = false

var _ transfer.Transport = (*Transport)(nil)

// Available lists the RDMA devices libibverbs sees. In this build (without
// the rdma tag) it always returns ErrNotBuilt, which wraps
// transfer.ErrUnsupported.
func Available() ([]string, error) { return nil, ErrNotBuilt }

// Transport is the RDMA transport. In this build it cannot be created: New
// returns ErrNotBuilt. The methods exist so code using the type compiles
// either way.
type Transport struct{}

// New returns ErrNotBuilt (wrapping transfer.ErrUnsupported): this binary
// was built without the rdma tag. Config is still validated first, so
// configuration mistakes show up in every build.
func New(cfg Config) (*Transport, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return nil, ErrNotBuilt
}

// Device returns "" (no device is ever opened in this build).
func (t *Transport) Device() string { return "" }

// Devices returns nil (no device is ever opened in this build).
func (t *Transport) Devices() []string { return nil }

// Matrix returns nil (no device is ever opened in this build).
func (t *Transport) Matrix() map[string][2][]string { return nil }

// Protocol implements transfer.Transport ("rdma").
func (t *Transport) Protocol() string { return Protocol }

// Listen returns ErrNotBuilt.
func (t *Transport) Listen(name string, target transfer.Target) error { return ErrNotBuilt }

// Publish sets the protocol only.
func (t *Transport) Publish(d *metadata.SegmentDesc, rpc *metadata.RPCMeta) { d.Protocol = Protocol }

// Dial returns ErrNotBuilt.
func (t *Transport) Dial(ctx context.Context, d metadata.SegmentDesc, rpc metadata.RPCMeta) (transfer.Peer, error) {
	return nil, ErrNotBuilt
}

// DeregisterMemory returns 0: nothing is ever registered in this build.
func (t *Transport) DeregisterMemory(addr, length uint64) int { return 0 }

// Close returns nil.
func (t *Transport) Close() error { return nil }
