//go:build unix

package supervisor

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The test binary doubles as the worker (and, for tests that kill or
// signal the parent, as the parent): the helper-process pattern.
const (
	envFakeMode  = "SUPERVISOR_TEST_MODE"  // what the fake worker does
	envFakeState = "SUPERVISOR_TEST_STATE" // where it records what happened (outside the data dir)
	envFakeData  = "SUPERVISOR_TEST_DATA"  // the data dir
	envFakeRole  = "SUPERVISOR_TEST_ROLE"  // "parent": run the supervisor
)

// rebootstrapTo is the entrypoint the fake worker asks for.
const rebootstrapTo = "join:127.0.0.1:3302"

// fakeSafety bounds how long a fake worker or parent lives if a test fails
// to stop it.
const fakeSafety = 2 * time.Minute

func TestMain(m *testing.M) {
	switch {
	case IsWorker() && os.Getenv(envFakeMode) != "":
		os.Exit(fakeWorker())
	case os.Getenv(envFakeRole) == "parent":
		os.Exit(fakeParent())
	}
	os.Exit(m.Run())
}

func fakeParent() int {
	code, err := Run(context.Background(), Config{
		DataDir:        os.Getenv(envFakeData),
		Logger:         slog.New(slog.NewTextHandler(os.Stderr, nil)),
		InitialBackoff: time.Millisecond,
		MaxBackoff:     10 * time.Millisecond,
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "fake parent:", err)
		return 1
	}
	return code
}

func fakeWorker() int {
	state := os.Getenv(envFakeState)
	if err := AttachWorker(); err != nil {
		fmt.Fprintln(os.Stderr, "fake worker:", err)
		return 1
	}
	n, err := recordStart(state)
	if err != nil {
		fmt.Fprintln(os.Stderr, "fake worker:", err)
		return 1
	}
	mode := os.Getenv(envFakeMode)
	switch {
	case strings.HasPrefix(mode, "crash:"):
		crashes, _ := strconv.Atoi(strings.TrimPrefix(mode, "crash:"))
		if n <= crashes {
			return 1
		}
		return 0
	case mode == "signal":
		if n == 1 {
			_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
			time.Sleep(fakeSafety)
		}
		return 0
	case mode == "rebootstrap", mode == "bad-request":
		if n == 1 {
			if mode == "rebootstrap" {
				if err := RequestRebootstrap(rebootstrapTo); err != nil {
					fmt.Fprintln(os.Stderr, "fake worker:", err)
					return 1
				}
			}
			return ExitRebootstrap
		}
		return 0
	case mode == "rebootstrap-crash":
		switch n {
		case 1:
			if err := RequestRebootstrap(rebootstrapTo); err != nil {
				return 1
			}
			return ExitRebootstrap
		case 2:
			return 1
		}
		return 0
	case strings.HasPrefix(mode, "rebootstrap-loop:"):
		times, _ := strconv.Atoi(strings.TrimPrefix(mode, "rebootstrap-loop:"))
		if n <= times {
			if err := RequestRebootstrap(fmt.Sprintf("join:%d", n)); err != nil {
				return 1
			}
			return ExitRebootstrap
		}
		return 0
	case mode == "refuse":
		fmt.Fprintln(os.Stderr, `cluster_id mismatch: instance has "x", cluster has "y"`)
		return ExitRefused
	case mode == "expelled":
		return ExitExpelled
	case mode == "term", mode == "ignore-term", mode == "hang":
		sigs := make(chan os.Signal, 1)
		switch mode {
		case "term":
			signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
		case "ignore-term":
			signal.Ignore(syscall.SIGTERM, syscall.SIGINT)
		}
		if err := writeFile(filepath.Join(state, "ready"), strconv.Itoa(os.Getpid())); err != nil {
			return 1
		}
		select {
		case sig := <-sigs:
			if err := writeFile(filepath.Join(state, "got"), sig.String()); err != nil {
				return 1
			}
			return 0
		case <-time.After(fakeSafety):
			return 3
		}
	}
	fmt.Fprintln(os.Stderr, "fake worker: unknown mode", mode)
	return 1
}

// recordStart appends "pid<TAB>entrypoint<TAB>data-file-present" to the
// starts file and returns which start this is (1-based).
func recordStart(state string) (int, error) {
	_, statErr := os.Stat(filepath.Join(os.Getenv(envFakeData), "precious"))
	line := fmt.Sprintf("%d\t%s\t%t\n", os.Getpid(), Entrypoint(), statErr == nil)
	f, err := os.OpenFile(filepath.Join(state, "starts"), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return 0, err
	}
	if _, err := f.WriteString(line); err != nil {
		f.Close()
		return 0, err
	}
	if err := f.Close(); err != nil {
		return 0, err
	}
	starts, err := readStarts(state)
	return len(starts), err
}

type start struct {
	pid         int
	entrypoint  string
	dataPresent bool
}

func readStarts(state string) ([]start, error) {
	b, err := os.ReadFile(filepath.Join(state, "starts"))
	if err != nil {
		return nil, err
	}
	var out []start
	for line := range strings.SplitSeq(strings.TrimSpace(string(b)), "\n") {
		f := strings.Split(line, "\t")
		if len(f) != 3 {
			return nil, fmt.Errorf("bad starts line %q", line)
		}
		pid, err := strconv.Atoi(f[0])
		if err != nil {
			return nil, err
		}
		out = append(out, start{pid: pid, entrypoint: f[1], dataPresent: f[2] == "true"})
	}
	return out, nil
}

// writeFile writes atomically (the test polls for the file).
func writeFile(path, content string) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(content), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}
