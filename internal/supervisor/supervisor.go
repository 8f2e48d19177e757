package supervisor

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Config configures the parent.
type Config struct {
	// Path is the worker's executable; default os.Executable().
	Path string
	// Args are the worker's arguments, without argv[0]; the CLI passes its own.
	Args []string
	// Env is the worker's base environment; default os.Environ(). The
	// supervisor's variables are replaced, never duplicated.
	Env []string
	// DataDir is what a rebootstrap wipes (its contents; the dir stays).
	DataDir string
	// Stdout and Stderr of the worker; default the parent's.
	Stdout, Stderr io.Writer
	// Logger for the parent's own events; default discards.
	Logger *slog.Logger
	// Signals are forwarded to the worker and stop the supervision. Nil:
	// Run subscribes to StopSignals itself for its duration.
	Signals <-chan os.Signal
	// StopTimeout: after the first forwarded signal, a worker still running
	// this much later is killed. 0 waits for it however long it takes.
	StopTimeout time.Duration
	// Restart backoff after a crash: InitialBackoff doubling up to
	// MaxBackoff; a worker that ran ResetAfter or longer resets it.
	InitialBackoff, MaxBackoff, ResetAfter time.Duration
	// QuickRebootstraps: see DefaultQuickRebootstraps.
	QuickRebootstraps int
	// Now is the clock; default time.Now.
	Now func() time.Time
}

func (c Config) withDefaults() (Config, error) {
	if c.Path == "" {
		p, err := os.Executable()
		if err != nil {
			return c, fmt.Errorf("supervisor: find own executable: %w", err)
		}
		c.Path = p
	}
	if c.Env == nil {
		c.Env = os.Environ()
	}
	if c.Stdout == nil {
		c.Stdout = os.Stdout
	}
	if c.Stderr == nil {
		c.Stderr = os.Stderr
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.InitialBackoff <= 0 {
		c.InitialBackoff = DefaultInitialBackoff
	}
	if c.MaxBackoff <= 0 {
		c.MaxBackoff = DefaultMaxBackoff
	}
	if c.ResetAfter <= 0 {
		c.ResetAfter = DefaultResetAfter
	}
	if c.QuickRebootstraps <= 0 {
		c.QuickRebootstraps = DefaultQuickRebootstraps
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	return c, nil
}

// Run supervises workers until one stops for good, and returns the exit
// code the parent should exit with. Cancelling ctx is a stop request like
// SIGTERM. An error means the supervisor itself failed (the worker could
// not be started, or the data dir could not be wiped); no worker is left
// running then.
func Run(ctx context.Context, cfg Config) (int, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return 1, err
	}
	if err := PrepareDataDir(cfg.DataDir); err != nil {
		return 1, err
	}
	sigs := cfg.Signals
	if sigs == nil {
		ch := make(chan os.Signal, 4)
		signal.Notify(ch, StopSignals()...)
		defer signal.Stop(ch)
		sigs = ch
	}
	log := cfg.Logger
	entrypoint := ""
	backoff := restartBackoff(cfg.InitialBackoff, cfg.MaxBackoff) // the crash backoff
	quick := 0                                                    // rebootstraps in a row by short-lived workers
	for {
		if ctx.Err() != nil {
			log.Info("stop requested before the worker was restarted")
			return 0, nil
		}
		started := cfg.Now()
		res, err := runWorker(ctx, cfg, entrypoint, sigs)
		if err != nil {
			return 1, err
		}
		ran := cfg.Now().Sub(started)
		if ran >= cfg.ResetAfter {
			backoff.Reset()
			quick = 0
		}
		if res.stopped {
			log.Info("worker stopped", "pid", res.pid, "exit", res.describe())
			return res.exitCode(), nil
		}
		var wait time.Duration
		switch code := res.code; {
		case !res.signaled && code == 0:
			log.Info("worker exited cleanly", "pid", res.pid)
			return 0, nil
		case !res.signaled && (code == ExitRefused || code == ExitExpelled):
			// The worker printed its one line; the parent adds none.
			log.Debug("worker refused to run; not restarting", "pid", res.pid, "exit", code)
			return code, nil
		case !res.signaled && code == ExitRebootstrap && res.requested:
			log.Info("rebootstrap: wiping the data dir", "pid", res.pid, "data_dir", cfg.DataDir, "entrypoint", res.entrypoint)
			if err := WipeDir(cfg.DataDir); err != nil {
				return 1, err
			}
			entrypoint = res.entrypoint
			quick++
			if quick > cfg.QuickRebootstraps {
				wait = backoff.Next()
			}
		default:
			if code == ExitRebootstrap {
				log.Warn("worker exited with the rebootstrap code but sent no valid request; treating it as a crash", "pid", res.pid)
			}
			wait = backoff.Next()
			log.Warn("worker crashed; restarting", "pid", res.pid, "exit", res.describe(), "ran", ran.Round(time.Millisecond), "backoff", wait)
		}
		if wait > 0 && !sleep(ctx, sigs, wait) {
			log.Info("stop requested while waiting to restart the worker")
			return 0, nil
		}
	}
}

// sleep waits d; false if a stop came first.
func sleep(ctx context.Context, sigs <-chan os.Signal, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	case <-sigs:
		return false
	}
}

