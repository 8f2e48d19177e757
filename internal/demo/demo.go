package demo

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"google.golang.org/grpc/credentials"

	"github.com/shardkit/shardkit/certs"
	"github.com/shardkit/shardkit/client"
	"github.com/shardkit/shardkit/internal/cluster/statusview"
	"github.com/shardkit/shardkit/retry"
	"github.com/shardkit/shardkit/tuple"
)

// Options configures Run.
type Options struct {
	// Instances to start (default 6).
	Instances int
	// ReplicationFactor is the cluster's (default 3: six instances make
	// two replicasets of three).
	ReplicationFactor int
	// Rows is how many rows the sample space gets (0: no sample space).
	Rows int
	// Redraw draws each status table over the last one (for a terminal)
	// instead of printing them one after another.
	Redraw bool
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
		o.Instances = 6
	}
	if o.ReplicationFactor == 0 {
		o.ReplicationFactor = min(3, o.Instances)
	}
	if o.ReplicationFactor < 1 || o.ReplicationFactor > o.Instances {
		return fmt.Errorf("demo: --replication-factor %d: want 1..%d (the number of instances)", o.ReplicationFactor, o.Instances)
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
			"--peer", strings.Join(peers[:min(3, len(peers))], ","), "--data-dir", filepath.Join(o.Dir, name),
			"--shutdown-timeout", "5s", "--init-replication-factor", strconv.Itoa(o.ReplicationFactor)}, secArgs...)...)
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
	var header bytes.Buffer
	writeHeader(&header, o, insts, peers, filepath.Base(exe), scheme, certsDir, secArgs)
	if !o.Redraw {
		_, _ = out.Write(header.Bytes())
	}
	sample := &sampleData{rows: o.Rows}
	if o.Rows > 0 {
		go sample.load(ctx, cl)
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
		var frame bytes.Buffer
		if o.Redraw {
			frame.WriteString("\x1b[H\x1b[2J") // home, clear the screen
			frame.Write(header.Bytes())
		}
		fmt.Fprintf(&frame, "\n--- %s ---\n", time.Now().Format(time.TimeOnly))
		st, err := cl.Status(ctx, false)
		if err != nil {
			fmt.Fprintf(&frame, "no status yet: %v\n", err)
		} else {
			if err := statusview.WriteTable(&frame, statusview.FromProto(st, false)); err != nil {
				return err
			}
			frame.WriteString(bucketsNote + "\n")
		}
		if o.Rows > 0 {
			fmt.Fprintf(&frame, "sample space %s: %s\n", sampleSpace, sample.String())
		}
		if _, err := out.Write(frame.Bytes()); err != nil {
			return err
		}
	}
}

// writeHeader prints where the instances are and the commands to try.
func writeHeader(w io.Writer, o Options, insts []*demoInstance, peers []string, exe, scheme, certsDir string, secArgs []string) {
	rs := o.Instances / o.ReplicationFactor
	fmt.Fprintf(w, "shardkit demo: %d instances, replication factor %d (%d replicasets); data and logs in %s; Ctrl+C to stop\n",
		len(insts), o.ReplicationFactor, rs, o.Dir)
	if o.Insecure {
		fmt.Fprintln(w, "  security: plaintext (--insecure)")
	} else {
		fmt.Fprintf(w, "  security: mutual TLS; certificates (CA, node, client root) in %s; HTTPS needs a client certificate:\n"+
			"    curl --cacert %[1]s/ca.crt --cert %[1]s/client.root.crt --key %[1]s/client.root.key https://%s/api/v1/cluster\n", certsDir, insts[0].http)
	}
	for i, in := range insts {
		fmt.Fprintf(w, "  i%d  gRPC %s  HTTP %s://%s/health/ready  %s://%s/api/v1/cluster  log %s\n",
			i+1, in.listen, scheme, in.http, scheme, in.http, filepath.Join(o.Dir, fmt.Sprintf("i%d.log", i+1)))
	}
	p := strings.Join(peers[:min(3, len(peers))], ",") + strings.Join(append([]string{""}, secArgs...), " ")
	fmt.Fprintf(w, "in another terminal (docs/data.md walks through more):\n")
	fmt.Fprintf(w, "  %s status --peer %s\n", exe, p)
	if o.Rows > 0 {
		fmt.Fprintf(w, "  %s space list --peer %s\n", exe, p)
		fmt.Fprintf(w, "  %s select --peer %s %s '[7, \"o3\"]'\n", exe, p, sampleSpace)
		fmt.Fprintf(w, "  %s insert --peer %s %s '[7, \"pen\", 1.5]'\n", exe, p, sampleSpace)
		fmt.Fprintf(w, "  %s update --peer %s %s '[7, \"o3\"]' '[[\"+\", \"price\", 1]]'\n", exe, p, sampleSpace)
		fmt.Fprintf(w, "  %s space count --peer %s %s\n", exe, p, sampleSpace)
		fmt.Fprintf(w, "  %s map-call --peer %s count '[\"%s\"]'\n", exe, p, sampleSpace)
	}
	fmt.Fprintf(w, "  %s rebalance status --peer %s\n", exe, p)
}

