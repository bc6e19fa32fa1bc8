package rdma

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/mooncake-go/mooncake/core/transfer"
	"github.com/mooncake-go/mooncake/core/transfer/topology"
)

// Protocol is the protocol name the transport publishes ("rdma").
const Protocol = "rdma"

var (
	// ErrNotBuilt is returned by Available and New in a build without the
	// rdma tag. It wraps transfer.ErrUnsupported.
	ErrNotBuilt = fmt.Errorf("%w: rdma (built without the rdma tag)", transfer.ErrUnsupported)
	// ErrNoDevice is returned by Available and New when libibverbs lists no
	// usable device (none present, the named one absent, or its port not
	// active). It wraps transfer.ErrUnsupported; upstream falls back to TCP
	// in this case unless MC_FORCE_HCA is set.
	ErrNoDevice = fmt.Errorf("%w: rdma: no RDMA device", transfer.ErrUnsupported)
	// ErrHandshake is returned when the control channel to a peer fails or
	// the peer answers nonsense.
	ErrHandshake = errors.New("rdma: handshake failed")
)

// GIDAuto selects the GID index automatically: 0 on InfiniBand; on RoCE the
// first RoCE v2 GID holding an IPv4-mapped address, else the first RoCE v2
// GID, else 0.
const GIDAuto = -1

// Config configures an RDMA transport. Zero values take the defaults shown,
// except GIDIndex, whose zero value is GID index 0 (use GIDAuto or
// DefaultConfig for the automatic choice).
type Config struct {
	// Device is a single verbs device to open ("mlx5_0"); the same as
	// Devices: []string{Device}. Set at most one of Device and Devices.
	Device string
	// Devices are the verbs devices to open, one context (protection
	// domain, completion queue, queue pairs) each (upstream's device_name
	// list, "mlx5_0,mlx5_1"). Every named device must open. Default: the
	// devices Matrix names, when it is set, else every device
	// ibv_get_device_list returns; defaulted devices that fail to open
	// (port not active) are skipped, as upstream disables them, and New
	// fails only when none opens.
	Devices []string
	// Matrix is the NIC priority matrix (topology.ParseMatrix's form:
	// location -> [preferred devices, other devices]) used to choose
	// devices per slice and published to peers (upstream
	// MC_CUSTOM_TOPO_JSON). Default: discovered from sysfs
	// (topology.DiscoverWith(...).PriorityMatrix() filtered to the opened
	// devices). Devices that did not open are removed from it; when it then
	// names no device, every opened device serves every location.
	Matrix map[string][2][]string
	// RoundRobin makes each slice's first attempt cycle through the
	// preferred devices instead of drawing one at random (upstream
	// MC_PATH_ROUNDROBIN).
	RoundRobin bool
	// DestDeviceAffinity makes a slice use the peer device with the same
	// name as the local one whenever the peer's matrix lists it for the
	// target buffer (upstream MC_ENABLE_DEST_DEVICE_AFFINITY; rail-optimised
	// fabrics).
	DestDeviceAffinity bool
	// RetryCount is how many times a failed slice is resubmitted, each
	// time on the next path of the retry walk (topology.Selector), before
	// the request fails; default 9 (MC_RETRY_CNT); negative: never.
	RetryCount int
	// Port is the HCA port; default 1 (upstream MC_IB_PORT).
	Port int
	// GIDIndex is the GID table index, or GIDAuto (upstream MC_GID_INDEX).
	GIDIndex int
	// PKeyIndex is the QP partition key index; default 0 (MC_PKEY_INDEX).
	PKeyIndex int
	// ServiceLevel and TrafficClass go into the address vector; default 0
	// (MC_IB_SL, MC_IB_TC).
	ServiceLevel int
	TrafficClass int
	// MTU is the path MTU in bytes (256, 512, 1024, 2048 or 4096), capped
	// at the port's active MTU; default 4096 (MC_MTU).
	MTU int
	// MaxCQE is the depth of each completion queue; default 4096
	// (MC_MAX_CQE_PER_CTX).
	MaxCQE int
	// MaxWR is the send queue depth of each QP, i.e. the most work requests
	// one request keeps outstanding; default 256 (MC_MAX_WR).
	MaxWR int
	// MaxSGE is the scatter/gather entries per work request; default 4
	// (MC_MAX_SGE). The transport posts one SGE per work request.
	MaxSGE int
	// MaxInline is the largest WRITE slice in bytes sent inline in the work
	// request; default 64 (MC_MAX_INLINE).
	MaxInline int
	// QPsPerPeer caps the queue pairs per endpoint, i.e. per (local
	// device, peer device) pair of one peer, and so the requests running
	// in parallel on that path; default 2 (MC_NUM_QP_PER_EP).
	QPsPerPeer int
	// SliceSize is the bytes per work request; default 65536
	// (MC_SLICE_SIZE).
	SliceSize int
	// BindAddr is the control channel's listen address; default
	// "127.0.0.1:0". Set a routable address for peers on other hosts
	// (upstream MC_RDMA_BIND_ADDRESS).
	BindAddr string
	// Host is the address peers dial for the control channel, published as
	// ip_or_host_name; default the host part of the bound address.
	Host string
	// DialTimeout bounds connecting the control channel; default 5 s
	// (MC_HANDSHAKE_CONNECT_TIMEOUT).
	DialTimeout time.Duration
	// MaxMessage bounds one control message in bytes; default 1 MiB
	// (MC_HANDSHAKE_MAX_LENGTH).
	MaxMessage int
}