// result is how one worker ended.
type result struct {
	pid        int
	code       int // exit code when !signaled
	signaled   bool
	signal     syscall.Signal
	stopped    bool // a stop was forwarded to it
	requested  bool // it sent a valid rebootstrap request
	entrypoint string
}

func (r result) exitCode() int {
	if r.signaled {
		return 128 + int(r.signal)
	}
	return r.code
}

// describe says how the worker ended: "code 1", "killed by SIGKILL".
// (syscall.Signal's String is the description, "killed": it read
// "killed by killed".)
func (r result) describe() string {
	if r.signaled {
		return "killed by " + signalName(r.signal)
	}
	return "code " + strconv.Itoa(r.code)
}

var signalNames = map[syscall.Signal]string{
	syscall.SIGHUP: "SIGHUP", syscall.SIGINT: "SIGINT", syscall.SIGQUIT: "SIGQUIT", syscall.SIGILL: "SIGILL",
	syscall.SIGTRAP: "SIGTRAP", syscall.SIGABRT: "SIGABRT", syscall.SIGBUS: "SIGBUS", syscall.SIGFPE: "SIGFPE",
	syscall.SIGKILL: "SIGKILL", syscall.SIGSEGV: "SIGSEGV", syscall.SIGPIPE: "SIGPIPE", syscall.SIGALRM: "SIGALRM",
	syscall.SIGTERM: "SIGTERM",
}

// signalName is a signal's name, e.g. "SIGKILL"; for one without a known
// name, its number and description.
func signalName(s syscall.Signal) string {
	if n, ok := signalNames[s]; ok {
		return n
	}
	return fmt.Sprintf("signal %d (%s)", int(s), s.String())
}

type started struct {
	pid int
	err error
}

