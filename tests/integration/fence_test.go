package integration

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/shardkit/shardkit/client"
	"github.com/shardkit/shardkit/tuple"
)

// The fence holder: a process that takes a lease and writes fenced
// batches through it (client.Batch.Fence), printing each outcome, so that
// the test can pause it (SIGSTOP) past its lease.
const (
	fenceHolderEnv = "SHARDKIT_TEST_FENCE_HOLDER" // the peers, comma-separated
	fenceLease     = "fence-test/s1"
	fenceTTL       = 2 * time.Second
)

var fenceKey = []tuple.Value{tuple.String("s1")}

// runFenceHolder acquires fenceLease as holder "A" and writes row A-n
// (n = 1, 2, ...) every 20 ms with its ticket as the fence, printing
// "granted T", then "ok n VERSION" or "refused n ERROR" a line each, until
// 200 refusals or a minute.
func runFenceHolder() int {
	peers := strings.Split(os.Getenv(fenceHolderEnv), ",")
	creds, err := dialCredentials()
	if err != nil {
		fmt.Println("error", err)
		return 1
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cl, err := client.New(ctx, client.Config{Peers: peers, Credentials: creds, Timeout: 2 * time.Second})
	if err != nil {
		fmt.Println("error", err)
		return 1
	}
	defer cl.Close()
	lease, granted, err := cl.Leases().Acquire(ctx, fenceLease, "A", fenceTTL)
	if err != nil || !granted {
		fmt.Println("error", granted, err)
		return 1
	}
	fmt.Println("granted", lease.Ticket)
	refused := 0
	for n := 1; refused < 200 && ctx.Err() == nil; n++ {
		wctx, wcancel := context.WithTimeout(ctx, 5*time.Second)
		res, err := cl.Batch().
			Fence(client.Fence{Space: "fence_fences", Key: fenceKey, Field: "ticket", Ticket: lease.Ticket}).
			Replace("fence_data", tuple.Tuple{tuple.String("s1"), tuple.String("A-" + strconv.Itoa(n)), tuple.Uint(uint64(n))}).
			Do(wctx)
		wcancel()
		if err != nil {
			refused++
			fmt.Println("refused", n, strings.ReplaceAll(err.Error(), "\n", " "))
		} else {
			fmt.Println("ok", n, res[len(res)-1].Version)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return 0
}

// A holder paused past its lease (SIGSTOP) writes nothing once another
// holder took the lease with a higher ticket and wrote: every batch it
// sends after it resumes is refused whole, and no row of it is applied
// after the new holder's first write (a batch it had sent before the pause
// may have been applied before that write, never after it).
func TestAPausedHolderWritesNothing(t *testing.T) {
	c := newCluster(t, 3)
	c.startAll()
	c.waitOnline(3)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	cl, err := client.New(ctx, client.Config{Peers: c.peers, Timeout: 5 * time.Second, Credentials: testCredentials(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	for _, d := range []client.SpaceDef{
		{Name: "fence_fences", Format: tuple.Format{{Name: "shard", Type: tuple.TypeString}, {Name: "ticket", Type: tuple.TypeUnsigned}}, PrimaryKey: []string{"shard"}},
		{Name: "fence_data", Format: tuple.Format{{Name: "shard", Type: tuple.TypeString}, {Name: "k", Type: tuple.TypeString}, {Name: "v", Type: tuple.TypeUnsigned}},
			PrimaryKey: []string{"shard", "k"}, ShardingKey: []string{"shard"}},
	} {
		if _, err := cl.CreateSpace(ctx, d, true); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := cl.Space("fence_fences").Insert(ctx, tuple.Tuple{tuple.String("s1"), tuple.Uint(0)}); err != nil {
		t.Fatal(err)
	}

	holder := exec.Command(os.Args[0], "-test.run=^$")
	holder.Env = append(os.Environ(), fenceHolderEnv+"="+strings.Join(c.peers, ","))
	out, err := holder.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	holder.Stderr = os.Stderr
	if err := holder.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = holder.Process.Kill(); _ = holder.Wait() }()
	lines := make(chan string, 1024)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	next := func() string {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatal("the holder ended")
			}
			return l
		case <-ctx.Done():
			t.Fatal("the holder went silent")
		}
		return ""
	}
	var ticketA uint64
	for oks := 0; oks < 5; {
		l := next()
		switch f := strings.Fields(l); f[0] {
		case "granted":
			ticketA, _ = strconv.ParseUint(f[1], 10, 64)
		case "ok":
			oks++
		default:
			t.Fatalf("the holder before its pause: %s", l)
		}
	}

	// Pause A past its lease; B takes the lease (a higher ticket) and writes.
	if err := holder.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	time.Sleep(fenceTTL + time.Second)
	var leaseB client.Lease
	for {
		l, granted, err := cl.Leases().Acquire(ctx, fenceLease, "B", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if granted {
			leaseB = l
			break
		}
		time.Sleep(200 * time.Millisecond) // the cluster's clock has not passed A's lease yet
	}
	if leaseB.Ticket <= ticketA {
		t.Fatalf("B's ticket %d is not above A's %d", leaseB.Ticket, ticketA)
	}
	res, err := cl.Batch().
		Fence(client.Fence{Space: "fence_fences", Key: fenceKey, Field: "ticket", Ticket: leaseB.Ticket}).
		Replace("fence_data", tuple.Tuple{tuple.String("s1"), tuple.String("B"), tuple.Uint(1)}).
		Do(ctx)
	if err != nil {
		t.Fatalf("B's fenced write: %v", err)
	}
	versionB := res[len(res)-1].Version

	// A resumes: every batch it sends from now on is refused whole.
	if err := holder.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	refused, okAfter := 0, 0
	for refused < 20 {
		l := next()
		f := strings.Fields(l)
		switch f[0] {
		case "refused":
			if !strings.Contains(l, "does not hold") {
				t.Fatalf("A's write was refused for another reason: %s", l)
			}
			refused++
		case "ok":
			// Only a batch sent before the pause may still be answered.
			if v, _ := strconv.ParseUint(f[2], 10, 64); v > versionB {
				t.Fatalf("A's write %s was applied after B's (version %d)", l, versionB)
			}
			okAfter++
		default:
			t.Fatalf("the holder: %s", l)
		}
	}
	if okAfter > 1 {
		t.Fatalf("%d of A's writes were answered ok after its pause; at most the one in flight may be", okAfter)
	}
	// No row of A was applied after B's write.
	for after := []tuple.Value(nil); ; {
		rows, more, err := cl.Space("fence_data").Range(ctx, client.RangeOptions{Bucket: mustBucket(ctx, t, cl), After: after, Limit: 1000})
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range rows {
			if k, _ := r.Tuple[1].AsString(); strings.HasPrefix(k, "A-") && r.Version > versionB {
				t.Fatalf("row %s of A has version %d, after B's write (%d)", k, r.Version, versionB)
			}
		}
		if !more || len(rows) == 0 {
			break
		}
		after = rows[len(rows)-1].Tuple[:2]
	}
	f, _, err := cl.Space("fence_fences").Select(ctx, fenceKey, client.RW)
	if err != nil {
		t.Fatal(err)
	}
	if tk, _ := f.Tuple[1].AsUint(); tk != leaseB.Ticket {
		t.Fatalf("the fence holds ticket %d, want B's %d", tk, leaseB.Ticket)
	}
	if err := ctx.Err(); errors.Is(err, context.DeadlineExceeded) {
		t.Fatal(err)
	}
}

func mustBucket(ctx context.Context, t *testing.T, cl *client.Client) uint32 {
	t.Helper()
	b, err := cl.Space("fence_data").Bucket(ctx, tuple.String("s1"), tuple.String("B"))
	if err != nil {
		t.Fatal(err)
	}
	return b
}
