package demo

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
	"google.golang.org/grpc/credentials"

	"github.com/shardkit/shardkit/certs"
	"github.com/shardkit/shardkit/client"
	"github.com/shardkit/shardkit/internal/statusview"
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
	// TermSize tells the terminal's width and height in characters, read
	// at each redraw, so that a frame fits it (false, or nil: 80×24).
	TermSize func() (width, height int, ok bool)
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
	// Every port in one call: its listeners are all open at once, so no
	// two instances are given the same port.
	addrs, err := loopbackPorts(2 * o.Instances)
	if err != nil {
		return err
	}
	for i := range o.Instances {
		insts = append(insts, &demoInstance{listen: addrs[2*i], http: addrs[2*i+1]})
		peers = append(peers, addrs[2*i])
	}
	defer stopDemo(insts)
	// Programs run beside the demo (examples/offers --demo DIR) find the
	// cluster here.
	if err := os.WriteFile(filepath.Join(o.Dir, PeersFile), []byte(strings.Join(peers, ",")+"\n"), 0o644); err != nil { //nolint:gosec // addresses, not secrets
		return fmt.Errorf("demo: %w", err)
	}
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
	wd, _ := os.Getwd()
	var pkg, mod string
	if bi, ok := debug.ReadBuildInfo(); ok {
		pkg, mod = bi.Path, bi.Main.Path
	}
	var consolePw string
	if !o.Insecure {
		// The web console of a secure cluster needs a password login: an
		// admin user "admin" with a random password, kept in a file of the
		// demo's dir (never printed: the screen may be shared).
		if consolePw, err = writeConsolePassword(filepath.Join(o.Dir, consolePasswordFile)); err != nil {
			return fmt.Errorf("demo: the console's password: %w", err)
		}
		go createConsoleUser(ctx, cl, consolePw)
	}
	h := newHeader(o, insts, peers, commandPrefix(exe, wd, pkg, mod), scheme, certsDir, secArgs)
	if !o.Redraw {
		h.write(out)
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
			if o.Redraw {
				fmt.Fprintln(out) // below the last frame, which ends without a newline
			}
			fmt.Fprintln(out, "stopping the instances (SIGTERM)...")
			stopDemo(insts)
			fmt.Fprintln(out, "stopped")
			return nil
		case <-tick.C:
		}
		var table bytes.Buffer
		var summary []string
		stamp := fmt.Sprintf("--- %s ---", time.Now().Format(time.TimeOnly))
		st, err := cl.Status(ctx, false)
		if err != nil {
			summary = []string{fmt.Sprintf("no status yet: %v", err)}
			table.WriteString(summary[0] + "\n")
		} else {
			v := statusview.FromProto(st, false)
			if err := statusview.WriteTable(&table, v); err != nil {
				return err
			}
			summary = statusSummary(v)
		}
		var sampleLine string
		if o.Rows > 0 {
			sampleLine = fmt.Sprintf("sample space %s: %s", sampleSpace, sample.String())
		}
		var frame []byte
		if o.Redraw {
			width, height := 80, 24
			if o.TermSize != nil {
				if w, ht, ok := o.TermSize(); ok {
					width, height = w, ht
				}
			}
			// One column to spare: a line that fills its row leaves some
			// terminals about to wrap, and the next newline would then
			// take two rows.
			width--
			blocks := h.blocks(width)
			if err == nil {
				table.WriteString(bucketsNote + "\n")
			}
			blocks = append(blocks, screenBlock{full: append([]string{"", stamp}, strings.Split(strings.TrimSuffix(table.String(), "\n"), "\n")...),
				small: append([]string{stamp}, summary...), shrink: 3})
			if sampleLine != "" {
				blocks = append(blocks, screenBlock{full: []string{sampleLine}, small: []string{sampleLine}, shrink: 5})
			}
			frame = redrawFrame(fitScreen(width, height, blocks))
		} else {
			var b bytes.Buffer
			fmt.Fprintf(&b, "\n%s\n", stamp)
			b.Write(table.Bytes())
			if err == nil {
				b.WriteString(bucketsNote + "\n")
			}
			if sampleLine != "" {
				b.WriteString(sampleLine + "\n")
			}
			frame = b.Bytes()
		}
		if _, err := out.Write(frame); err != nil {
			return err
		}
	}
}