// DefaultConfig returns the defaults with GIDIndex set to GIDAuto.
func DefaultConfig() Config {
	c := Config{GIDIndex: GIDAuto}
	c.setDefaults()
	return c
}

func (c *Config) setDefaults() {
	def := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	def(&c.Port, 1)
	def(&c.MTU, 4096)
	def(&c.MaxCQE, 4096)
	def(&c.MaxWR, 256)
	def(&c.MaxSGE, 4)
	def(&c.MaxInline, 64)
	def(&c.QPsPerPeer, 2)
	def(&c.SliceSize, 65536)
	def(&c.MaxMessage, 1<<20)
	def(&c.RetryCount, 9)
	if c.BindAddr == "" {
		c.BindAddr = "127.0.0.1:0"
	}
	if c.DialTimeout <= 0 {
		c.DialTimeout = 5 * time.Second
	}
}

// Validate fills the defaults and checks the ranges. Errors: wrapping
// transfer.ErrInvalidArgument, naming the field.
func (c *Config) Validate() error {
	c.setDefaults()
	bad := func(field string, v any) error {
		return fmt.Errorf("%w: rdma config: %s = %v", transfer.ErrInvalidArgument, field, v)
	}
	switch {
	case c.Port < 1 || c.Port > 255:
		return bad("Port", c.Port)
	case c.GIDIndex < GIDAuto:
		return bad("GIDIndex", c.GIDIndex)
	case c.PKeyIndex < 0 || c.PKeyIndex > 0xffff:
		return bad("PKeyIndex", c.PKeyIndex)
	case c.ServiceLevel < 0 || c.ServiceLevel > 15:
		return bad("ServiceLevel", c.ServiceLevel)
	case c.TrafficClass < 0 || c.TrafficClass > 255:
		return bad("TrafficClass", c.TrafficClass)
	case mtuEnum(c.MTU) == 0:
		return bad("MTU", c.MTU)
	case c.MaxCQE < 1, c.MaxCQE < c.MaxWR:
		return bad("MaxCQE", c.MaxCQE)
	case c.MaxWR < 1:
		return bad("MaxWR", c.MaxWR)
	case c.MaxSGE < 1:
		return bad("MaxSGE", c.MaxSGE)
	case c.MaxInline < 0:
		return bad("MaxInline", c.MaxInline)
	case c.QPsPerPeer < 1:
		return bad("QPsPerPeer", c.QPsPerPeer)
	case c.SliceSize < 1 || c.SliceSize > 1<<30:
		return bad("SliceSize", c.SliceSize)
	case c.MaxMessage < 256:
		return bad("MaxMessage", c.MaxMessage)
	case c.Device != "" && len(c.Devices) > 0:
		return fmt.Errorf("%w: rdma config: set Device (%q) or Devices (%v), not both", transfer.ErrInvalidArgument, c.Device, c.Devices)
	}
	seen := map[string]bool{}
	for _, d := range c.Devices {
		if d == "" || seen[d] {
			return bad("Devices", c.Devices)
		}
		seen[d] = true
	}
	return nil
}

// deviceNames returns the devices New opens given the devices libibverbs
// lists (avail), and whether they were named (Device, Devices): named
// devices must all open, defaulted ones may be skipped. The default is the
// devices of Matrix that avail lists, in the order topology.Resolve gives
// them, else avail.
func (c *Config) deviceNames(avail []string) (names []string, named bool) {
	switch {
	case c.Device != "":
		return []string{c.Device}, true
	case len(c.Devices) > 0:
		return slices.Clone(c.Devices), true
	case c.Matrix != nil:
		for _, d := range topology.Resolve(c.Matrix)[topology.WildcardLocation][0] {
			if slices.Contains(avail, d) {
				names = append(names, d)
			}
		}
		return names, false
	}
	return slices.Clone(avail), false
}

// mtuEnum maps an MTU in bytes to enum ibv_mtu (IBV_MTU_256 = 1 ...
// IBV_MTU_4096 = 5); 0 for an invalid size.
func mtuEnum(bytes int) int {
	switch bytes {
	case 256:
		return 1
	case 512:
		return 2
	case 1024:
		return 3
	case 2048:
		return 4
	case 4096:
		return 5
	}
	return 0
}
