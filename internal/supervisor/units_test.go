//go:build unix

package supervisor

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestNextBackoff(t *testing.T) {
	t.Parallel()
	const initial, maxDelay = 100 * time.Millisecond, 10 * time.Second
	var got []time.Duration
	b := restartBackoff(initial, maxDelay)
	for range 10 {
		got = append(got, b.Next())
	}
	want := []time.Duration{
		100 * time.Millisecond, 200 * time.Millisecond, 400 * time.Millisecond, 800 * time.Millisecond,
		1600 * time.Millisecond, 3200 * time.Millisecond, 6400 * time.Millisecond,
		10 * time.Second, 10 * time.Second, 10 * time.Second,
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("backoff sequence %v, want %v", got, want)
		}
	}
	b = restartBackoff(time.Minute, time.Second)
	if d := b.Next(); d != time.Second {
		t.Errorf("initial above max: %v, want the max", d)
	}
}

func TestDecodeRequests(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		in      string
		want    string
		wantOK  bool
		wantBad int
	}{
		{"empty", "", "", false, 0},
		{"one", `{"type":"rebootstrap","entrypoint":"boot"}` + "\n", "boot", true, 0},
		{"empty entrypoint", `{"type":"rebootstrap","entrypoint":""}`, "", true, 0},
		{"last wins", `{"type":"rebootstrap","entrypoint":"a"}` + "\n" + `{"type":"rebootstrap","entrypoint":"b"}`, "b", true, 0},
		{"garbage then valid", "xx\n" + `{"type":"rebootstrap","entrypoint":"a"}`, "a", true, 1},
		{"unknown type", `{"type":"reboot","entrypoint":"a"}`, "", false, 1},
		{"unknown field", `{"type":"rebootstrap","entrypoint":"a","wipe":"/"}`, "", false, 1},
		{"two objects on a line", `{"type":"rebootstrap","entrypoint":"a"}{"type":"rebootstrap","entrypoint":"b"}`, "", false, 1},
		{"too long", `{"type":"rebootstrap","entrypoint":"` + strings.Repeat("x", MaxEntrypointLen+1) + `"}`, "", false, 1},
		{"truncated", `{"type":"rebootstrap","entr`, "", false, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, ok, bad := decodeRequests([]byte(tt.in))
			if got != tt.want || ok != tt.wantOK || len(bad) != tt.wantBad {
				t.Errorf("decodeRequests = %q, %v, %v; want %q, %v, %d bad", got, ok, bad, tt.want, tt.wantOK, tt.wantBad)
			}
			for _, e := range bad {
				if !errors.Is(e, ErrBadRequest) {
					t.Errorf("bad-line error %v is not ErrBadRequest", e)
				}
			}
		})
	}
}

func FuzzDecodeRequests(f *testing.F) {
	f.Add([]byte(`{"type":"rebootstrap","entrypoint":"join:127.0.0.1:3301"}` + "\n"))
	f.Add([]byte(`{"type":"rebootstrap","entrypoint":""}`))
	f.Add([]byte("\n\n{}\n"))
	f.Add([]byte(`{"type":"rebootstrap","entrypoint":"\u00ff\ud800"}`))
	f.Add([]byte{0xff, '\n', '{'})
	f.Fuzz(func(t *testing.T, data []byte) {
		ep, ok, _ := decodeRequests(data)
		if !ok {
			if ep != "" {
				t.Fatalf("no request but entrypoint %q", ep)
			}
			return
		}
		if err := checkEntrypoint(ep); err != nil {
			t.Fatalf("accepted an invalid entrypoint: %v", err)
		}
		msg, err := encodeRebootstrap(ep)
		if err != nil {
			t.Fatalf("cannot re-encode an accepted entrypoint: %v", err)
		}
		if len(msg) > 4096 {
			t.Fatalf("request of %d bytes is not one atomic pipe write", len(msg))
		}
		if again, ok, bad := decodeRequests(msg); !ok || again != ep || len(bad) != 0 {
			t.Fatalf("round trip %q -> %q, %v, %v", ep, again, ok, bad)
		}
	})
}

