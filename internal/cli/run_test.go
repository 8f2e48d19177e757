package cli

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"

	"github.com/shardkit/shardkit/internal/server"
	"github.com/shardkit/shardkit/internal/supervisor"
	"github.com/shardkit/shardkit/proc"
)

func TestWorkerExit(t *testing.T) {
	t.Parallel()
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	tests := []struct {
		name       string
		ctx        context.Context
		err        error
		requestErr error
		wantNil    bool
		wantCode   int
		wantQuiet  bool
		wantMsg    string
		wantReq    string
	}{
		{name: "clean stop", ctx: context.Background(), err: nil, wantNil: true},
		{name: "cancelled by a signal", ctx: cancelled, err: fmt.Errorf("serve: %w", context.Canceled), wantNil: true},
		{name: "cancelled error without a signal is a crash", ctx: context.Background(), err: context.Canceled, wantCode: 1},
		{name: "rebootstrap", ctx: context.Background(), err: fmt.Errorf("discovery: %w", &server.RebootstrapError{Entrypoint: "join:127.0.0.1:3302"}),
			wantCode: supervisor.ExitRebootstrap, wantQuiet: true, wantReq: "join:127.0.0.1:3302"},
		{name: "rebootstrap request fails", ctx: context.Background(), err: &server.RebootstrapError{Entrypoint: "boot"}, requestErr: supervisor.ErrNotWorker,
			wantCode: 1, wantMsg: "cannot ask the supervisor for a rebootstrap", wantReq: "boot"},
		{name: "expelled", ctx: context.Background(), err: fmt.Errorf("postjoin: %w", server.ErrExpelled),
			wantCode: supervisor.ExitExpelled, wantMsg: "current instance is expelled from the cluster"},
		{name: "refused", ctx: context.Background(), err: &server.RefusedError{Err: errors.New(`cluster_id mismatch: instance has "x", cluster has "y"`)},
			wantCode: supervisor.ExitRefused, wantMsg: `cluster_id mismatch: instance has "x", cluster has "y"`},
		{name: "refused because expelled", ctx: context.Background(), err: &server.RefusedError{Err: server.ErrExpelled},
			wantCode: supervisor.ExitExpelled, wantMsg: "expelled"},
		{name: "other error: crash", ctx: context.Background(), err: errors.New("pebble: disk full"), wantCode: 1, wantMsg: "pebble: disk full"},
		{name: "multi-line error on one line", ctx: context.Background(), err: &server.RefusedError{Err: errors.New("first\nsecond")},
			wantCode: supervisor.ExitRefused, wantMsg: "first; second"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var requested []string
			err := workerExit(tt.ctx, tt.err, func(ep string) error {
				requested = append(requested, ep)
				return tt.requestErr
			})
			if tt.wantNil {
				if err != nil {
					t.Fatalf("got %v, want a clean exit", err)
				}
				return
			}
			var exit *ExitError
			if !errors.As(err, &exit) {
				t.Fatalf("got %v, want an ExitError", err)
			}
			if exit.Code != tt.wantCode || exit.Quiet != tt.wantQuiet {
				t.Errorf("code %d quiet %v, want %d %v", exit.Code, exit.Quiet, tt.wantCode, tt.wantQuiet)
			}
			if !strings.Contains(exit.Error(), tt.wantMsg) || strings.Contains(exit.Error(), "\n") {
				t.Errorf("message %q: want one line containing %q", exit.Error(), tt.wantMsg)
			}
			if tt.wantReq != "" && (len(requested) != 1 || requested[0] != tt.wantReq) {
				t.Errorf("requested %v, want [%s]", requested, tt.wantReq)
			}
			if tt.wantReq == "" && len(requested) != 0 {
				t.Errorf("requested a rebootstrap %v for %v", requested, tt.err)
			}
			if !errors.Is(err, tt.err) {
				var rb *server.RebootstrapError
				if !errors.As(tt.err, &rb) {
					t.Errorf("the cause %v is lost from %v", tt.err, err)
				}
			}
		})
	}
}

