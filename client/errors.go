package client

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	datav1 "github.com/shardkit/shardkit/api/data/v1"
	"github.com/shardkit/shardkit/tuple"
)

// The kinds of failure. Every error a Client returns wraps one of them
// (test with errors.Is) and is an *Error that also says whether a retry of
// the same call is safe.
var (
	// ErrUnavailable: no instance answered, or none could serve the call
	// now (no leader, no quorum). Nothing was done; a retry is safe.
	ErrUnavailable = errors.New("cluster unavailable")
	// ErrOutcomeUnknown: the call may or may not have taken effect (an
	// instance did not answer in time, or its connection broke, after the
	// request was sent; or a retry failed after an earlier attempt's
	// outcome was unknown). A retry is safe only for a call that is
	// idempotent; Error.Retryable says.
	ErrOutcomeUnknown = errors.New("outcome unknown")
	// ErrInvalid: the request itself is wrong; fix it, do not retry.
	ErrInvalid = errors.New("invalid request")
	// ErrNotFound: what the request names does not exist.
	ErrNotFound = errors.New("not found")
	// ErrAlreadyExists: what the request would create exists.
	ErrAlreadyExists = errors.New("already exists")
	// ErrRefused: the cluster's state forbids the request now (it is
	// understood and valid, but e.g. the instance is not Offline).
	ErrRefused = errors.New("refused")
	// ErrPermissionDenied: the caller may not do this.
	ErrPermissionDenied = errors.New("permission denied")
	// ErrUnauthenticated: the caller's identity was not accepted.
	ErrUnauthenticated = errors.New("unauthenticated")
	// ErrInternal: the instance failed; the outcome is unknown.
	ErrInternal = errors.New("internal error")
	// ErrConditionFailed: a write's if_version condition, or a condition
	// of a check op, did not hold (Error.ActualVersion is the tuple's
	// version, 0 when there is none; Error.Condition and
	// Error.ActualValue say which condition of a check and what the field
	// holds); nothing of the write was applied.
	ErrConditionFailed = errors.New("condition failed")
)

// Error is a failed call.
type Error struct {
	// Op names the call, e.g. "status" or "acquire lease".
	Op string
	// Peer is the instance that gave this answer ("" when none did).
	Peer string
	// Code is the gRPC code of the answer.
	Code codes.Code
	// Msg is the cluster's own account (or the transport's).
	Msg string
	// Retryable reports whether sending the same call again is safe: it
	// was not done, or doing it twice has the effect of once.
	Retryable bool
	// OpIndex is the 1-based operation of a batch the refusal is about (0:
	// not about one).
	OpIndex int
	// ActualVersion is, for ErrConditionFailed, the tuple's version.
	ActualVersion uint64
	// Condition is, for ErrConditionFailed of a check op, which of its
	// field conditions failed (1-based, counting field conditions only;
	// 0: the version condition), and ActualValue the field's value in the
	// tuple (null when there is no tuple).
	Condition   int
	ActualValue tuple.Value

	kind error
}

func (e *Error) Error() string {
	if e.Peer == "" {
		return fmt.Sprintf("%s: %s", e.Op, e.Msg)
	}
	return fmt.Sprintf("%s: peer %s: %s", e.Op, e.Peer, e.Msg)
}

// Unwrap returns the kind (ErrUnavailable, ErrInvalid, ...).
func (e *Error) Unwrap() error { return e.kind }

// GRPCStatus lets status.FromError and status.Code see the answer's code.
func (e *Error) GRPCStatus() *status.Status { return status.New(e.Code, e.Msg) }

// IsRetryable reports whether err says that the same call may be sent
// again safely.
func IsRetryable(err error) bool {
	var e *Error
	return errors.As(err, &e) && e.Retryable
}

func invalidf(format string, args ...any) *Error {
	return &Error{Op: "check", Code: codes.InvalidArgument, Msg: fmt.Sprintf(format, args...), kind: ErrInvalid}
}

// kindOf maps a gRPC code to the kind of failure.
func kindOf(c codes.Code) error {
	switch c {
	case codes.Unavailable, codes.ResourceExhausted, codes.Aborted:
		return ErrUnavailable
	case codes.DeadlineExceeded, codes.Canceled:
		return ErrOutcomeUnknown
	case codes.InvalidArgument, codes.OutOfRange:
		return ErrInvalid
	case codes.NotFound:
		return ErrNotFound
	case codes.AlreadyExists:
		return ErrAlreadyExists
	case codes.FailedPrecondition:
		return ErrRefused
	case codes.PermissionDenied:
		return ErrPermissionDenied
	case codes.Unauthenticated:
		return ErrUnauthenticated
	}
	return ErrInternal
}

