// Package app is the shardkit command line as a library, for building your
// own shardkit binary with your own stored procedures:
//
//	func main() {
//		os.Exit(app.Main(os.Args[1:], myProcedures...))
//	}
//
// The binary is shardkit in full (run, status, space, insert, call, ...);
// the instances it runs (`run`, and the instances `demo` starts) serve
// procs besides the built-in ones (proc.Builtins: count, echo, buckets).
// Every instance of a cluster should run the same binary: a call of a
// procedure that the instance serving it does not have is refused (no
// procedure "x"). A procedure named like a built-in or like another one
// is refused when the binary starts. examples/procedures is a complete
// example; docs/data.md walks through it.
//
// It owns only this entry point; the commands live in internal/cli.
package app

import (
	"os"

	"github.com/shardkit/shardkit/internal/cli"
	"github.com/shardkit/shardkit/proc"
)

// Main runs the shardkit command line on args (without the program name,
// as os.Args[1:]) with the process's stdin, stdout and stderr, and returns
// the exit code for os.Exit.
func Main(args []string, procs ...proc.Procedure) int {
	return cli.Main(args, os.Stdin, os.Stdout, os.Stderr, procs...)
}
