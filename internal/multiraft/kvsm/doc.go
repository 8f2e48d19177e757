// Package kvsm is a small replicated key-value state machine for the
// multiraft engine: put, append, get and delete of byte strings, stored in
// the host's Pebble database under a per-group prefix. Tests, benchmarks
// and the demo use it to drive the engine.
//
// It owns the encoding of its commands and its snapshot format. It must
// never be used for product data: the data layer has its own state
// machines.
package kvsm
