// Package store holds what every part of the KV-cache pool shares: upstream
// Mooncake Store's error codes, and the kinds of mounted segments
// (SegmentKind, ours). The pool itself lives in the subpackages:
// master (object table, placement, leases, eviction; pure logic), server
// (gRPC service around a master), client (master RPC plus the transfer data
// path) and storepb (wire messages).
package store

import (
	"errors"
	"fmt"
)

// ErrorCode is upstream Mooncake's ErrorCode (mooncake-store/include/types.h):
// 0 is OK, failures are negative, and the values are the same so that logs
// and adapters read alike ("error_codes=[-707]").
type ErrorCode int32

// Error codes used by the pool, with upstream's names and values.
const (
	OK                       ErrorCode = 0
	InternalError            ErrorCode = -1
	BufferOverflow           ErrorCode = -10
	SegmentNotFound          ErrorCode = -101
	SegmentAlreadyExists     ErrorCode = -102
	ClientNotFound           ErrorCode = -103
	NoAvailableHandle        ErrorCode = -200
	InvalidKey               ErrorCode = -400
	WriteFail                ErrorCode = -500
	InvalidParams            ErrorCode = -600
	IllegalClient            ErrorCode = -601
	InvalidWrite             ErrorCode = -700
	InvalidRead              ErrorCode = -701
	InvalidReplica           ErrorCode = -702
	ReplicaIsNotReady        ErrorCode = -703
	ObjectNotFound           ErrorCode = -704
	ObjectAlreadyExists      ErrorCode = -705
	ObjectHasLease           ErrorCode = -706
	LeaseExpired             ErrorCode = -707
	ObjectReplicaBusy        ErrorCode = -714
	TransferFail             ErrorCode = -800
	ChecksumMismatch         ErrorCode = -801
	RPCFail                  ErrorCode = -900
	RPCTimeout               ErrorCode = -901
	UnavailableInCurrentMode ErrorCode = -1011
	NotSupported             ErrorCode = -1012
	UnableOffload            ErrorCode = -1300
	TaskNotFound             ErrorCode = -1400
)

var codeNames = map[ErrorCode]string{
	OK: "OK", InternalError: "INTERNAL_ERROR", BufferOverflow: "BUFFER_OVERFLOW",
	SegmentNotFound: "SEGMENT_NOT_FOUND", SegmentAlreadyExists: "SEGMENT_ALREADY_EXISTS",
	ClientNotFound: "CLIENT_NOT_FOUND", NoAvailableHandle: "NO_AVAILABLE_HANDLE",
	InvalidKey: "INVALID_KEY", WriteFail: "WRITE_FAIL", InvalidParams: "INVALID_PARAMS",
	IllegalClient: "ILLEGAL_CLIENT", InvalidWrite: "INVALID_WRITE", InvalidRead: "INVALID_READ",
	InvalidReplica: "INVALID_REPLICA", ReplicaIsNotReady: "REPLICA_IS_NOT_READY",
	ObjectNotFound: "OBJECT_NOT_FOUND", ObjectAlreadyExists: "OBJECT_ALREADY_EXISTS",
	ObjectHasLease: "OBJECT_HAS_LEASE", LeaseExpired: "LEASE_EXPIRED", ObjectReplicaBusy: "OBJECT_REPLICA_BUSY",
	TransferFail: "TRANSFER_FAIL", ChecksumMismatch: "CHECKSUM_MISMATCH",
	RPCFail: "RPC_FAIL", RPCTimeout: "RPC_TIMEOUT",
	UnavailableInCurrentMode: "UNAVAILABLE_IN_CURRENT_MODE", NotSupported: "NOT_SUPPORTED",
	UnableOffload: "UNABLE_OFFLOAD", TaskNotFound: "TASK_NOT_FOUND",
}

// String returns upstream's name of the code, e.g. "OBJECT_NOT_FOUND".
func (c ErrorCode) String() string {
	if n, ok := codeNames[c]; ok {
		return n
	}
	return fmt.Sprintf("ErrorCode(%d)", int32(c))
}

// Error is a pool error: a code plus a message naming the object involved.
// errors.Is(err, ErrObjectNotFound) matches any *Error with the same code.
type Error struct {
	Code ErrorCode
	Msg  string
	// Cause, if set, is the error behind this one (a gRPC status for
	// RPC_FAIL), for errors.As; Msg already includes its text.
	Cause error
}

// Unwrap returns the cause, or nil.
func (e *Error) Unwrap() error { return e.Cause }

func (e *Error) Error() string {
	if e.Msg == "" {
		return fmt.Sprintf("store: %s (%d)", e.Code, int32(e.Code))
	}
	return fmt.Sprintf("store: %s (%d): %s", e.Code, int32(e.Code), e.Msg)
}

// Is matches another *Error by code.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Code == e.Code
}

// Errorf returns an *Error with the code and a formatted message.
func Errorf(code ErrorCode, format string, args ...any) error {
	return &Error{Code: code, Msg: fmt.Sprintf(format, args...)}
}

// CodeOf returns the code of err: OK for nil, the code of a wrapped *Error,
// InternalError for any other error.
func CodeOf(err error) ErrorCode {
	if err == nil {
		return OK
	}
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return InternalError
}

// Sentinels for errors.Is, one per code a caller commonly branches on.
var (
	ErrInvalidParams       = &Error{Code: InvalidParams}
	ErrInvalidKey          = &Error{Code: InvalidKey}
	ErrSegmentNotFound     = &Error{Code: SegmentNotFound}
	ErrSegmentExists       = &Error{Code: SegmentAlreadyExists}
	ErrNoAvailableHandle   = &Error{Code: NoAvailableHandle}
	ErrIllegalClient       = &Error{Code: IllegalClient}
	ErrInvalidWrite        = &Error{Code: InvalidWrite}
	ErrReplicaIsNotReady   = &Error{Code: ReplicaIsNotReady}
	ErrObjectNotFound      = &Error{Code: ObjectNotFound}
	ErrObjectAlreadyExists = &Error{Code: ObjectAlreadyExists}
	ErrObjectHasLease      = &Error{Code: ObjectHasLease}
	ErrLeaseExpired        = &Error{Code: LeaseExpired}
	ErrTransferFail        = &Error{Code: TransferFail}
	ErrBufferOverflow      = &Error{Code: BufferOverflow}
	ErrRPCFail             = &Error{Code: RPCFail}
	ErrInternal            = &Error{Code: InternalError}
	ErrObjectReplicaBusy   = &Error{Code: ObjectReplicaBusy}
	ErrChecksumMismatch    = &Error{Code: ChecksumMismatch}
	ErrUnableOffload       = &Error{Code: UnableOffload}
	ErrTaskNotFound        = &Error{Code: TaskNotFound}
)
