// Package server wires one shardkit instance together: storage, the raft
// host and transport, the cluster services, the HTTP endpoints. It is the
// only package that knows every room; nothing imports it but the CLI.
//
// It must never hold logic of its own beyond wiring, start-up order and
// shutdown order: behaviour lives in the rooms it connects.
package server