func TestWipeDir(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	data := filepath.Join(root, "data")
	outside := filepath.Join(root, "outside")
	must(t, PrepareDataDir(data))
	must(t, os.MkdirAll(filepath.Join(data, "a", "b"), 0o755))
	must(t, os.WriteFile(filepath.Join(data, "a", "b", "f"), nil, 0o644))
	must(t, os.WriteFile(filepath.Join(data, ".hidden"), nil, 0o644))
	must(t, os.Mkdir(outside, 0o755))
	must(t, os.WriteFile(filepath.Join(outside, "keep"), nil, 0o644))
	must(t, os.Symlink(outside, filepath.Join(data, "link")))

	must(t, WipeDir(data))
	entries, err := os.ReadDir(data)
	if err != nil || len(entries) != 1 || entries[0].Name() != MarkerFile {
		t.Fatalf("after wipe: %v, %v; want only the marker", entries, err)
	}
	if _, err := os.Stat(filepath.Join(outside, "keep")); err != nil {
		t.Errorf("wiped through a symlink: %v", err)
	}
	if err := WipeDir(filepath.Join(root, "missing")); err != nil {
		t.Errorf("wipe of a missing dir: %v, want nil", err)
	}
	// Through a symlink to the data dir: its contents go, the link stays.
	must(t, os.WriteFile(filepath.Join(data, "x"), nil, 0o644))
	alias := filepath.Join(root, "alias")
	must(t, os.Symlink(data, alias))
	must(t, WipeDir(alias))
	if entries, _ := os.ReadDir(data); len(entries) != 1 {
		t.Errorf("wipe through an alias left %v", entries)
	}
	// Without the marker nothing is deleted.
	if err := WipeDir(outside); !errors.Is(err, ErrUnsafeDataDir) {
		t.Errorf("wipe of an unmarked dir: %v, want ErrUnsafeDataDir", err)
	}
	if _, err := os.Stat(filepath.Join(outside, "keep")); err != nil {
		t.Errorf("an unmarked dir was wiped: %v", err)
	}
}

func TestPrepareDataDir(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	rootLink := filepath.Join(root, "slash")
	must(t, os.Symlink("/", rootLink))
	for _, dir := range []string{"", "  ", "/", "/.", "//", rootLink, rootLink + "/."} {
		if err := PrepareDataDir(dir); !errors.Is(err, ErrUnsafeDataDir) {
			t.Errorf("PrepareDataDir(%q) = %v, want ErrUnsafeDataDir", dir, err)
		}
	}
	// A missing dir is created and marked; a marked dir with files is a restart.
	fresh := filepath.Join(root, "a", "fresh")
	must(t, PrepareDataDir(fresh))
	if _, err := os.Stat(filepath.Join(fresh, MarkerFile)); err != nil {
		t.Errorf("new data dir not marked: %v", err)
	}
	must(t, os.WriteFile(filepath.Join(fresh, "db"), nil, 0o644))
	must(t, PrepareDataDir(fresh))
	// An empty dir is marked.
	empty := filepath.Join(root, "empty")
	must(t, os.Mkdir(empty, 0o755))
	must(t, PrepareDataDir(empty))
	if _, err := os.Stat(filepath.Join(empty, MarkerFile)); err != nil {
		t.Errorf("empty data dir not marked: %v", err)
	}
	// A dir with someone else's files is refused and left alone.
	foreign := filepath.Join(root, "foreign")
	must(t, os.Mkdir(foreign, 0o755))
	must(t, os.WriteFile(filepath.Join(foreign, "notes"), nil, 0o644))
	if err := PrepareDataDir(foreign); !errors.Is(err, ErrUnsafeDataDir) || !strings.Contains(err.Error(), "--data-dir") {
		t.Errorf("PrepareDataDir(foreign) = %v, want a refusal pointing at --data-dir", err)
	}
	if entries, _ := os.ReadDir(foreign); len(entries) != 1 {
		t.Errorf("foreign dir changed: %v", entries)
	}
}

