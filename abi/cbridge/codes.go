package cbridge

/*
#cgo CFLAGS: -I${SRCDIR}/../include
#include "mooncake/common.h"
#include "mooncake/store.h"
*/
import "C"

import (
	"context"
	"errors"
	"net"
	"syscall"

	"github.com/mooncake-go/mooncake/core/metadata"
	"github.com/mooncake-go/mooncake/core/metadata/p2pmeta"
	"github.com/mooncake-go/mooncake/core/store"
	"github.com/mooncake-go/mooncake/core/transfer"
)

// Code is an MC_ status code of abi/include/mooncake/common.h. The values
// are taken from the header itself, so Go and C cannot disagree.
type Code int32

// Status codes, as common.h.
const (
	OK                   Code = C.MC_OK
	InvalidArgument      Code = C.MC_ERR_INVALID_ARGUMENT
	TooManyRequests      Code = C.MC_ERR_TOO_MANY_REQUESTS
	AddressNotRegistered Code = C.MC_ERR_ADDRESS_NOT_REGISTERED
	BatchBusy            Code = C.MC_ERR_BATCH_BUSY
	DeviceNotFound       Code = C.MC_ERR_DEVICE_NOT_FOUND
	AddressOverlapped    Code = C.MC_ERR_ADDRESS_OVERLAPPED
	DNS                  Code = C.MC_ERR_DNS
	Socket               Code = C.MC_ERR_SOCKET
	MalformedJSON        Code = C.MC_ERR_MALFORMED_JSON
	RejectHandshake      Code = C.MC_ERR_REJECT_HANDSHAKE
	Metadata             Code = C.MC_ERR_METADATA
	Endpoint             Code = C.MC_ERR_ENDPOINT
	Context              Code = C.MC_ERR_CONTEXT
	NUMA                 Code = C.MC_ERR_NUMA
	Clock                Code = C.MC_ERR_CLOCK
	Memory               Code = C.MC_ERR_MEMORY
	Unsupported          Code = C.MC_ERR_UNSUPPORTED
	Internal             Code = C.MC_ERR_INTERNAL
	InvalidHandle        Code = C.MC_ERR_INVALID_HANDLE
	NotFound             Code = C.MC_ERR_NOT_FOUND
	Closed               Code = C.MC_ERR_CLOSED
	Timeout              Code = C.MC_ERR_TIMEOUT
)

// Store codes, as store.h: upstream Mooncake Store's ErrorCode values,
// except the ones a common.h code already has (see storeCode).
const (
	StoreBufferOverflow       Code = C.MC_STORE_ERR_BUFFER_OVERFLOW
	StoreInvalidKey           Code = C.MC_STORE_ERR_INVALID_KEY
	StoreWriteFail            Code = C.MC_STORE_ERR_WRITE_FAIL
	StoreInvalidParams        Code = C.MC_STORE_ERR_INVALID_PARAMS
	StoreIllegalClient        Code = C.MC_STORE_ERR_ILLEGAL_CLIENT
	StoreInvalidWrite         Code = C.MC_STORE_ERR_INVALID_WRITE
	StoreInvalidRead          Code = C.MC_STORE_ERR_INVALID_READ
	StoreInvalidReplica       Code = C.MC_STORE_ERR_INVALID_REPLICA
	StoreReplicaIsNotReady    Code = C.MC_STORE_ERR_REPLICA_IS_NOT_READY
	StoreObjectNotFound       Code = C.MC_STORE_ERR_OBJECT_NOT_FOUND
	StoreObjectAlreadyExists  Code = C.MC_STORE_ERR_OBJECT_ALREADY_EXISTS
	StoreObjectHasLease       Code = C.MC_STORE_ERR_OBJECT_HAS_LEASE
	StoreLeaseExpired         Code = C.MC_STORE_ERR_LEASE_EXPIRED
	StoreTransferFail         Code = C.MC_STORE_ERR_TRANSFER_FAIL
	StoreRPCFail              Code = C.MC_STORE_ERR_RPC_FAIL
	StoreRPCTimeout           Code = C.MC_STORE_ERR_RPC_TIMEOUT
	StoreSegmentNotFound      Code = C.MC_STORE_ERR_SEGMENT_NOT_FOUND
	StoreSegmentAlreadyExists Code = C.MC_STORE_ERR_SEGMENT_ALREADY_EXISTS
	StoreClientNotFound       Code = C.MC_STORE_ERR_CLIENT_NOT_FOUND
	StoreNoAvailableHandle    Code = C.MC_STORE_ERR_NO_AVAILABLE_HANDLE
)

// storeCodes maps the upstream store codes whose value differs here (store.h):
// the ones a common.h code already has. Any other code of package store is
// returned as its own value.
var storeCodes = map[store.ErrorCode]Code{
	store.InternalError:            Internal,
	store.SegmentNotFound:          StoreSegmentNotFound,
	store.SegmentAlreadyExists:     StoreSegmentAlreadyExists,
	store.ClientNotFound:           StoreClientNotFound,
	store.NoAvailableHandle:        StoreNoAvailableHandle,
	store.UnavailableInCurrentMode: Unsupported,
	store.NotSupported:             Unsupported,
}

