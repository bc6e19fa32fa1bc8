package pd

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
)

// The side channel between a consumer and a producer worker: one TCP
// connection per transfer; the consumer sends one recvRequest, the
// producer answers one recvReply once the blocks landed (or failed), then
// closes. Each message is a 4-byte big-endian length followed by that many
// bytes of JSON, at most maxMessage.

// maxMessage bounds one side-channel message (a request listing 1M block
// ids is ~8 MiB of JSON).
const maxMessage = 16 << 20

// wireVersion is the side-channel protocol version; a producer refuses
// another.
const wireVersion = 1

// wireRegion is a consumer region as the producer needs it.
type wireRegion struct {
	Base       uint64 `json:"base"`
	BlockBytes uint64 `json:"block_bytes"`
	NumBlocks  uint64 `json:"num_blocks"`
}

// recvRequest is what a consumer sends (upstream's msgpack message: the
// consumer's address, TP rank/size, per-region base addresses and block
// lengths, and its block ids per transfer id).
type recvRequest struct {
	Version        int          `json:"version"`
	TransferID     string       `json:"transfer_id"`
	RemoteEngineID string       `json:"remote_engine_id"` // the producer engine the consumer wants
	EngineID       string       `json:"engine_id"`        // the consumer's engine id (logs)
	Segment        string       `json:"segment"`          // consumer transfer engine segment, "host:port"
	TPRank         int          `json:"tp_rank"`
	TPSize         int          `json:"tp_size"`
	Regions        []wireRegion `json:"regions"`
	BlockIDs       []int        `json:"block_ids"`
	// BudgetMS is how long, from receipt, the consumer will wait for the
	// reply; the producer starts no write after it (minus a margin).
	BudgetMS int64 `json:"budget_ms"`
}

// Reply codes: the sentinel a failure maps to on the consumer.
const (
	codeInvalid     = "invalid"
	codeUnsupported = "unsupported"
	codeShape       = "shape"
	codeDropped     = "dropped"
	codeTimeout     = "timeout"
	codeTransfer    = "transfer"
	codeClosed      = "closed"
)

// recvReply is the producer's answer (upstream FINISH / ERROR with
// err_msg).
type recvReply struct {
	Status string `json:"status"` // "ok" or "error"
	Code   string `json:"code,omitempty"`
	Error  string `json:"error,omitempty"`
}

// replyFor builds the reply for err (nil: ok).
func replyFor(err error) recvReply {
	if err == nil {
		return recvReply{Status: "ok"}
	}
	code := codeTransfer
	for _, m := range codeTable {
		if errors.Is(err, m.err) {
			code = m.code
			break
		}
	}
	return recvReply{Status: "error", Code: code, Error: err.Error()}
}

// codeTable maps sentinels to reply codes, in matching order.
var codeTable = []struct {
	code string
	err  error
}{
	{codeUnsupported, ErrUnsupported},
	{codeShape, ErrShapeMismatch},
	{codeInvalid, ErrInvalidArgument},
	{codeDropped, ErrDropped},
	{codeTimeout, ErrTimeout},
	{codeClosed, ErrClosed},
	{codeTransfer, ErrTransfer},
}

// err rebuilds the producer's error on the consumer (nil for ok).
func (r recvReply) err() error {
	if r.Status == "ok" {
		return nil
	}
	sentinel := ErrTransfer
	for _, m := range codeTable {
		if m.code == r.Code {
			sentinel = m.err
		}
	}
	msg := r.Error
	// The producer's message already names the sentinel; keep one copy.
	msg = strings.TrimPrefix(msg, sentinel.Error()+": ")
	return fmt.Errorf("%w: producer: %s", sentinel, msg)
}

// writeMessage writes v as one length-prefixed JSON message.
func writeMessage(w io.Writer, v any) error {
	body, err := json.Marshal(v)
	if err != nil {
		return err
	}
	if len(body) > maxMessage {
		return fmt.Errorf("%w: side-channel message of %d bytes exceeds %d", ErrInvalidArgument, len(body), maxMessage)
	}
	buf := make([]byte, 4+len(body))
	binary.BigEndian.PutUint32(buf, uint32(len(body)))
	copy(buf[4:], body)
	_, err = w.Write(buf)
	return err
}

// readMessage reads one length-prefixed JSON message into v. A length over
// maxMessage is refused before the body is read.
func readMessage(r io.Reader, v any) error {
	var hdr [4]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return err
	}
	n := binary.BigEndian.Uint32(hdr[:])
	if n > maxMessage {
		return fmt.Errorf("%w: side-channel message of %d bytes exceeds %d", ErrInvalidArgument, n, maxMessage)
	}
	body := make([]byte, n)
	if _, err := io.ReadFull(r, body); err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return err
	}
	if err := json.Unmarshal(body, v); err != nil {
		return fmt.Errorf("%w: side-channel message: %v", ErrInvalidArgument, err)
	}
	return nil
}
