//go:build rdma

package rdma_test

import (
	"testing"

	"github.com/mooncake-go/mooncake/core/metadata"
	"github.com/mooncake-go/mooncake/core/metadata/memmeta"
	"github.com/mooncake-go/mooncake/core/transfer"
	"github.com/mooncake-go/mooncake/core/transfer/rdma"
	"github.com/mooncake-go/mooncake/core/transfer/transfertest"
)

// TestConformance runs the transport conformance suite over a real RDMA
// device (both engines on one host, one device). Skipped without a device,
// which is every machine this package was developed on: this is the first
// test to run on RDMA hardware (or an rdma_rxe soft-RoCE device).
func TestConformance(t *testing.T) {
	devs, err := rdma.Available()
	if err != nil {
		t.Skip(err)
	}
	t.Logf("devices: %v", devs)
	newRDMA := func(t testing.TB) transfer.Transport {
		tr, err := rdma.New(rdma.DefaultConfig())
		if err != nil {
			t.Fatal(err)
		}
		return tr
	}
	transfertest.Run(t, func(testing.TB) metadata.Store { return memmeta.New() }, newRDMA)
}
