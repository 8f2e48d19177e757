package supervisor

import (
	"os"
	"os/signal"
	"syscall"
)

// StopSignals are the signals that stop shardkit gracefully: SIGINT,
// SIGTERM and SIGHUP (closing the terminal it runs in). A SIGHUP the
// process was started ignoring (nohup) stays ignored: asking for it would
// undo the nohup. The parent forwards each of them to the worker, and the
// worker (which also gets SIGHUP from the terminal itself) stops on them.
func StopSignals() []os.Signal {
	sigs := []os.Signal{syscall.SIGINT, syscall.SIGTERM}
	if !signal.Ignored(syscall.SIGHUP) {
		sigs = append(sigs, syscall.SIGHUP)
	}
	return sigs
}