// fakeRun records what `shardkit run` hands on.
type fakeRun struct {
	worker      bool
	env         map[string]string
	superCfg    *supervisor.Config
	superCode   int
	superErr    error
	instCfg     *server.InstanceConfig
	instEP      string
	instErr     error
	attachErr   error
	requested   []string
	entrypoint  string
	attachCalls int
}

func (f *fakeRun) deps() runDeps {
	return runDeps{
		lookupEnv: func(k string) (string, bool) { v, ok := f.env[k]; return v, ok },
		readFile:  func(string) ([]byte, error) { return nil, errors.New("no files in this test") },
		args:      func() []string { return []string{"run", "--instance-id", "i1"} },
		isWorker:  func() bool { return f.worker },
		entrypoint: func() string {
			return f.entrypoint
		},
		attachWorker: func() error { f.attachCalls++; return f.attachErr },
		requestRebootstrap: func(ep string) error {
			f.requested = append(f.requested, ep)
			return nil
		},
		supervise: func(_ context.Context, c supervisor.Config) (int, error) {
			f.superCfg = &c
			return f.superCode, f.superErr
		},
		runInstance: func(_ context.Context, c server.InstanceConfig, ep string) error {
			f.instCfg, f.instEP = &c, ep
			return f.instErr
		},
	}
}

func (f *fakeRun) execute(t *testing.T, args ...string) (exit *ExitError, out string, err error) {
	t.Helper()
	root := &cobra.Command{Use: "shardkit", SilenceUsage: true, SilenceErrors: true}
	root.AddCommand(newRunCmdWith(f.deps()))
	var buf bytes.Buffer
	root.SetOut(&buf)
	root.SetErr(&buf)
	root.SetArgs(append([]string{"run"}, args...))
	err = root.ExecuteContext(t.Context())
	if err != nil && !errors.As(err, &exit) {
		t.Fatalf("error %v is not an ExitError", err)
	}
	return exit, buf.String(), err
}

func TestRunParent(t *testing.T) {
	t.Parallel()
	f := &fakeRun{env: map[string]string{"SHARDKIT_DATA_DIR": "/var/lib/sk", "SHARDKIT_SHUTDOWN_TIMEOUT": "5s"}}
	_, _, err := f.execute(t, "--instance-id", "i1")
	if err != nil {
		t.Fatalf("run: %v", err)
	}
	c := f.superCfg
	if c == nil {
		t.Fatal("the supervisor was not started")
	}
	if c.DataDir != "/var/lib/sk" || strings.Join(c.Args, " ") != "run --instance-id i1" || c.StopTimeout != 5*time.Second+stopMargin {
		t.Errorf("supervisor config %+v", *c)
	}
	if f.instCfg != nil || f.attachCalls != 0 {
		t.Error("the parent ran the instance itself")
	}

	// The worker's exit code becomes the parent's, without a second line.
	for _, code := range []int{supervisor.ExitRefused, supervisor.ExitExpelled, 143} {
		f := &fakeRun{superCode: code}
		exit, out, _ := f.execute(t)
		if exit == nil || exit.Code != code || !exit.Quiet {
			t.Errorf("supervisor code %d: exit %+v, want that code, quiet", code, exit)
		}
		// The parent's one line is how the ports are secured (the first
		// line of every run's log); nothing else.
		if lines := strings.Split(strings.TrimSpace(out), "\n"); len(lines) != 1 || !strings.Contains(lines[0], "security: plaintext") {
			t.Errorf("parent printed %q, want only the security line", out)
		}
	}
	f = &fakeRun{superErr: supervisor.ErrUnsafeDataDir}
	if exit, _, _ := f.execute(t); exit == nil || exit.Code != 1 || exit.Quiet || !errors.Is(exit, supervisor.ErrUnsafeDataDir) {
		t.Errorf("supervisor failure: exit %+v, want code 1 with the message", exit)
	}
}

