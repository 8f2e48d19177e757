package meta

import "fmt"

// Code classifies a refusal, so the edge can map it to a gRPC status.
type Code int

// Refusal codes.
const (
	CodeInvalid            Code = iota + 1 // the request itself is wrong
	CodeNotFound                           // no such instance, replicaset or lease
	CodeAlreadyExists                      // a duplicate instance_id
	CodeFailedPrecondition                 // the cluster's state forbids it now
	CodeExpelled                           // the instance is expelled: it must stop
)

// Refusal is a command that was applied but had no effect because it was
// not allowed. Its message says what was wrong.
type Refusal struct {
	Code Code
	Msg  string
}

func (r *Refusal) Error() string { return r.Msg }

func refuse(code Code, format string, args ...any) *Refusal {
	return &Refusal{Code: code, Msg: fmt.Sprintf(format, args...)}
}
