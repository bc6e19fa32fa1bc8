package vllm

import (
	"encoding/json"
	"fmt"

	"github.com/mooncake-go/mooncake/connectors/runtime"
)

// Meta is one engine step's connector metadata (vLLM's
// KVConnectorMetadata): built by the scheduler half (Scheduler.BuildMeta),
// shipped by vLLM to every worker as opaque bytes (JSON), and run by each
// worker (Worker.StartLoad). Hashes travel base64-encoded.
type Meta struct {
	// Plan holds the pool loads and saves and the finished requests
	// (store mode).
	Plan runtime.Plan `json:"plan"`
	// Preempted lists requests preempted since the previous step: workers
	// fence their jobs before vLLM reuses the blocks.
	Preempted []string `json:"preempted,omitempty"`
	// Sends, Drops and Recvs are the P/D hand-offs (pd mode).
	Sends []Send `json:"sends,omitempty"`
	Drops []Drop `json:"drops,omitempty"`
	Recvs []Recv `json:"recvs,omitempty"`
}

// Send tells a producer worker that request ReqID finished prefill and its
// KV in BlockIDs may be sent to the consumer that asks for TransferID.
type Send struct {
	ReqID      string `json:"req_id"`
	TransferID string `json:"transfer_id"`
	BlockIDs   []int  `json:"block_ids"`
}

// Drop tells a producer worker that request ReqID (TransferID) will not
// be sent (aborted, or finished other than by the length cap).
type Drop struct {
	ReqID      string `json:"req_id"`
	TransferID string `json:"transfer_id"`
}

// Recv tells a consumer worker to receive TransferID's KV from the
// producer engine EngineID (found through its bootstrap server
// BootstrapAddr, "http://host:port") into BlockIDs, reporting ReqID in
// finished-receiving when done. Empty BlockIDs only tell the producer to
// free its blocks.
type Recv struct {
	ReqID         string `json:"req_id"`
	TransferID    string `json:"transfer_id"`
	BootstrapAddr string `json:"bootstrap_addr"`
	EngineID      string `json:"engine_id"`
	BlockIDs      []int  `json:"block_ids"`
	// Release marks a receive planned only to tell the producer to free
	// the transfer's blocks (the request finished before it was
	// allocated, so it holds no blocks and vLLM no longer tracks it): the
	// worker sends it but never reports the request finished-receiving
	// (vLLM 0.32 asserts on an id it already freed), as upstream's
	// MooncakeConnector.
	Release bool `json:"release,omitempty"`
}

// Empty reports whether m carries no work.
func (m *Meta) Empty() bool {
	return len(m.Plan.Loads)+len(m.Plan.Saves)+len(m.Plan.Finished)+len(m.Preempted)+len(m.Sends)+len(m.Drops)+len(m.Recvs) == 0
}

// DecodeMeta parses a worker's metadata bytes; empty input is an empty
// Meta. Errors match ErrBadInput.
func DecodeMeta(data []byte) (Meta, error) {
	var m Meta
	if len(data) == 0 {
		return m, nil
	}
	if err := json.Unmarshal(data, &m); err != nil {
		return m, fmt.Errorf("%w: connector metadata: %v", ErrBadInput, err)
	}
	return m, nil
}
