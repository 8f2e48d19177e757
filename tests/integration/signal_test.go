package integration

import (
	"os"
	"os/signal"
	"strings"
	"syscall"
	"testing"
	"time"
)

// hangup sends SIGHUP to the instance's supervisor, or to its whole
// process group (supervisor and worker, as a closing terminal does).
func (inst *instance) hangup(t *testing.T, group bool) {
	t.Helper()
	send := inst.Signal
	if group {
		send = inst.SignalGroup
	}
	if err := send(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
}

// SIGHUP (a closed terminal) used to kill the supervisor and the worker
// without a word: a crash. It now stops the instance gracefully, as
// SIGTERM does, and both processes say so.
func TestSIGHUPStopsGracefully(t *testing.T) {
	if signal.Ignored(syscall.SIGHUP) {
		// The tests run under nohup (or another parent that ignores
		// SIGHUP): the instances would inherit that and, as documented,
		// not take SIGHUP as a stop signal. Caught here, it is back to
		// the default in the processes this test starts.
		ch := make(chan os.Signal, 1)
		signal.Notify(ch, syscall.SIGHUP)
		defer signal.Stop(ch)
	}
	c := newCluster(t, 3)
	c.startAll()
	st := c.waitOnline(3)
	lead := c.leader(st)
	var followers []*instance
	for _, inst := range c.insts {
		if inst != lead {
			followers = append(followers, inst)
		}
	}
	for i, group := range []bool{true, false} {
		inst := followers[i]
		inst.hangup(t, group)
		code := inst.wait(t, 60*time.Second)
		run := inst.LastRun()
		if code != 0 {
			t.Fatalf("SIGHUP (to the process group: %v): exit code %d, want 0 (a graceful stop):\n%s", group, code, run)
		}
		for _, want := range []string{
			`msg="forwarding signal to the worker"`, "signal=hangup", // the supervisor
			`msg="stopping gracefully" why="hangup signal received"`, // the worker
			"shutdown: current grade is Offline",
		} {
			if !strings.Contains(run, want) {
				t.Fatalf("SIGHUP (to the process group: %v): the log does not say %q:\n%s", group, want, run)
			}
		}
		// Once stopped, the worker exits without waiting for its servers'
		// bound: the peers' raft streams end with its transport (the gRPC
		// server's graceful stop used to wait 2 s for them at every stop).
		if strings.Contains(run, "did not stop gracefully in time") {
			t.Fatalf("SIGHUP (to the process group: %v): a server's graceful stop ran into its bound:\n%s", group, run)
		}
		c.waitStatus("the hung-up instance Offline after its shutdown", 30*time.Second, func(s *statusJSON) bool {
			in := s.byAddress(inst.Listen)
			return in != nil && in.CurrentGrade.Variant == "Offline"
		})
		// Back, so that the next one's stop has a quorum to record it.
		inst.start(t)
		c.waitOnline(3)
	}
}

// A whole cluster stopped at once (SIGTERM to every instance together, as
// docs/operations.md says to stop one) no longer waits out its shutdown
// timeout: the last instances found group 0 without a quorum, their
// current grade Offline could never be applied, and each waited the whole
// --shutdown-timeout for it. They now stop waiting once group 0 has had
// no quorum for a few seconds.
func TestAClusterStoppedTogetherDoesNotWaitOutItsShutdownTimeout(t *testing.T) {
	c := newCluster(t, 3)
	c.startAll()
	c.waitOnline(3)
	for _, inst := range c.insts {
		if err := inst.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
	}
	for _, inst := range c.insts {
		if code := inst.wait(t, 60*time.Second); code != 0 {
			t.Errorf("%s exited %d, want 0", inst.Name, code)
		}
	}
	for _, inst := range c.insts {
		b, err := os.ReadFile(inst.Log)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(b), "not applied in time") {
			t.Errorf("%s waited out its shutdown timeout:\n%s", inst.Name, lastLines(string(b), 15))
		}
	}
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}
