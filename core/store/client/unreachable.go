package client

import (
	"errors"
	"strings"
	"syscall"

	"google.golang.org/grpc/codes"
	grpcstatus "google.golang.org/grpc/status"

	"github.com/mooncake-go/mooncake/core/store"
	"github.com/mooncake-go/mooncake/core/store/ha"
	"github.com/mooncake-go/mooncake/core/tlsconfig"
)

// Telling an operator that the master is not there, in their words rather
// than gRPC's ("rpc error: code = Unavailable desc = connection error:
// desc = "transport: Error while dialing: dial tcp ...: connect:
// connection refused"").

// dialCauses are the dial errors of package net that Unreachable
// recognises in a gRPC status message, most specific first (the HA
// resolver's ha.ErrNoLeader is checked before them).
var dialCauses = []string{
	syscall.ECONNREFUSED.Error(), // connection refused
	syscall.ECONNRESET.Error(),   // connection reset by peer
	syscall.EHOSTUNREACH.Error(), // no route to host
	syscall.ENETUNREACH.Error(),  // network is unreachable
	syscall.ETIMEDOUT.Error(),    // connection timed out
	"no such host",
	"i/o timeout",
}

// Unreachable's causes for a call that got no answer, and for an etcd://
// address whose cluster has no leader.
const (
	deadlineCause = "no answer before the deadline"
	noLeaderCause = "no master leads the cluster (none is registered in etcd)"
)

// Unreachable reports whether err, from any call of this package, says
// the master was not reached at all: the connection failed (gRPC
// Unavailable) or no answer came before the call's deadline (a hung or
// overloaded master, or an etcd:// cluster with no leader). cause is a few
// words for an operator: "connection refused", "no such host", "no master
// leads the cluster ...", "no answer before the deadline", a TLS failure
// with what it means ("error reading server preface: EOF; TLS: the server
// closed the connection at once: does it require TLS? ..."), or the status
// message's last part. A master that answered with an error code (OBJECT_NOT_FOUND, a
// standby's refusal) is not unreachable.
func Unreachable(err error) (cause string, ok bool) {
	var se interface{ GRPCStatus() *grpcstatus.Status }
	if !errors.As(err, &se) {
		return "", false
	}
	st := se.GRPCStatus()
	switch st.Code() {
	case codes.DeadlineExceeded:
		return deadlineCause, true
	case codes.Unavailable:
	default:
		return "", false
	}
	msg, hint, _ := strings.Cut(st.Message(), tlsconfig.HintSep)
	if hint != "" {
		// A TLS mismatch (tlsconfig.DialOptions): the raw cause, then
		// what it means.
		cause = msg
		if i := strings.LastIndex(cause, "desc = "); i >= 0 {
			cause = cause[i+len("desc = "):]
		}
		return strings.Trim(cause, `"`) + "; TLS: " + hint, true
	}
	if strings.Contains(msg, store.UnavailableInCurrentMode.String()) {
		return "", false // a standby answered: it is there, and says who leads
	}
	if strings.Contains(msg, ha.ErrNoLeader.Error()) {
		return noLeaderCause, true
	}
	for _, c := range dialCauses {
		if strings.Contains(msg, c) {
			return c, true
		}
	}
	if i := strings.LastIndex(msg, ": "); i >= 0 {
		msg = msg[i+2:]
	}
	return strings.Trim(msg, `"`), true
}

// MasterError is err as an operator reads it: "cannot reach master ADDR:
// CAUSE" (Unreachable) when the master at addr was not reached, else err's
// message on one line. It is the one wording the CLI's commands and a
// node's log use.
func MasterError(addr string, err error) string {
	if cause, ok := Unreachable(err); ok {
		if _, ha := etcdEndpoints(addr); ha && cause == deadlineCause {
			cause += " (etcd unreachable, or no master leads the cluster)"
		}
		return "cannot reach master " + addr + ": " + cause
	}
	return strings.Join(strings.Fields(err.Error()), " ")
}
