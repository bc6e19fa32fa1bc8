package main

import (
	"encoding/json"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/mooncake-go/mooncake/core/transfer/cuda"
	"github.com/mooncake-go/mooncake/core/transfer/rdma"
	"github.com/mooncake-go/mooncake/core/transfer/topology"
)

func infoCmd() *cobra.Command {
	var jsonOut bool
	c := &cobra.Command{
		Use:   "info",
		Short: "Show this machine's topology (CPU features and copy routine, NUMA nodes, RDMA devices, GPUs) and which transports are available",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			t, err := topology.Discover()
			if err != nil {
				return &exitError{1, "mooncake info: " + err.Error()}
			}
			out := cmd.OutOrStdout()
			rdmaState := "available"
			if devs, err := rdma.Available(); err != nil {
				rdmaState = err.Error()
			} else {
				rdmaState = fmt.Sprintf("available: %v", devs)
			}
			cudaState := "available"
			if rt, err := cuda.Load(); err != nil {
				cudaState = err.Error()
			} else if n, err := rt.DeviceCount(); err != nil {
				cudaState = err.Error()
			} else {
				cudaState = fmt.Sprintf("%s, %d devices", rt.Path(), n)
			}
			if jsonOut {
				return json.NewEncoder(out).Encode(map[string]any{"topology": t, "transports": map[string]string{"tcp": "available", "shm": "available", "rdma": rdmaState, "cuda": cudaState}})
			}
			fmt.Fprint(out, t.String())
			fmt.Fprintf(out, "Transports:\n  tcp: available\n  shm: available (same host)\n  rdma: %s\n  cuda: %s\n", rdmaState, cudaState)
			return nil
		},
	}
	c.Flags().BoolVar(&jsonOut, "json", false, "print JSON")
	return c
}