// storeValues are the codes of store.h returned as upstream's own value.
var storeValues = map[Code]bool{
	StoreBufferOverflow: true, StoreInvalidKey: true, StoreWriteFail: true, StoreInvalidParams: true,
	StoreIllegalClient: true, StoreInvalidWrite: true, StoreInvalidRead: true, StoreInvalidReplica: true,
	StoreReplicaIsNotReady: true, StoreObjectNotFound: true, StoreObjectAlreadyExists: true,
	StoreObjectHasLease: true, StoreLeaseExpired: true, StoreTransferFail: true, StoreRPCFail: true,
	StoreRPCTimeout: true,
}

// storeCode is the code of a pool error (*store.Error in err's chain), as
// store.h: upstream's value, or its replacement from storeCodes. A code
// store.h does not know is Internal.
func storeCode(err error) (Code, bool) {
	e, ok := errors.AsType[*store.Error](err)
	if !ok {
		return 0, false
	}
	if c, ok := storeCodes[e.Code]; ok {
		return c, true
	}
	if c := Code(e.Code); storeValues[c] {
		return c, true
	}
	return Internal, true
}

// ABIVersion is MC_ABI_VERSION of common.h ((major << 16) | minor).
const ABIVersion uint32 = C.MC_ABI_VERSION_MAJOR<<16 | C.MC_ABI_VERSION_MINOR

// Errors the ABI layer itself raises (wrapped with the argument's name).
var (
	// ErrInvalidArgument: a NULL pointer where one is required, a zero or
	// overflowing length, an out-of-range value (MC_ERR_INVALID_ARGUMENT).
	ErrInvalidArgument = errors.New("invalid argument")
	// ErrInvalidHandle: a handle that is unknown, released or of another
	// kind (MC_ERR_INVALID_HANDLE).
	ErrInvalidHandle = errors.New("invalid handle")
	// ErrMetadata marks a failure of the metadata service; adapters wrap
	// their metadata.Store errors with it (MC_ERR_METADATA).
	ErrMetadata = errors.New("metadata service")
	// ErrInternal: a bug, such as a recovered panic (MC_ERR_INTERNAL).
	ErrInternal = errors.New("internal error")
)

// codeTable maps Go errors to status codes: the first entry that matches
// wins, so more specific errors come first. It is the only place where the
// mapping is decided.
var codeTable = []struct {
	is   error                    // matched with errors.Is, or
	as   func(error) bool         // matched by type, or
	conv func(error) (Code, bool) // matched and converted
	code Code
}{
	// The ABI layer's own sentinels.
	{is: ErrInvalidArgument, code: InvalidArgument},
	{is: ErrInvalidHandle, code: InvalidHandle},
	{is: ErrInternal, code: Internal},
	// Pool errors (core/store) carry upstream's store code (store.h).
	{conv: storeCode},
	// Transfer engine sentinels (core/transfer), as upstream's codes.
	{is: transfer.ErrInvalidBatch, code: InvalidHandle},
	{is: transfer.ErrInvalidArgument, code: InvalidArgument},
	{is: transfer.ErrTooManyRequests, code: TooManyRequests},
	{is: transfer.ErrAddressNotRegistered, code: AddressNotRegistered},
	{is: transfer.ErrRejected, code: AddressNotRegistered}, // the target found the range unregistered
	{is: transfer.ErrBatchBusy, code: BatchBusy},
	{is: transfer.ErrAddressOverlapped, code: AddressOverlapped},
	{is: transfer.ErrSegmentNotFound, code: NotFound},
	{is: transfer.ErrUnsupported, code: Unsupported},
	{is: transfer.ErrClosed, code: Closed},
	// Metadata: a bad connection string is the caller's argument; anything
	// else the service did is a metadata failure.
	{is: metadata.ErrInvalidConnString, code: InvalidArgument},
	{is: ErrMetadata, code: Metadata},
	// Handshake channel (P2P metadata, probes, notifications): a peer that
	// answers with an error or with a malformed frame.
	{is: p2pmeta.ErrRejected, code: RejectHandshake},
	{is: p2pmeta.ErrBadFrame, code: MalformedJSON},
	// Generic causes.
	{is: context.DeadlineExceeded, code: Timeout},
	{as: isDNSError, code: DNS},
	{is: syscall.ENOMEM, code: Memory},
	{as: isNetError, code: Socket},
}

func isDNSError(err error) bool {
	_, ok := errors.AsType[*net.DNSError](err)
	return ok
}

func isNetError(err error) bool {
	if _, ok := errors.AsType[*net.OpError](err); ok {
		return true
	}
	_, ok := errors.AsType[*net.AddrError](err)
	return ok
}

// CodeOf returns the status code for err: OK for nil, the first match in
// the table, or Internal for an error nothing matches.
func CodeOf(err error) Code {
	if err == nil {
		return OK
	}
	for _, e := range codeTable {
		if e.is != nil && errors.Is(err, e.is) {
			return e.code
		}
		if e.as != nil && e.as(err) {
			return e.code
		}
		if e.conv != nil {
			if c, ok := e.conv(err); ok {
				return c
			}
		}
	}
	return Internal
}