// statusSummary is the status table in two lines, for a small terminal:
// the leader and how many instances are in each grade; each replicaset's
// buckets, held and targeted.
func statusSummary(v statusview.View) []string {
	leader := "none known"
	counts := map[string]int{}
	var grades []string
	for _, in := range v.Instances {
		if v.LeaderRaftID != 0 && in.RaftID == v.LeaderRaftID {
			leader = in.InstanceID
		}
		g := in.CurrentGrade.Variant
		if counts[g] == 0 {
			grades = append(grades, g)
		}
		counts[g]++
	}
	var byGrade []string
	for _, g := range grades {
		byGrade = append(byGrade, fmt.Sprintf("%d %s", counts[g], g))
	}
	first := fmt.Sprintf("cluster %s: leader %s; %d instances: %s", v.ClusterID, leader, len(v.Instances), strings.Join(byGrade, ", "))
	if v.NoQuorum() {
		first += "; " + v.QuorumSummary()
	}
	var rs []string
	for _, r := range v.Replicasets {
		rs = append(rs, fmt.Sprintf("%s %d/%d", r.ReplicasetID, r.BucketCount, r.TargetBucketCount))
	}
	return []string{first, "buckets held/target: " + strings.Join(rs, ", ")}
}

// header says where the instances are and the commands to try, whole
// (before the first table when the demo does not redraw) or fitted to a
// terminal's width (blocks).
type header struct {
	title, titleShort string
	security          []string   // its last line is the curl command, when secure
	curl              []string   // the curl command's words
	dirLine           string     // where the data and logs are, under titleShort
	instances         []string   // a line each, where to reach it and its log
	instancesShort    []string   // the same, narrower (the log's dir on dirLine)
	instancesOne      string     // one line for all
	commands          [][]string // shell words, the first the prefix
}

func newHeader(o Options, insts []*demoInstance, peers []string, prefix []string, scheme, certsDir string, secArgs []string) *header {
	rs := o.Instances / o.ReplicationFactor
	h := &header{
		title: fmt.Sprintf("shardkit demo: %d instances, replication factor %d (%d replicasets); data and logs in %s; Ctrl+C to stop",
			len(insts), o.ReplicationFactor, rs, o.Dir),
		titleShort:   fmt.Sprintf("shardkit demo: %d instances, replication factor %d; Ctrl+C to stop", len(insts), o.ReplicationFactor),
		dirLine:      "  data and logs in " + o.Dir,
		instancesOne: fmt.Sprintf("  instances i1..i%d, their logs i1.log..i%d.log in %s", len(insts), len(insts), o.Dir),
	}
	if o.Insecure {
		h.security = []string{"  security: plaintext (--insecure)", fmt.Sprintf("  web console: http://%s/", insts[0].http)}
	} else {
		h.security = []string{fmt.Sprintf("  web console: https://%s/ as user %s, password in %s (the browser warns: the demo's CA is its own)",
			insts[0].http, consoleUser, filepath.Join(o.Dir, consolePasswordFile)),
			fmt.Sprintf("  security: mutual TLS; certificates (CA, node, client root) in %s; HTTPS needs a client certificate or the console's login:", certsDir)}
		h.curl = []string{"curl", "--cacert", shellQuote(filepath.Join(certsDir, "ca.crt")), "--cert", shellQuote(filepath.Join(certsDir, "client.root.crt")),
			"--key", shellQuote(filepath.Join(certsDir, "client.root.key")), fmt.Sprintf("https://%s/api/v1/cluster", insts[0].http)}
	}
	for i, in := range insts {
		h.instances = append(h.instances, fmt.Sprintf("  i%d  gRPC %s  HTTP %s://%s/health/ready  %s://%s/api/v1/cluster  log %s",
			i+1, in.listen, scheme, in.http, scheme, in.http, filepath.Join(o.Dir, fmt.Sprintf("i%d.log", i+1))))
		h.instancesShort = append(h.instancesShort, fmt.Sprintf("  i%d  gRPC %s  %s %s  log i%d.log", i+1, in.listen, strings.ToUpper(scheme), in.http, i+1))
	}
	flags := []string{"--peer", strings.Join(peers[:min(3, len(peers))], ",")}
	for _, a := range secArgs {
		flags = append(flags, shellQuote(a))
	}
	cmd := func(args ...string) []string {
		return slices.Concat(prefix, args[:1], flags, args[1:])
	}
	h.commands = append(h.commands, slices.Concat(prefix, []string{"status"}, flags))
	if o.Rows > 0 {
		h.commands = append(h.commands,
			slices.Concat(prefix, []string{"space", "list"}, flags),
			cmd("select", sampleSpace, `'[7, "o3"]'`),
			cmd("insert", sampleSpace, `'[7, "pen", 1.5]'`),
			cmd("update", sampleSpace, `'[7, "o3"]'`, `'[["+", "price", 1]]'`),
			slices.Concat(prefix, []string{"space", "count"}, flags, []string{sampleSpace}),
			cmd("map-call", "count", `'["`+sampleSpace+`"]'`))
	}
	h.commands = append(h.commands, slices.Concat(prefix, []string{"rebalance", "status"}, flags))
	return h
}

