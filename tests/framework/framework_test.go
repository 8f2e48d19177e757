package framework

import (
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"
)

// An Instance runs its binary with `run` and its arguments in a process
// group of its own, appends every start's output to its log after a start
// line, and Term, Wait, KillWorker and Kill reach the processes they say.
// A shell script stands in for shardkit: a supervisor (sh) with one child.
func TestInstanceStartsSignalsAndKills(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("KillWorker reads /proc")
	}
	dir := t.TempDir()
	script := filepath.Join(dir, "fake")
	if err := os.WriteFile(script, []byte(`#!/bin/sh
echo "args: $*"
trap 'echo terminated; exit 3' TERM
while :; do sleep 0.05; done
`), 0o755); err != nil {
		t.Fatal(err)
	}
	inst := &Instance{Name: "n1", Log: filepath.Join(dir, "n1.log"), Args: []string{"--listen", "x"}, Binary: script}
	t.Cleanup(inst.Kill)
	if inst.Running() {
		t.Fatal("running before Start")
	}
	if err := inst.Start("--extra"); err != nil {
		t.Fatal(err)
	}
	if err := inst.Start(); err == nil || !strings.Contains(err.Error(), "n1 is running") {
		t.Fatalf("a second Start: %v, want n1 is running", err)
	}
	waitLog(t, inst, "args: run --listen x --extra")
	if _, err := inst.KillWorker(); err != nil {
		t.Fatalf("KillWorker: %v", err)
	}
	if err := inst.Term(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	if code, err := inst.Wait(time.Second); err != nil || code != 3 {
		t.Fatalf("exit %d, %v; want 3 (the script's SIGTERM trap)", code, err)
	}
	if inst.Running() || !strings.Contains(inst.LastRun(), "terminated") {
		t.Fatalf("after Term: running %v, last run %q", inst.Running(), inst.LastRun())
	}

	if err := inst.Start(); err != nil {
		t.Fatal(err)
	}
	waitLog(t, inst, "args: run --listen x\n")
	if run := inst.LastRun(); !strings.HasPrefix(run, StartMarker+"n1 ") || strings.Contains(run, "terminated") {
		t.Fatalf("the last run is not the second start's: %q", run)
	}
	if err := inst.Stop(); err != nil || !inst.Stopped() {
		t.Fatalf("Stop: %v, stopped %v", err, inst.Stopped())
	}
	inst.Kill()
	if inst.Running() || inst.Stopped() {
		t.Fatal("running or stopped after Kill")
	}
	if strings.Count(inst.LogText(), StartMarker) != 2 {
		t.Fatalf("the log has not two start lines:\n%s", inst.LogText())
	}
}

func waitLog(t *testing.T, inst *Instance, want string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(inst.LastRun(), want) {
		if time.Now().After(deadline) {
			t.Fatalf("the log does not say %q:\n%s", want, inst.LogText())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// FreePorts never hands out an address twice in one process, gives
// ports below the ephemeral range, and holds each reserved against other
// processes (a lock of its file, which another open of it cannot take).
func TestFreePortsNeverRepeats(t *testing.T) {
	from, to := portRange()
	seen := map[string]bool{}
	for range 200 {
		for _, a := range FreePorts(t, 3) {
			if seen[a] {
				t.Fatalf("FreePorts returned %s twice", a)
			}
			seen[a] = true
			_, ps, _ := net.SplitHostPort(a)
			p, err := strconv.Atoi(ps)
			if err != nil || p < from || p >= to {
				t.Fatalf("FreePorts returned %s, outside [%d, %d)", a, from, to)
			}
			if f, ok := reservePort(p); ok {
				_ = f.Close()
				t.Fatalf("port %d, handed out, could be reserved again", p)
			}
		}
	}
}