func TestPrepareDataDirRefusesHome(t *testing.T) {
	home := t.TempDir()
	t.Setenv("HOME", home)
	if err := PrepareDataDir(home); !errors.Is(err, ErrUnsafeDataDir) || !strings.Contains(err.Error(), "home") {
		t.Errorf("PrepareDataDir(home) = %v, want a refusal naming the home directory", err)
	}
	if _, err := os.Stat(filepath.Join(home, MarkerFile)); err == nil {
		t.Error("home directory marked")
	}
	must(t, PrepareDataDir(filepath.Join(home, "data")))
}

func TestWorkerAPIOutsideWorker(t *testing.T) {
	t.Setenv(EnvWorker, "")
	t.Setenv(EnvEntrypoint, "join:x")
	if IsWorker() {
		t.Error("IsWorker in a plain process")
	}
	if ep := Entrypoint(); ep != "" {
		t.Errorf("Entrypoint outside a worker = %q", ep)
	}
	if err := AttachWorker(); !errors.Is(err, ErrNotWorker) {
		t.Errorf("AttachWorker = %v, want ErrNotWorker", err)
	}
	if err := RequestRebootstrap("boot"); !errors.Is(err, ErrNotWorker) {
		t.Errorf("RequestRebootstrap = %v, want ErrNotWorker", err)
	}
}

func TestAttachWorkerChecks(t *testing.T) {
	t.Setenv(EnvWorker, "1")
	t.Setenv(EnvEntrypoint, "boot")
	if ep := Entrypoint(); ep != "boot" {
		t.Errorf("Entrypoint = %q, want boot", ep)
	}
	t.Setenv(EnvParentPID, "not-a-pid")
	if err := AttachWorker(); !errors.Is(err, ErrNotWorker) {
		t.Errorf("AttachWorker with a bad pid = %v, want ErrNotWorker", err)
	}
	t.Setenv(EnvParentPID, strconv.Itoa(os.Getppid()+1))
	if err := AttachWorker(); !errors.Is(err, ErrParentGone) {
		t.Errorf("AttachWorker under another parent = %v, want ErrParentGone", err)
	}
	// The right parent, but fd 3 is not the pipe it gave.
	t.Setenv(EnvParentPID, strconv.Itoa(os.Getppid()))
	t.Setenv(EnvPipe, "1")
	if err := AttachWorker(); err == nil {
		t.Error("AttachWorker accepted an fd 3 that is not the request pipe")
	}
	if err := RequestRebootstrap("boot"); err == nil {
		t.Error("RequestRebootstrap wrote to an fd 3 that is not the request pipe")
	}
	if err := RequestRebootstrap(strings.Repeat("x", MaxEntrypointLen+1)); !errors.Is(err, ErrBadRequest) {
		t.Errorf("RequestRebootstrap of a huge entrypoint = %v, want ErrBadRequest", err)
	}
}

func TestWorkerEnv(t *testing.T) {
	t.Parallel()
	base := []string{"PATH=/bin", EnvWorker + "=0", EnvEntrypoint + "=old", "SHARDKIT_PEER=a:1", EnvPipe + "=7"}
	env := workerEnv(base, "boot", 42, 99)
	want := map[string]int{"PATH=/bin": 1, "SHARDKIT_PEER=a:1": 1, EnvWorker + "=1": 1, EnvEntrypoint + "=boot": 1, EnvParentPID + "=42": 1, EnvPipe + "=99": 1}
	if len(env) != len(want) {
		t.Fatalf("env %v", env)
	}
	for _, kv := range env {
		if want[kv] != 1 {
			t.Errorf("unexpected %q in %v", kv, env)
		}
	}
}

// How a worker ended, as the parent logs it: the signal's name, not its
// description ("killed by killed").
func TestDescribeNamesTheSignal(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		r    result
		want string
	}{
		{result{signaled: true, signal: syscall.SIGKILL}, "killed by SIGKILL"},
		{result{signaled: true, signal: syscall.SIGSEGV}, "killed by SIGSEGV"},
		{result{signaled: true, signal: syscall.Signal(40)}, "killed by signal 40 ("},
		{result{code: 1}, "code 1"},
	} {
		if got := tc.r.describe(); !strings.HasPrefix(got, tc.want) {
			t.Errorf("describe(%+v) = %q, want %q", tc.r, got, tc.want)
		}
	}
}
