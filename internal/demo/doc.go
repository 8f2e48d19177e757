// Package demo runs `shardkit demo`: a local cluster of real `shardkit run`
// processes on loopback ports, its status printed until the demo is
// stopped, then the processes stopped with SIGTERM.
//
// It prints commands to try that run as pasted (the binary's full path,
// or `go run` of its package when go run built it), and on a terminal
// redraws in place: each frame fitted to the terminal's size (fitScreen:
// never more rows or columns than it has, smaller parts standing for
// larger ones), so the screen never scrolls and the scrollback does not
// grow.
//
// It owns starting and stopping those processes and showing what they do;
// it reaches them only as any client would (the client package, their
// HTTP ports). It must never be imported by the instance's own code
// (internal/server) and never leaves a process or, unless asked to keep
// it, a file behind.
package demo