func TestRunWorker(t *testing.T) {
	t.Parallel()
	f := &fakeRun{worker: true, entrypoint: "join:127.0.0.1:3302", env: map[string]string{"SHARDKIT_PEER": "127.0.0.1:3301,127.0.0.1:3302"}}
	exit, _, err := f.execute(t, "--instance-id", "i2", "--listen", "127.0.0.1:3302", "--log-format", "json")
	if err != nil {
		t.Fatalf("run: %v (%+v)", err, exit)
	}
	if f.superCfg != nil {
		t.Error("the worker started a supervisor")
	}
	if f.attachCalls != 1 {
		t.Errorf("AttachWorker called %d times", f.attachCalls)
	}
	c := f.instCfg
	if c == nil {
		t.Fatal("the instance was not run")
	}
	if c.InstanceID != "i2" || c.Advertise != "127.0.0.1:3302" || strings.Join(c.Peers, ",") != "127.0.0.1:3301,127.0.0.1:3302" || c.Logger == nil {
		t.Errorf("instance config %+v", *c)
	}
	if f.instEP != "join:127.0.0.1:3302" {
		t.Errorf("entrypoint %q", f.instEP)
	}

	f = &fakeRun{worker: true, instErr: &server.RebootstrapError{Entrypoint: "boot"}}
	if exit, _, _ := f.execute(t); exit == nil || exit.Code != supervisor.ExitRebootstrap || len(f.requested) != 1 || f.requested[0] != "boot" {
		t.Errorf("rebootstrap: exit %+v, requested %v", exit, f.requested)
	}
	f = &fakeRun{worker: true, attachErr: supervisor.ErrParentGone}
	if exit, _, _ := f.execute(t); exit == nil || exit.Code != 1 || f.instCfg != nil {
		t.Errorf("parent gone: exit %+v, instance run %v", exit, f.instCfg != nil)
	}
}

func TestRunBadConfigExitCodes(t *testing.T) {
	t.Parallel()
	for _, worker := range []bool{false, true} {
		f := &fakeRun{worker: worker}
		exit, _, _ := f.execute(t, "--failure-domain", "dc")
		want := exitBadConfig
		if worker {
			want = supervisor.ExitRefused
		}
		if exit == nil || exit.Code != want || exit.Quiet {
			t.Errorf("worker=%v: exit %+v, want code %d with its message", worker, exit, want)
		}
		if f.superCfg != nil || f.instCfg != nil {
			t.Errorf("worker=%v: something started despite a bad configuration", worker)
		}
	}
}

func TestMainRunBadConfigOneLine(t *testing.T) {
	t.Parallel()
	var out, errOut bytes.Buffer
	code := Main([]string{"run", "--log-level", "loud"}, nil, &out, &errOut)
	if code != exitBadConfig {
		t.Errorf("exit code %d, want %d", code, exitBadConfig)
	}
	got := errOut.String()
	if strings.Count(got, "\n") != 1 || !strings.Contains(got, "--log-level") || !strings.Contains(got, `"loud"`) {
		t.Errorf("stderr %q: want one line naming --log-level and \"loud\"", got)
	}
}

// The procedures of the binary (cmd/shardkit/app) reach the instance.
func TestRunWorkerProcedures(t *testing.T) {
	t.Parallel()
	reg, err := proc.NewRegistry(proc.Builtins()...)
	if err != nil {
		t.Fatal(err)
	}
	f := &fakeRun{worker: true}
	deps := f.deps()
	deps.procedures = reg
	root := &cobra.Command{Use: "shardkit", SilenceUsage: true, SilenceErrors: true}
	root.AddCommand(newRunCmdWith(deps))
	root.SetArgs([]string{"run"})
	if err := root.ExecuteContext(t.Context()); err != nil {
		t.Fatal(err)
	}
	if f.instCfg == nil || f.instCfg.Procedures != reg {
		t.Errorf("the instance got procedures %v, want the binary's registry", f.instCfg)
	}
}