const tryHead = "in another terminal (docs/data.md walks through more):"

// write prints the whole header, a line per command.
func (h *header) write(w io.Writer) {
	fmt.Fprintln(w, h.title)
	for _, l := range h.security {
		fmt.Fprintln(w, l)
	}
	if h.curl != nil {
		fmt.Fprintln(w, "    "+strings.Join(h.curl, " "))
	}
	for _, l := range h.instances {
		fmt.Fprintln(w, l)
	}
	fmt.Fprintln(w, tryHead)
	for _, c := range h.commands {
		fmt.Fprintln(w, "  "+strings.Join(c, " "))
	}
}

// blocks are the header's parts of a redrawn screen, the commands
// wrapped to width. On a small screen the security lines go first, then
// the instances' lines give way to one, and the commands to the first
// (the status table gives way to its summary between the two).
func (h *header) blocks(width int) []screenBlock {
	security := slices.Clone(h.security)
	if h.curl != nil {
		security = append(security, wrapCommand("    ", h.curl, width)...)
	}
	cmds := []string{tryHead}
	for _, c := range h.commands {
		cmds = append(cmds, wrapCommand("  ", c, width)...)
	}
	first := append([]string{"in another terminal (a larger terminal shows more commands to try):"}, wrapCommand("  ", h.commands[0], width)...)
	return []screenBlock{
		{full: []string{h.titleShort, h.dirLine}, small: []string{h.titleShort}, shrink: 5},
		{full: security, shrink: 0},
		{full: h.instancesShort, small: []string{h.instancesOne}, shrink: 2},
		{full: cmds, small: first, shrink: 4},
	}
}

// TerminalSize reads the size of the terminal f is (for
// Options.TermSize).
func TerminalSize(f *os.File) func() (width, height int, ok bool) {
	return func() (int, int, bool) {
		ws, err := unix.IoctlGetWinsize(int(f.Fd()), unix.TIOCGWINSZ)
		if err != nil || ws.Col == 0 || ws.Row == 0 {
			return 0, 0, false
		}
		return int(ws.Col), int(ws.Row), true
	}
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
// PeersFile, in the demo's dir, holds its instances' gRPC addresses,
// comma-separated (a --peer list).
const PeersFile = "peers"

// The web console's user of a secure demo, and the file of its password.
const (
	consoleUser         = "admin"
	consolePasswordFile = "console-password"
)

// writeConsolePassword makes a random password and writes it to path
// (0600, with a line break).
func writeConsolePassword(path string) (string, error) {
	b := make([]byte, 12)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	pw := base64.RawURLEncoding.EncodeToString(b)
	return pw, os.WriteFile(path, []byte(pw+"\n"), 0o600)
}

// createConsoleUser makes the console's admin user once the cluster takes
// it (until ctx ends).
func createConsoleUser(ctx context.Context, cl *client.Client, pw string) {
	for {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err := cl.CreateUserWithPassword(cctx, consoleUser, "admin", pw)
		cancel()
		if err == nil || strings.Contains(err.Error(), "already exists") || ctx.Err() != nil {
			return
		}
		if retry.Sleep(ctx, time.Second) != nil {
			return
		}
	}
}

func (d *sampleData) load(ctx context.Context, cl *client.Client) {
	def := client.SpaceDef{
		Name: sampleSpace,
		Format: tuple.Format{
			{Name: "shop", Type: tuple.TypeUnsigned},
			{Name: "offer", Type: tuple.TypeString},
			{Name: "price", Type: tuple.TypeDouble, Nullable: true},
		},
		PrimaryKey:  []string{"shop", "offer"},
		ShardingKey: []string{"shop"},
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

// loopbackPorts returns n distinct free loopback addresses (each listened
// on until all are taken).
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
