package demo

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"google.golang.org/grpc/credentials"

	"github.com/shardkit/shardkit/certs"
	"github.com/shardkit/shardkit/client"
	"github.com/shardkit/shardkit/internal/cluster/statusview"
)

// Options configures Run.
type Options struct {
	// Instances to start (default 3).
	Instances int
	// Dir keeps the instances' data dirs and logs (default: a new temp
	// dir, removed at the end).
	Dir string
	// Duration stops the demo after this long (0: until ctx ends).
	Duration time.Duration
	// Every is how often the status table is printed (default 2s).
	Every time.Duration
	// Insecure runs the cluster in plaintext; by default the demo makes
	// certificates in Dir/certs and runs it with mutual TLS.
	Insecure bool
}

type demoInstance struct {
	listen, http string
	cmd          *exec.Cmd
	done         chan struct{}
}

// Run starts a local cluster: Instances real `shardkit run` processes
// on loopback ports sharing one --peer list, prints the cluster's status
// table until ctx ends, then stops them with SIGTERM.
func Run(ctx context.Context, o Options, out io.Writer) error {
	if o.Instances == 0 {
		o.Instances = 3
	}
	if o.Every == 0 {
		o.Every = 2 * time.Second
	}
	if o.Dir == "" {
		d, err := os.MkdirTemp("", "shardkit-demo-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(d)
		o.Dir = d
	} else if err := os.MkdirAll(o.Dir, 0o755); err != nil {
		return fmt.Errorf("demo: --data-dir: %w", err)
	}
	if o.Duration > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, o.Duration)
		defer cancel()
	}
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("demo: cannot find the shardkit binary: %w", err)
	}
	var secArgs []string
	var creds credentials.TransportCredentials
	scheme, certsDir := "http", filepath.Join(o.Dir, "certs")
	if !o.Insecure {
		if err := makeCerts(certsDir); err != nil {
			return fmt.Errorf("demo: certificates: %w", err)
		}
		if creds, err = client.LoadCredentials(certsDir, certs.RootUser); err != nil {
			return fmt.Errorf("demo: certificates: %w", err)
		}
		secArgs, scheme = []string{"--certs-dir", certsDir}, "https"
	}
	var insts []*demoInstance
	var peers []string
	for range o.Instances {
		addrs, err := loopbackPorts(2)
		if err != nil {
			return err
		}
		insts = append(insts, &demoInstance{listen: addrs[0], http: addrs[1]})
		peers = append(peers, addrs[0])
	}
	defer stopDemo(insts)
	for i, in := range insts {
		// The instance id names its log and data dir too, so that i2.log is
		// the cluster's i2 (whichever instance bootstraps, and in whatever
		// order the others join).
		name := fmt.Sprintf("i%d", i+1)
		logf, err := os.Create(filepath.Join(o.Dir, name+".log"))
		if err != nil {
			return err
		}
		// A short shutdown timeout: when every instance stops at once, the
		// last ones have no quorum left to record their Offline grade.
		in.cmd = exec.Command(exe, append([]string{"run", "--instance-id", name, "--listen", in.listen, "--http-listen", in.http,
			"--peer", strings.Join(peers[:min(3, len(peers))], ","), "--data-dir", filepath.Join(o.Dir, name)},
			append([]string{"--shutdown-timeout", "5s"}, secArgs...)...)...)
		in.cmd.Stdout, in.cmd.Stderr = logf, logf
		// Their own process group: Ctrl+C reaches the demo, which stops them in order.
		in.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		if err := in.cmd.Start(); err != nil {
			_ = logf.Close()
			return fmt.Errorf("demo: start instance %d: %w", i+1, err)
		}
		in.done = make(chan struct{})
		go func(in *demoInstance, f *os.File) {
			_ = in.cmd.Wait()
			_ = f.Close()
			close(in.done)
		}(in, logf)
	}
	cl, err := client.New(ctx, client.Config{Peers: peers, Timeout: 2 * time.Second, Credentials: creds})
	if err != nil {
		return err
	}
	defer cl.Close()
	fmt.Fprintf(out, "shardkit demo: %d instances on %s; data and logs in %s; Ctrl+C to stop\n", len(insts), strings.Join(peers, " "), o.Dir)
	fmt.Fprintf(out, "  in another terminal: %s status --peer %s%s\n", filepath.Base(exe), strings.Join(peers, ","), strings.Join(append([]string{""}, secArgs...), " "))
	if o.Insecure {
		fmt.Fprintln(out, "  security: plaintext (--insecure)")
	} else {
		fmt.Fprintf(out, "  security: mutual TLS; certificates (CA, node, client root) in %s; HTTPS needs a client certificate:\n"+
			"    curl --cacert %[1]s/ca.crt --cert %[1]s/client.root.crt --key %[1]s/client.root.key https://%s/api/v1/cluster\n", certsDir, insts[0].http)
	}
	for i, in := range insts {
		fmt.Fprintf(out, "  i%d  gRPC %s  HTTP %s://%s/health/ready  %s://%s/api/v1/cluster  log %s\n",
			i+1, in.listen, scheme, in.http, scheme, in.http, filepath.Join(o.Dir, fmt.Sprintf("i%d.log", i+1)))
	}
	tick := time.NewTicker(o.Every)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			fmt.Fprintln(out, "stopping the instances (SIGTERM)...")
			stopDemo(insts)
			fmt.Fprintln(out, "stopped")
			return nil
		case <-tick.C:
		}
		st, err := cl.Status(ctx, false)
		fmt.Fprintf(out, "\n--- %s ---\n", time.Now().Format(time.TimeOnly))
		if err != nil {
			fmt.Fprintf(out, "no status yet: %v\n", err)
			continue
		}
		if err := statusview.WriteTable(out, statusview.FromProto(st, false)); err != nil {
			return err
		}
		fmt.Fprintln(out, bucketsNote)
	}
}

// bucketsNote explains the two bucket columns under each table.
const bucketsNote = "(BUCKETS: what a replicaset holds now; TARGET_BUCKETS: what its weight asks for.\n" +
	" Buckets move to their targets once the data layer's bucket mover lands; until then they stay put.)"

func stopDemo(insts []*demoInstance) {
	for _, in := range insts {
		if in.cmd != nil && in.cmd.Process != nil {
			_ = in.cmd.Process.Signal(syscall.SIGTERM)
		}
	}
	deadline := time.After(60 * time.Second)
	for _, in := range insts {
		if in.done == nil {
			continue
		}
		select {
		case <-in.done:
		case <-deadline:
			_ = syscall.Kill(-in.cmd.Process.Pid, syscall.SIGKILL)
			<-in.done
		}
	}
}

func loopbackPorts(n int) ([]string, error) {
	var out []string
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			_ = l.Close()
		}
	}()
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		ls = append(ls, l)
		out = append(out, l.Addr().String())
	}
	return out, nil
}

// makeCerts makes the demo's CA, a node certificate for the loopback and
// root's client certificate (kept when they are there from an earlier
// demo in the same --data-dir).
func makeCerts(dir string) error {
	if _, err := os.Stat(filepath.Join(dir, certs.CACert)); err == nil {
		return nil
	}
	if err := certs.CreateCA(dir, certs.Options{}); err != nil {
		return err
	}
	if err := certs.CreateNode(dir, []string{"127.0.0.1", "localhost"}, certs.Options{}); err != nil {
		return err
	}
	return certs.CreateClient(dir, certs.RootUser, certs.Options{})
}
