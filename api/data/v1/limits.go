package datav1

// MaxCallArgsBytes bounds the encoded arguments of a Call or MapCall (a
// tuple, so the tuple limit: replicaset.MaxTupleBytes). An instance
// refuses larger arguments with InvalidArgument; the Go client refuses
// them before sending. This file is written by hand; the rest of the
// package is generated.
const MaxCallArgsBytes = 1 << 20
