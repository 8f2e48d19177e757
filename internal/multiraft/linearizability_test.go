package multiraft_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/shardkit/shardkit/internal/multiraft"
	"github.com/shardkit/shardkit/internal/multiraft/kvsm"
)

// The linearizability test runs concurrent clients against a 3-node group
// while a nemesis crashes and restarts nodes, partitions them, drops and
// delays messages; then it checks the client history with porcupine.
// SHARDKIT_LINEARIZABILITY_SEEDS and SHARDKIT_LINEARIZABILITY_SECONDS make
// longer runs; CI uses the bounded defaults.

type kvInput struct {
	op    string // "put", "get" (through the log) or "read" (ReadIndex + local read)
	key   string
	value string
}

type kvOutput struct {
	value   string
	unknown bool // a put whose outcome the client never learned
}

var kvModel = porcupine.Model{
	Partition: func(history []porcupine.Operation) [][]porcupine.Operation {
		byKey := map[string][]porcupine.Operation{}
		var keys []string
		for _, op := range history {
			k := op.Input.(kvInput).key
			if _, ok := byKey[k]; !ok {
				keys = append(keys, k)
			}
			byKey[k] = append(byKey[k], op)
		}
		out := make([][]porcupine.Operation, 0, len(keys))
		for _, k := range keys {
			out = append(out, byKey[k])
		}
		return out
	},
	Init: func() any { return "" },
	Step: func(state, input, output any) (bool, any) {
		in, out, st := input.(kvInput), output.(kvOutput), state.(string)
		switch in.op {
		case "put":
			if out.unknown {
				return true, in.value
			}
			return out.value == st, in.value // put returns the previous value
		default:
			return out.value == st, st
		}
	},
	DescribeOperation: func(input, output any) string {
		in, out := input.(kvInput), output.(kvOutput)
		if in.op == "put" {
			if out.unknown {
				return fmt.Sprintf("put(%s, %s) -> ?", in.key, in.value)
			}
			return fmt.Sprintf("put(%s, %s) -> %q", in.key, in.value, out.value)
		}
		return fmt.Sprintf("%s(%s) -> %q", in.op, in.key, out.value)
	},
}

type history struct {
	mu  sync.Mutex
	ops []porcupine.Operation
}

func (h *history) add(op porcupine.Operation) {
	h.mu.Lock()
	h.ops = append(h.ops, op)
	h.mu.Unlock()
}

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

func TestLinearizableUnderFaults(t *testing.T) {
	t.Parallel()
	seeds := envInt("SHARDKIT_LINEARIZABILITY_SEEDS", 3)
	seconds := envInt("SHARDKIT_LINEARIZABILITY_SECONDS", 3)
	for _, leases := range []bool{false, true} {
		for seed := 1; seed <= seeds; seed++ {
			t.Run(fmt.Sprintf("leases=%v/seed=%d", leases, seed), func(t *testing.T) {
				t.Parallel()
				runLinearizability(t, uint64(seed), time.Duration(seconds)*time.Second, leases)
			})
		}
	}
}

// runLinearizability runs the test once; with leases the reads are served
// under the leader's lease (Config.LeaseReads) wherever it holds one.
func runLinearizability(t *testing.T, seed uint64, dur time.Duration, leases bool) {
	t.Helper()
	c := newCluster(t, seed, 3, func(cfg *multiraft.Config) {
		cfg.LogCompactionThreshold = 200 // snapshots happen too
		cfg.LogCompactionKeep = 20
		cfg.LeaseReads = leases
	})
	c.addGroup(g1, 1, 2, 3)
	c.start()
	c.leader(g1)

	h := &history{}
	stop := make(chan struct{})
	var clients sync.WaitGroup
	for cl := range 5 {
		clients.Go(func() { runClient(c, h, cl, seed, stop) })
	}
	faults := runNemesis(t, c, seed, dur)
	close(stop)
	clients.Wait()

	c.net.Heal()
	c.net.SetDropRate(0)
	c.net.SetDelay(0, 0)
	for _, id := range c.ids() {
		if !c.nodes[id].alive {
			c.restart(id)
		}
	}
	c.mustPropose(g1, put("k0", "final"))
	c.waitConverged(g1, 1, 2, 3)
	for _, k := range []string{"k0", "k1", "k2", "k3", "k4"} {
		v1, _ := c.read(1, g1, k)
		for _, id := range []multiraft.NodeID{2, 3} {
			if v, _ := c.read(id, g1, k); v != v1 {
				t.Fatalf("replicas diverge on %s: node 1 %q, node %d %q", k, v1, id, v)
			}
		}
	}

	ops := dropUnobservedUnknowns(h.ops)
	res, info := porcupine.CheckOperationsVerbose(kvModel, ops, time.Minute)
	known := 0
	for _, op := range h.ops {
		if !op.Output.(kvOutput).unknown {
			known++
		}
	}
	leased := c.leaseReads()
	t.Logf("seed %d: %d operations (%d with known outcome, %d checked), reads under a lease %d, faults: %v",
		seed, len(h.ops), known, len(ops), leased, faults)
	if leases && leased == 0 {
		t.Fatal("lease reads on, and no read was served under a lease: the test checked none")
	}
	if known < 20 {
		t.Fatalf("only %d operations completed: the test checked too little", known)
	}
	switch res {
	case porcupine.Ok:
	case porcupine.Illegal:
		path := filepath.Join(os.TempDir(), fmt.Sprintf("shardkit-linearizability-seed%d.html", seed))
		if err := porcupine.VisualizePath(kvModel, info, path); err == nil {
			t.Logf("visualization: %s", path)
		}
		t.Fatalf("history is not linearizable (seed %d)", seed)
	default:
		t.Fatalf("linearizability check timed out (seed %d, %d operations)", seed, len(h.ops))
	}
}

