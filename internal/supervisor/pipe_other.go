//go:build !unix

package supervisor

import (
	"errors"
	"os"
)

// The supervisor needs a pipe on an inherited file descriptor: Unix only.
var errUnsupported = errors.New("supervisor: `shardkit run` needs a Unix-like system")

func inode(*os.File) (uint64, error) { return 0, errUnsupported }
func checkRequestPipe() error        { return errUnsupported }
func closeRequestPipeOnExec()        {}
func writeRequest([]byte) error      { return errUnsupported }