// bucketsNote explains the two bucket columns under each table.
const bucketsNote = "(BUCKETS: what a replicaset holds now; TARGET_BUCKETS: what its weight asks for.\n" +
	" The rebalancer moves buckets toward their targets, a few at a time: `shardkit rebalance status`.)"

// sampleSpace is the demo's space: offers of shops, a shop's offers in
// the shop's bucket (docs/data.md uses it).
const sampleSpace = "offers"

// sampleData creates the sample space and fills it, and says how far it
// got.
type sampleData struct {
	rows   int
	loaded atomic.Int64
	mu     sync.Mutex
	state  string
}

func (d *sampleData) set(format string, args ...any) {
	d.mu.Lock()
	d.state = fmt.Sprintf(format, args...)
	d.mu.Unlock()
}

func (d *sampleData) String() string {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.state == "" {
		return fmt.Sprintf("loading, %d of %d rows", d.loaded.Load(), d.rows)
	}
	return d.state
}

// load waits for the cluster to take DDL, creates the space (if it is
// not there from an earlier run in the same --data-dir) and replaces
// Rows rows into it: shop k/10+1, offer "o<k%10+1>", price k/100.
func (d *sampleData) load(ctx context.Context, cl *client.Client) {
	def := client.SpaceDef{
		Name: sampleSpace,
		Format: tuple.Format{
			{Name: "shop", Type: tuple.TypeUnsigned},
			{Name: "offer", Type: tuple.TypeString},
			{Name: "price", Type: tuple.TypeDouble, Nullable: true},
		},
		PrimaryKey:  []string{"shop", "offer"},
		ShardingKey: 1,
	}
	d.set("waiting for the cluster to form")
	for {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		_, err := cl.CreateSpace(cctx, def, true)
		cancel()
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			return
		}
		d.set("waiting for the cluster to take DDL: %v", err)
		if retry.Sleep(ctx, time.Second) != nil {
			return
		}
	}
	d.set("")
	sp := cl.Space(sampleSpace)
	next := atomic.Int64{}
	var wg sync.WaitGroup
	var retried atomic.Int64
	for range 16 {
		wg.Go(func() {
			for {
				k := next.Add(1) - 1
				if k >= int64(d.rows) || ctx.Err() != nil {
					return
				}
				t := tuple.Tuple{tuple.Uint(uint64(k/10 + 1)), tuple.String(fmt.Sprintf("o%d", k%10+1)), tuple.Double(float64(k) / 100)}
				for {
					cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
					_, err := sp.Replace(cctx, t)
					cancel()
					if err == nil {
						d.loaded.Add(1)
						break
					}
					if ctx.Err() != nil {
						return
					}
					retried.Add(1)
					if retry.Sleep(ctx, 200*time.Millisecond) != nil {
						return
					}
				}
			}
		})
	}
	wg.Wait()
	if ctx.Err() != nil {
		return
	}
	msg := fmt.Sprintf("%d rows (shops 1..%d, offers o1..o10)", d.loaded.Load(), (d.rows+9)/10)
	if n := retried.Load(); n > 0 {
		msg += fmt.Sprintf("; %d writes were retried (while the cluster formed)", n)
	}
	d.set("%s", msg)
}

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