// dropUnobservedUnknowns removes puts of unknown outcome whose value no
// operation ever saw. Such a put can always be placed after everything
// else, where it changes nothing observable, so dropping it keeps the
// verdict and spares the checker an exponential search. Values are unique.
func dropUnobservedUnknowns(ops []porcupine.Operation) []porcupine.Operation {
	seen := map[string]bool{}
	for _, op := range ops {
		if out := op.Output.(kvOutput); !out.unknown {
			seen[out.value] = true
		}
	}
	kept := make([]porcupine.Operation, 0, len(ops))
	for _, op := range ops {
		if op.Output.(kvOutput).unknown && !seen[op.Input.(kvInput).value] {
			continue
		}
		kept = append(kept, op)
	}
	return kept
}

func runClient(c *cluster, h *history, client int, seed uint64, stop <-chan struct{}) {
	rng := rand.New(rand.NewPCG(seed, uint64(client)))
	for n := 0; ; n++ {
		select {
		case <-stop:
			return
		default:
		}
		node := multiraft.NodeID(rng.IntN(3) + 1)
		in := kvInput{key: fmt.Sprintf("k%d", rng.IntN(5))}
		switch r := rng.IntN(100); {
		case r < 45:
			in.op, in.value = "put", fmt.Sprintf("c%d-%d", client, n)
		case r < 80:
			in.op = "get"
		default:
			in.op = "read"
		}
		call := time.Now().UnixNano()
		out, res := doOp(c, node, in)
		ret := time.Now().UnixNano()
		switch res {
		case opFailed:
			continue // not applied (or a read): no effect to record
		case opUnknown:
			out, ret = kvOutput{unknown: true}, math.MaxInt64
		}
		h.add(porcupine.Operation{ClientId: client, Input: in, Call: call, Output: out, Return: ret})
	}
}

type opResult int

const (
	opDone    opResult = iota
	opFailed           // definitely had no effect
	opUnknown          // a put that may or may not have been applied
)

// doOp runs one operation.
func doOp(c *cluster, node multiraft.NodeID, in kvInput) (kvOutput, opResult) {
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	c.mu.Lock()
	n := c.nodes[node]
	alive, inc, g := n.alive, n.incarnation, n.groups[g1]
	c.mu.Unlock()
	if !alive {
		time.Sleep(time.Millisecond)
		return kvOutput{}, opFailed
	}
	switch in.op {
	case "read":
		if err := g.ReadIndex(ctx); err != nil {
			return kvOutput{}, opFailed
		}
		c.mu.Lock()
		defer c.mu.Unlock()
		if !n.alive || n.incarnation != inc {
			return kvOutput{}, opFailed
		}
		v, _, err := n.sms[g1].Read(n.db, []byte(in.key))
		if err != nil {
			return kvOutput{}, opFailed
		}
		return kvOutput{value: string(v)}, opDone
	default:
		cmd := kvsm.Command{Op: kvsm.OpGet, Key: []byte(in.key)}
		if in.op == "put" {
			cmd = kvsm.Command{Op: kvsm.OpPut, Key: []byte(in.key), Value: []byte(in.value)}
		}
		r, err := multiraft.ProposeAs[kvsm.Result](ctx, g, cmd.Encode())
		switch {
		case err == nil:
		case in.op != "put", errors.Is(err, multiraft.ErrProposalDropped):
			return kvOutput{}, opFailed // a read, or a put raft did not take
		default:
			return kvOutput{}, opUnknown
		}
		if r.Err != nil {
			return kvOutput{}, opFailed
		}
		return kvOutput{value: string(r.Value)}, opDone
	}
}

// runNemesis injects faults until dur has passed and returns what it did.
func runNemesis(t *testing.T, c *cluster, seed uint64, dur time.Duration) map[string]int {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, 0xfa17))
	faults := map[string]int{}
	deadline := time.Now().Add(dur)
	var down multiraft.NodeID
	for time.Now().Before(deadline) {
		time.Sleep(time.Duration(30+rng.IntN(120)) * time.Millisecond)
		switch rng.IntN(6) {
		case 0:
			if down == 0 {
				down = multiraft.NodeID(rng.IntN(3) + 1)
				c.crash(down)
				faults["crash"]++
			}
		case 1:
			if down != 0 {
				c.restart(down)
				down = 0
				faults["restart"]++
			}
		case 2:
			c.net.Isolate(multiraft.NodeID(rng.IntN(3) + 1))
			faults["isolate"]++
		case 3:
			c.net.Heal()
			faults["heal"]++
		case 4:
			c.net.SetDropRate(float64(rng.IntN(4)) * 0.05)
			faults["drop"]++
		case 5:
			c.net.SetDelay(0, uint64(rng.IntN(4)))
			faults["delay"]++
		}
	}
	return faults
}
