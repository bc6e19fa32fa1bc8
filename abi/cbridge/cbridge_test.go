package cbridge

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"runtime"
	"strings"
	"syscall"
	"testing"

	"github.com/mooncake-go/mooncake/core/memory"
	"github.com/mooncake-go/mooncake/core/metadata"
	"github.com/mooncake-go/mooncake/core/store"
	"github.com/mooncake-go/mooncake/core/transfer"
)

func TestCodeOf(t *testing.T) {
	wrap := func(err error) error { return fmt.Errorf("op on %q: %w", "obj", err) }
	for _, c := range []struct {
		err  error
		want Code
	}{
		{nil, OK},
		{wrap(ErrInvalidArgument), InvalidArgument},
		{wrap(ErrInvalidHandle), InvalidHandle},
		{wrap(ErrInternal), Internal},
		{wrap(transfer.ErrInvalidArgument), InvalidArgument},
		{wrap(transfer.ErrTooManyRequests), TooManyRequests},
		{wrap(transfer.ErrAddressNotRegistered), AddressNotRegistered},
		{wrap(transfer.ErrRejected), AddressNotRegistered},
		{wrap(transfer.ErrBatchBusy), BatchBusy},
		{wrap(transfer.ErrAddressOverlapped), AddressOverlapped},
		{wrap(transfer.ErrInvalidBatch), InvalidHandle},
		{wrap(transfer.ErrSegmentNotFound), NotFound},
		{wrap(transfer.ErrUnsupported), Unsupported},
		{wrap(transfer.ErrClosed), Closed},
		{wrap(metadata.ErrInvalidConnString), InvalidArgument},
		{fmt.Errorf("%w: %w", ErrMetadata, metadata.ErrNotFound), Metadata},
		{fmt.Errorf("%w: %w", ErrMetadata, context.DeadlineExceeded), Metadata}, // the service timed out: a metadata failure
		{wrap(context.DeadlineExceeded), Timeout},
		{wrap(&net.OpError{Op: "listen", Err: &net.DNSError{Err: "no such host", Name: "x"}}), DNS},
		{wrap(&net.OpError{Op: "listen", Err: syscall.EADDRINUSE}), Socket},
		{wrap(syscall.ENOMEM), Memory},
		{errors.New("something else"), Internal},
		// Pool errors: upstream's store value, or its replacement.
		{wrap(store.Errorf(store.ObjectNotFound, "key %q", "k")), StoreObjectNotFound},
		{wrap(store.ErrLeaseExpired), StoreLeaseExpired},
		{store.ErrBufferOverflow, StoreBufferOverflow},
		{store.ErrInvalidKey, StoreInvalidKey},
		{store.ErrRPCFail, StoreRPCFail},
		{store.ErrInternal, Internal},
		{store.ErrSegmentNotFound, StoreSegmentNotFound},
		{store.ErrNoAvailableHandle, StoreNoAvailableHandle},
		{&store.Error{Code: store.NotSupported}, Unsupported},
		{&store.Error{Code: store.UnavailableInCurrentMode}, Unsupported},
		{&store.Error{Code: -12345}, Internal},
	} {
		if got := CodeOf(c.err); got != c.want {
			t.Errorf("CodeOf(%v) = %d, want %d", c.err, got, c.want)
		}
	}
}