// newError wraps a failed attempt. idempotent says whether the call may be
// repeated even when its outcome is unknown.
func newError(op, peer string, err error, idempotent bool) *Error {
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		err = status.FromContextError(err).Err()
	}
	st := status.Convert(err)
	kind := kindOf(st.Code())
	if brokeAfterSending(st) {
		kind = ErrOutcomeUnknown
	}
	msg := st.Message()
	if tooLarge(st) {
		// gRPC's message-size limit: the same call would meet it again.
		kind = ErrInvalid
		msg = "the request or its answer is larger than gRPC carries: " + msg
	}
	retry := errors.Is(kind, ErrUnavailable) || (errors.Is(kind, ErrOutcomeUnknown) || errors.Is(kind, ErrInternal)) && idempotent
	e := &Error{Op: op, Peer: peer, Code: st.Code(), Msg: msg, Retryable: retry, kind: kind}
	for _, d := range st.Details() {
		if r, ok := d.(*datav1.Refusal); ok {
			e.OpIndex = int(r.GetOp()) + 1
			if r.GetCode() == datav1.Refusal_CODE_CONDITION_FAILED {
				e.kind, e.ActualVersion, e.Condition = ErrConditionFailed, r.GetActualVersion(), int(r.GetCondition())
				if t, err := tuple.DecodeTuple(r.GetActualValue()); err == nil && len(t) == 1 {
					e.ActualValue = t[0]
				}
			}
		}
	}
	return e
}

// tooLarge reports whether st is gRPC's own refusal of a message larger
// than its limit (sending or receiving): a refusal that no retry changes.
func tooLarge(st *status.Status) bool {
	return st.Code() == codes.ResourceExhausted && strings.Contains(st.Message(), "message larger than max")
}

// brokeAfterSending reports whether an Unavailable answer is gRPC's own
// report of a connection that broke while the call was under way (the
// request may have reached the instance and been applied), as opposed to
// an instance's refusal (which says what it refused) or a connection that
// could not be made (gRPC's "connection error: ...": nothing was sent).
func brokeAfterSending(st *status.Status) bool {
	if st.Code() != codes.Unavailable || len(st.Details()) > 0 {
		return false
	}
	msg := st.Message()
	if strings.Contains(msg, "connection error:") { // also when a router forwarded the call
		return false
	}
	for _, m := range []string{
		"error reading from server", "transport is closing", "the connection is draining",
		"connection reset", "broken pipe", "RST_STREAM", "EOF", "connection closed",
	} {
		if strings.Contains(msg, m) {
			return true
		}
	}
	return false
}

// outcomeUnknownAfter is the error of a call (a write when write) that
// gave up after an attempt whose outcome is unknown (first): whatever the
// later attempts met (last), that attempt may have been applied. It reads
// "the write's outcome is unknown (<first's account>)" (after a broken
// connection; a timeout's own account as it is), then, when a later
// attempt failed otherwise, "; the retries did not learn it: <last>".
// first's Peer is the instance that attempt went to.
func outcomeUnknownAfter(write bool, first, last *Error) *Error {
	e := *first
	e.kind = ErrOutcomeUnknown
	if first.Code == codes.Unavailable {
		// gRPC's account of a broken connection does not say that the
		// outcome is unknown; a timeout's does ("did not answer within",
		// or the instance's own).
		e.Msg = outcomeUnknown(write, first.Msg)
	}
	if last != nil && last != first {
		e.Msg = fmt.Sprintf("%s; the retries did not learn it: %s", e.Msg, last.Error())
	}
	return &e
}

// outcomeUnknown says that the outcome of a call (a write when write)
// whose attempt failed with msg is unknown, unless msg says so already
// (a replicaset's own "the write's outcome is unknown (...)").
func outcomeUnknown(write bool, msg string) string {
	if strings.HasPrefix(msg, "the write's outcome is unknown") || strings.HasPrefix(msg, "the call's outcome is unknown") {
		return msg
	}
	what := "call"
	if write {
		what = "write"
	}
	return fmt.Sprintf("the %s's outcome is unknown (%s)", what, msg)
}
