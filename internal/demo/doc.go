// Package demo runs `shardkit demo`: a local cluster of real `shardkit run`
// processes on loopback ports, its status printed until the demo is
// stopped, then the processes stopped with SIGTERM.
//
// It owns starting and stopping those processes and showing what they do;
// it reaches them only as any client would (the client package, their
// HTTP ports). It must never be imported by the instance's own code
// (internal/server) and never leaves a process or, unless asked to keep
// it, a file behind.
package demo