// TestCodesMirrorUpstream pins the values of upstream TE's include/error.h
// (spec 1.12) and mooncake-go's own codes, which the header defines.
func TestCodesMirrorUpstream(t *testing.T) {
	for c, want := range map[Code]int32{
		OK: 0, InvalidArgument: -1, TooManyRequests: -2, AddressNotRegistered: -3, BatchBusy: -4,
		DeviceNotFound: -6, AddressOverlapped: -7, DNS: -101, Socket: -102, MalformedJSON: -103,
		RejectHandshake: -104, Metadata: -200, Endpoint: -201, Context: -202, NUMA: -300,
		Clock: -301, Memory: -302, Unsupported: -303, Internal: -1000, InvalidHandle: -1001,
		NotFound: -1002, Closed: -1003, Timeout: -1004,
	} {
		if int32(c) != want {
			t.Errorf("code %d, want %d", c, want)
		}
	}
	// Store codes: upstream's ErrorCode values (store.h), except those a
	// common code has.
	for c, want := range map[Code]int32{
		StoreBufferOverflow: -10, StoreInvalidKey: -400, StoreWriteFail: -500, StoreInvalidParams: -600,
		StoreIllegalClient: -601, StoreInvalidWrite: -700, StoreInvalidRead: -701, StoreInvalidReplica: -702,
		StoreReplicaIsNotReady: -703, StoreObjectNotFound: -704, StoreObjectAlreadyExists: -705,
		StoreObjectHasLease: -706, StoreLeaseExpired: -707, StoreTransferFail: -800, StoreRPCFail: -900,
		StoreRPCTimeout: -901, StoreSegmentNotFound: -1101, StoreSegmentAlreadyExists: -1102,
		StoreClientNotFound: -1103, StoreNoAvailableHandle: -1200,
	} {
		if int32(c) != want {
			t.Errorf("store code %d, want %d", c, want)
		}
	}
	// Every upstream store code maps to itself or to its replacement, and
	// no store code collides with a common one.
	common := map[Code]bool{}
	for _, c := range []Code{InvalidArgument, TooManyRequests, AddressNotRegistered, BatchBusy, DeviceNotFound,
		AddressOverlapped, DNS, Socket, MalformedJSON, RejectHandshake, Metadata, Endpoint, Context, NUMA, Clock,
		Memory, Unsupported, Internal, InvalidHandle, NotFound, Closed, Timeout} {
		common[c] = true
	}
	for sc := range storeValues {
		if common[sc] {
			t.Errorf("store code %d collides with a common code", sc)
		}
	}
	for _, up := range []store.ErrorCode{store.InternalError, store.BufferOverflow, store.SegmentNotFound,
		store.SegmentAlreadyExists, store.ClientNotFound, store.NoAvailableHandle, store.InvalidKey, store.WriteFail,
		store.InvalidParams, store.IllegalClient, store.InvalidWrite, store.InvalidRead, store.InvalidReplica,
		store.ReplicaIsNotReady, store.ObjectNotFound, store.ObjectAlreadyExists, store.ObjectHasLease,
		store.LeaseExpired, store.TransferFail, store.RPCFail, store.RPCTimeout, store.UnavailableInCurrentMode,
		store.NotSupported} {
		got := CodeOf(&store.Error{Code: up})
		if _, replaced := storeCodes[up]; !replaced && int32(got) != int32(up) {
			t.Errorf("%s (%d) maps to %d, want its own value", up, int32(up), got)
		}
		if got == Internal && up != store.InternalError {
			t.Errorf("%s maps to Internal", up)
		}
	}
	if ABIVersion != 1<<16|1 {
		t.Errorf("ABIVersion = %#x, want 1.1", ABIVersion)
	}
}

func TestHandles(t *testing.T) {
	tab := NewTable()
	type a struct{ n int }
	type b struct{ s string }
	ha, hb := tab.Add(&a{1}), tab.Add(&b{"x"})
	if ha == 0 || hb == 0 || ha == hb {
		t.Fatalf("handles %d, %d", ha, hb)
	}
	if v, err := Lookup[*a](tab, ha, "a"); err != nil || v.n != 1 {
		t.Fatalf("Lookup = %v, %v", v, err)
	}
	for _, c := range []struct {
		name string
		h    Handle
		want error
	}{
		{"NULL", 0, ErrInvalidArgument},
		{"unknown", 9999, ErrInvalidHandle},
		{"wrong kind", hb, ErrInvalidHandle},
	} {
		if _, err := Lookup[*a](tab, c.h, "a"); !errors.Is(err, c.want) {
			t.Errorf("%s: Lookup err = %v, want %v", c.name, err, c.want)
		}
		if _, err := Take[*a](tab, c.h, "a"); !errors.Is(err, c.want) {
			t.Errorf("%s: Take err = %v, want %v", c.name, err, c.want)
		}
	}
	if tab.Len() != 2 {
		t.Fatalf("Len = %d after failed takes, want 2", tab.Len())
	}
	if _, err := Take[*a](tab, ha, "a"); err != nil {
		t.Fatal(err)
	}
	if _, err := Take[*a](tab, ha, "a"); !errors.Is(err, ErrInvalidHandle) {
		t.Fatalf("second Take err = %v", err)
	}
	if _, err := Lookup[*a](tab, ha, "a"); !errors.Is(err, ErrInvalidHandle) {
		t.Fatalf("Lookup after Take err = %v", err)
	}
	if h := tab.Add(&a{2}); h == ha {
		t.Fatal("a released handle was reused")
	}
}

func TestHandlesConcurrentTake(t *testing.T) {
	tab := NewTable()
	h := tab.Add(new(int))
	const n = 8
	won := make(chan bool, n)
	for range n {
		go func() {
			_, err := Take[*int](tab, h, "x")
			won <- err == nil
		}()
	}
	wins := 0
	for range n {
		if <-won {
			wins++
		}
	}
	if wins != 1 {
		t.Fatalf("%d concurrent Takes succeeded, want 1", wins)
	}
}

func TestCheckRange(t *testing.T) {
	for _, c := range []struct {
		name    string
		addr, n uintptr
		ok      bool
	}{
		{"ok", 1 << 20, 4096, true},
		{"NULL", 0, 4096, false},
		{"zero page", 4095, 1, false},
		{"first valid", MinAddr, 1, true},
		{"zero length", 1 << 20, 0, false},
		{"ends at top", math.MaxUint64 - 4095, 4096, true},
		{"wraps", math.MaxUint64 - 4095, 4097, false},
		{"over MaxInt", 1 << 20, math.MaxInt + 1, false},
	} {
		err := CheckRange("buf", c.addr, c.n)
		if (err == nil) != c.ok || (err != nil && !errors.Is(err, ErrInvalidArgument)) {
			t.Errorf("%s: CheckRange(%#x, %d) = %v, want ok=%v", c.name, c.addr, c.n, err, c.ok)
		}
	}
}

