package topology_test

import (
	"encoding/json"
	"fmt"

	"github.com/mooncake-go/mooncake/core/transfer/topology"
)

// A two-socket host with one HCA per socket and a GPU next to mlx5_0: the
// matrix prefers the HCA on the buffer's own NUMA node, and for the GPU the
// HCA behind the same PCIe bridge.
func ExampleTopology_PriorityMatrix() {
	t := &topology.Topology{
		NUMA: []topology.NUMANode{{ID: 0}, {ID: 1}},
		RDMA: []topology.RDMADevice{
			{Name: "mlx5_0", NUMANode: 0, PCIPath: "devices/pci0000:00/0000:00:01.0/0000:1a:00.0"},
			{Name: "mlx5_1", NUMANode: 1, PCIPath: "devices/pci0000:80/0000:80:01.0/0000:8a:00.0"},
		},
		GPUs: []topology.GPU{{Index: 0, NUMANode: 0, PCIPath: "devices/pci0000:00/0000:00:01.0/0000:1b:00.0"}},
	}
	js, _ := json.Marshal(t.PriorityMatrix()) // map keys are sorted
	fmt.Println(string(js))
	// Output:
	// {"cpu:0":[["mlx5_0"],["mlx5_1"]],"cpu:1":[["mlx5_1"],["mlx5_0"]],"cuda:0":[["mlx5_0"],["mlx5_1"]]}
}
