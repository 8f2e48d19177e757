// Package kvsm is a small replicated key-value state machine for the
// multiraft engine: put, append, get and delete of byte strings, stored in
// the host's Pebble database under a per-group prefix ("kv/<group>/", in
// internal/storage's keyspace list). The engine's tests and benchmarks use
// it to drive the engine; no running instance does.
//
// It owns the encoding of its commands and its snapshot format. It must
// never be used for product data: the data layer has its own state
// machines.
package kvsm