func TestForeignBytes(t *testing.T) {
	r, err := memory.Map(8192)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	r.Bytes()[100] = 42
	b, err := ForeignBytes("buf", uintptr(r.Addr()), 8192)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) != 8192 || b[100] != 42 || memory.AddrOf(b) != r.Addr() {
		t.Fatalf("slice len %d, b[100] %d, addr %#x (want %#x)", len(b), b[100], memory.AddrOf(b), r.Addr())
	}
	b[200] = 7
	if r.Bytes()[200] != 7 {
		t.Fatal("slice does not alias the memory")
	}
	if _, err := ForeignBytes("buf", 0, 1); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("NULL: %v", err)
	}
}

func TestSlice(t *testing.T) {
	arr := []uint64{1, 2, 3}
	s, err := Slice("arr", &arr[0], 3)
	if err != nil || len(s) != 3 || s[2] != 3 {
		t.Fatalf("Slice = %v, %v", s, err)
	}
	if _, err := Slice[uint64]("arr", nil, 3); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("NULL: %v", err)
	}
	if _, err := Slice("arr", &arr[0], 0); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("zero: %v", err)
	}
	if _, err := Slice("arr", &arr[0], math.MaxUint64/8); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("overflow: %v", err)
	}
}

// onThread runs f on a goroutine locked to a fresh OS thread (the thread
// exits with it, so its last error cannot leak into another test).
func onThread(f func()) {
	done := make(chan struct{})
	go func() {
		runtime.LockOSThread()
		defer close(done)
		f()
	}()
	<-done
}

func TestLastError(t *testing.T) {
	onThread(func() {
		if got := LastError(); got != "" {
			t.Errorf("fresh thread: %q", got)
		}
		if rc := Fail("mc_x", fmt.Errorf("%w: engine is NULL", ErrInvalidArgument)); rc != int32(InvalidArgument) {
			t.Errorf("Fail = %d", rc)
		}
		if got := LastError(); got != "mc_x: invalid argument: engine is NULL" {
			t.Errorf("after Fail: %q", got)
		}
		errMine := errors.New("adapter: bad config")
		mine := []Sentinel{{Err: errMine, Code: -3100}}
		if rc := FailAs("mc_y", fmt.Errorf("%w: key k", errMine), mine); rc != -3100 || LastError() != "mc_y: adapter: bad config: key k" {
			t.Errorf("FailAs(sentinel) = %d, %q", rc, LastError())
		}
		if rc := FailAs("mc_y", fmt.Errorf("%w: x", ErrInvalidHandle), mine); rc != int32(InvalidHandle) || LastError() != "mc_y: "+ErrInvalidHandle.Error()+": x" {
			t.Errorf("FailAs(other) = %d, %q", rc, LastError())
		}
		if rc := Done("mc_x", nil); rc != 0 || LastError() != "" {
			t.Errorf("Done(nil) = %d, %q", rc, LastError())
		}
		SetError(strings.Repeat("x", 5000))
		got := LastError()
		if len(got) != 1023 || !strings.HasSuffix(got, "...") {
			t.Errorf("long message: %d bytes, suffix %q", len(got), got[len(got)-5:])
		}
		SetError("short")
		if LastError() != "short" {
			t.Errorf("after short: %q", LastError())
		}
		ClearError()
		if LastError() != "" {
			t.Errorf("after ClearError: %q", LastError())
		}
	})
}

func TestLastErrorIsPerThread(t *testing.T) {
	set, check := make(chan struct{}), make(chan struct{})
	go onThread(func() {
		SetError("thread one")
		close(set)
		<-check
	})
	<-set
	onThread(func() {
		if got := LastError(); got != "" {
			t.Errorf("thread two sees %q", got)
		}
	})
	close(check)
}

func TestGuard(t *testing.T) {
	onThread(func() {
		guarded := func() (rc int32) {
			defer Guard(&rc)()
			var m map[string]int
			m["x"] = 1 // a nil-map write panics
			return 0
		}
		if rc := guarded(); rc != int32(Internal) {
			t.Errorf("rc = %d, want Internal", rc)
		}
		if got := LastError(); !strings.Contains(got, "panic") || !strings.Contains(got, "nil map") {
			t.Errorf("last error %q", got)
		}
		calm := func() (rc int32) {
			defer Guard(&rc)()
			return 5
		}
		if rc := calm(); rc != 5 {
			t.Errorf("no panic: rc = %d, want the function's own", rc)
		}
	})
}
