package transfer

import (
	"errors"
	"fmt"
)

// Sentinel errors, named after upstream's TE error codes (include/error.h).
// Every error the engine returns wraps one of these; match with errors.Is.
var (
	// ErrInvalidArgument mirrors ERR_INVALID_ARGUMENT (-1).
	ErrInvalidArgument = errors.New("transfer: invalid argument")
	// ErrTooManyRequests mirrors ERR_TOO_MANY_REQUESTS (-2): more requests than the batch capacity.
	ErrTooManyRequests = errors.New("transfer: too many requests for batch")
	// ErrAddressNotRegistered mirrors ERR_ADDRESS_NOT_REGISTERED (-3): a local or remote range outside every registered buffer.
	ErrAddressNotRegistered = errors.New("transfer: address not registered")
	// ErrBatchBusy mirrors ERR_BATCH_BUSY (-4): freeing a batch with requests in flight.
	ErrBatchBusy = errors.New("transfer: batch busy")
	// ErrAddressOverlapped mirrors ERR_ADDRESS_OVERLAPPED (-7): a registration overlapping an existing one.
	ErrAddressOverlapped = errors.New("transfer: address overlapped")
	// ErrSegmentNotFound is returned by OpenSegment when no descriptor exists for the name (upstream: invalid handle).
	ErrSegmentNotFound = errors.New("transfer: segment not found")
	// ErrInvalidBatch is returned for a batch id that was never allocated or was freed.
	ErrInvalidBatch = errors.New("transfer: invalid batch")
	// ErrRejected is returned when the target refused a request (its range
	// is not registered there, or is registered read-only and the request
	// writes it).
	ErrRejected = errors.New("transfer: rejected by target")
	// ErrClosed is returned by calls on a closed engine, transport or peer.
	ErrClosed = errors.New("transfer: closed")
	// ErrUnsupported is returned for a protocol or feature not built or not present ("unsupported: ...").
	ErrUnsupported = errors.New("unsupported")
	// ErrReadOnly: a write into a buffer registered read-only
	// (Engine.RegisterReadOnlyMemory), which peers may read but never
	// write. Ours: upstream has no read-only registration.
	ErrReadOnly = errors.New("transfer: buffer registered read-only")
)

// Opcode is the direction of a request. Values as upstream's C API.
type Opcode uint8

const (
	// Read copies remote -> local (OPCODE_READ = 0).
	Read Opcode = 0
	// Write copies local -> remote (OPCODE_WRITE = 1).
	Write Opcode = 1
)

func (o Opcode) String() string {
	switch o {
	case Read:
		return "READ"
	case Write:
		return "WRITE"
	}
	return fmt.Sprintf("Opcode(%d)", uint8(o))
}

// SegmentID is a process-local handle of an opened segment, as upstream's
// SegmentHandle: LocalSegment (0) is this engine's own segment, peers get ids
// from 1 upward.
type SegmentID int32

// LocalSegment is the id of the engine's own segment (upstream LOCAL_SEGMENT).
const LocalSegment SegmentID = 0

// BatchID is an opaque batch handle (upstream BatchID; INVALID_BATCH is never returned).
type BatchID uint64

// Request is one transfer: Length bytes between the local address Source and
// the address TargetOffset inside segment Target. Mirrors upstream's
// TransferRequest / C struct transfer_request.
//
// A request with Pieces is scatter-gather: its local side is the
// concatenation of the pieces, in order (gathered for a Write, scattered
// for a Read), and its remote side the one contiguous range [TargetOffset,
// +Length), where Length is the pieces' total; Source is then unused. It
// moves a KV block spread over per-layer regions as one request (one task,
// one status) instead of one request per piece. Every piece must lie in a
// buffer registered with this engine.
type Request struct {
	Op           Opcode
	Source       uint64    // local virtual address, inside a buffer registered with this engine
	Target       SegmentID // from OpenSegment, or LocalSegment
	TargetOffset uint64    // virtual address in the target process, inside one of its registered buffers
	Length       uint64    // bytes, > 0
	// Pieces, if not empty, is the request's local side (see above);
	// Submit copies it.
	Pieces []Piece
}

// Piece is one local range of a scatter-gather Request: Length bytes (> 0)
// at the local virtual address Addr.
type Piece struct {
	Addr, Length uint64
}

// Status is a request's state; values as upstream's TransferStatusEnum.
type Status int

const (
	StatusWaiting   Status = 0 // in progress
	StatusPending   Status = 1 // unused, as upstream's classic engine
	StatusInvalid   Status = 2 // unused
	StatusCanceled  Status = 3 // unused
	StatusCompleted Status = 4 // all bytes landed
	StatusTimeout   Status = 5 // unused
	StatusFailed    Status = 6 // failed; TaskStatus.Err says why
)

func (s Status) String() string {
	switch s {
	case StatusWaiting:
		return "WAITING"
	case StatusPending:
		return "PENDING"
	case StatusInvalid:
		return "INVALID"
	case StatusCanceled:
		return "CANCELED"
	case StatusCompleted:
		return "COMPLETED"
	case StatusTimeout:
		return "TIMEOUT"
	case StatusFailed:
		return "FAILED"
	}
	return fmt.Sprintf("Status(%d)", int(s))
}

// TaskStatus is the state of one request of a batch (upstream TransferStatus).
type TaskStatus struct {
	Status           Status
	TransferredBytes uint64 // lower bound of bytes moved; Length once completed
	Err              error  // set when Status is StatusFailed
}