// runWorker starts one worker and waits for it, forwarding stop signals.
func runWorker(ctx context.Context, cfg Config, entrypoint string, sigs <-chan os.Signal) (result, error) {
	log := cfg.Logger
	pr, pw, err := os.Pipe()
	if err != nil {
		return result{}, fmt.Errorf("supervisor: request pipe: %w", err)
	}
	defer pr.Close()
	ino, err := inode(pw)
	if err != nil {
		pw.Close()
		return result{}, err
	}

	cmd := exec.Command(cfg.Path, cfg.Args...)
	cmd.Env = workerEnv(cfg.Env, entrypoint, os.Getpid(), ino)
	cmd.Stdout, cmd.Stderr = cfg.Stdout, cfg.Stderr
	cmd.ExtraFiles = []*os.File{pw}
	cmd.SysProcAttr = workerSysProcAttr()
	cmd.WaitDelay = time.Second // output copiers, if Stdout/Stderr are not files

	startc := make(chan started, 1)
	waitc := make(chan error, 1)
	go func() {
		// Pdeathsig is tied to the forking thread: keep it alive until
		// the worker is gone.
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		if err := cmd.Start(); err != nil {
			startc <- started{err: err}
			return
		}
		startc <- started{pid: cmd.Process.Pid}
		waitc <- cmd.Wait()
	}()
	st := <-startc
	pw.Close() // the worker holds the only write end now
	if st.err != nil {
		return result{}, fmt.Errorf("supervisor: start worker %s: %w", cfg.Path, st.err)
	}
	log.Info("worker started", "pid", st.pid, "entrypoint", entrypoint)

	readc := make(chan []byte, 1)
	go func() {
		b, _ := io.ReadAll(io.LimitReader(pr, maxRequestBytes))
		readc <- b
	}()

	res := result{pid: st.pid}
	done := ctx.Done()
	var kill <-chan time.Time
	var killTimer *time.Timer
	defer func() {
		if killTimer != nil {
			killTimer.Stop()
		}
	}()
	var waitErr error
	stop := func(sig os.Signal) {
		if err := cmd.Process.Signal(sig); err != nil && !errors.Is(err, os.ErrProcessDone) {
			log.Warn("cannot forward signal to the worker", "pid", st.pid, "signal", sig, "err", err)
		}
		if !res.stopped && cfg.StopTimeout > 0 {
			killTimer = time.NewTimer(cfg.StopTimeout)
			kill = killTimer.C
		}
		res.stopped = true
	}
wait:
	for {
		select {
		case sig := <-sigs:
			log.Info("forwarding signal to the worker", "pid", st.pid, "signal", sig)
			stop(sig)
		case <-done:
			done = nil
			log.Info("stop requested; terminating the worker", "pid", st.pid)
			stop(syscall.SIGTERM)
		case <-kill:
			kill = nil
			log.Warn("worker did not stop in time; killing it", "pid", st.pid, "stop_timeout", cfg.StopTimeout)
			if err := cmd.Process.Kill(); err != nil && !errors.Is(err, os.ErrProcessDone) {
				log.Warn("cannot kill the worker", "pid", st.pid, "err", err)
			}
		case waitErr = <-waitc:
			break wait
		}
	}

	// The request, if any, was written before the worker exited. A
	// grandchild that inherited the write end must not block us.
	_ = pr.SetReadDeadline(time.Now().Add(time.Second))
	data := <-readc
	var bad []error
	res.entrypoint, res.requested, bad = decodeRequests(data)
	for _, e := range bad {
		log.Warn("ignoring a message from the worker", "pid", st.pid, "err", e)
	}

	ps := cmd.ProcessState
	if ps == nil {
		return result{}, fmt.Errorf("supervisor: wait for worker %d: %w", st.pid, waitErr)
	}
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		res.signaled, res.signal = true, ws.Signal()
	} else {
		res.code = ps.ExitCode()
	}
	return res, nil
}

// workerEnv is base with the supervisor's variables set anew.
func workerEnv(base []string, entrypoint string, parentPID int, pipeInode uint64) []string {
	ours := []string{EnvWorker, EnvEntrypoint, EnvParentPID, EnvPipe}
	env := make([]string, 0, len(base)+len(ours))
next:
	for _, kv := range base {
		for _, k := range ours {
			if strings.HasPrefix(kv, k+"=") {
				continue next
			}
		}
		env = append(env, kv)
	}
	return append(env,
		EnvWorker+"=1",
		EnvEntrypoint+"="+entrypoint,
		EnvParentPID+"="+strconv.Itoa(parentPID),
		EnvPipe+"="+strconv.FormatUint(pipeInode, 10),
	)
}
