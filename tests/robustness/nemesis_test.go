package robustness

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"time"
)

// The faults the nemesis injects, one at a time; after each the cluster
// must become whole again (every instance Online, leaders agreed) before
// the next.
const (
	// faultKillWorker: SIGKILL the worker; its supervisor starts a new
	// one (the realistic crash-restart of an instance).
	faultKillWorker = "kill-worker"
	// faultCrash: SIGKILL supervisor and worker; the harness starts the
	// instance again after a pause (a lost machine that comes back).
	faultCrash = "crash"
	// faultStall: SIGSTOP the instance, SIGCONT it after a pause (a
	// stalled process: the leader that does not know it was replaced).
	faultStall = "stall"
	// faultRestart: SIGTERM (graceful shutdown) and start again.
	faultRestart = "restart"
	// faultCrashQuorum: SIGKILL the target and one more instance (the
	// replicaset loses its quorum), start both again after a pause.
	faultCrashQuorum = "crash-quorum"
	// faultCrashAll: SIGKILL every instance at once and start them again
	// (a cold restart: whatever was acknowledged must have been durable).
	faultCrashAll = "crash-all"

	// The network faults (netfaults_test.go) cut raft links only; the
	// clients still reach every instance. They need a binary with
	// failpoints.

	// faultIsolate: cut the replicaset's leader (when known; the target
	// otherwise) from every other instance, both ways: it goes on being
	// asked by clients while the others elect a new leader.
	faultIsolate = "isolate"
	// faultPartition: cut a minority of the instances (the target among
	// them) from the rest, both ways or one way at random.
	faultPartition = "partition"
	// faultFlap: over 4 to 8s, cut the links of whichever instance leads
	// the replicaset then (the target when none is known), mend them
	// after 0.2 to 0.8s, and again. Half of the cuts are short (0.2 to
	// 0.9s, less than an election takes; both ways or only what the
	// leader receives): the leader stays, the writes sent meanwhile wait,
	// are retried, and commit once the link is back. The others last 1.8
	// to 3s, both ways: the others elect a new leader while the old one,
	// until it steps down, still answers the clients that ask it.
	faultFlap = "flap"
)

var (
	processFaults = []string{faultKillWorker, faultCrash, faultStall, faultRestart, faultCrashQuorum, faultCrashAll}
	networkFaults = []string{faultIsolate, faultPartition, faultFlap}
	allFaults     = append(slices.Clone(processFaults), networkFaults...)
)

// nemesisConfig shapes the faults.
type nemesisConfig struct {
	faults []string
	// quiet is the pause between the cluster being whole and the next
	// fault, at most (random, at least a quarter of it).
	quiet time.Duration
	// hold is how long a crashed instance stays down or a stalled one
	// stopped, at most (random, at least 500ms).
	hold time.Duration
	// recover bounds the wait for the cluster to be whole after a fault.
	recover time.Duration
	// termTimeout bounds the wait for an instance to exit after SIGTERM
	// (its --shutdown-timeout plus a margin).
	termTimeout time.Duration
}

type nemesis struct {
	c   *cluster
	cfg nemesisConfig
	rng *rand.Rand
	h   *history
	log func(format string, args ...any)

	mu     sync.Mutex
	events []event
	counts map[string]int
}

func newNemesis(c *cluster, cfg nemesisConfig, seed uint64, h *history, log func(string, ...any)) *nemesis {
	return &nemesis{c: c, cfg: cfg, rng: rand.New(rand.NewPCG(seed, 0)), h: h, log: log, counts: map[string]int{}}
}

func (n *nemesis) record(e event) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.events = append(n.events, e)
}

func (n *nemesis) history() ([]event, map[string]int) {
	n.mu.Lock()
	defer n.mu.Unlock()
	counts := map[string]int{}
	for k, v := range n.counts {
		counts[k] = v
	}
	return slices.Clone(n.events), counts
}

func (n *nemesis) between(lo, hi time.Duration) time.Duration {
	if hi <= lo {
		return lo
	}
	return lo + time.Duration(n.rng.Int64N(int64(hi-lo)))
}

// sleep waits d or until ctx ends; false when ctx ended.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// run injects faults until the deadline (or ctx ends), then returns with
// every instance running; an error says a fault could not be injected or
// the cluster did not become whole after one.
func (n *nemesis) run(ctx context.Context, until time.Time) error {
	for time.Now().Before(until) {
		if !sleep(ctx, n.between(n.cfg.quiet/4, n.cfg.quiet)) {
			return nil
		}
		if !time.Now().Before(until) {
			return nil
		}
		fault := n.pick()
		rs, g0 := n.c.leaders(ctx)
		var target *instance
		var why string
		switch n.rng.IntN(3) {
		case 0:
			target, why = rs, "the replicaset's leader"
		case 1:
			target, why = g0, "group 0's leader"
		}
		if fault == faultIsolate && rs != nil {
			target, why = rs, "the replicaset's leader"
		}
		if target == nil {
			target, why = n.c.insts[n.rng.IntN(len(n.c.insts))], "at random"
		}
		desc := fmt.Sprintf("%s %s (%s; replicaset leader %s, group-0 leader %s)", fault, target.Name, why, nameOf(rs), nameOf(g0))
		e := event{Start: n.h.now(), What: desc}
		n.log("nemesis: %s", desc)
		detail, err := n.inject(ctx, fault, target)
		e.End = n.h.now()
		if detail != "" {
			e.What += ": " + detail
		}
		n.record(e)
		if detail != "" {
			n.log("nemesis: %s: %s", fault, detail)
		}
		n.mu.Lock()
		n.counts[fault]++
		n.mu.Unlock()
		if err != nil {
			return fmt.Errorf("%s: %w", desc, err)
		}
		began := time.Now()
		if err := n.c.waitHealthy(ctx, n.cfg.recover); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("after %s: %w", desc, err)
		}
		n.log("nemesis: whole again %.1fs after %s %s", time.Since(began).Seconds(), fault, target.Name)
	}
	return nil
}

// pick chooses the next fault: a network fault two times in three when
// the faults include both kinds, and then flap half of the time when it
// is among them. Only the network faults give a leader that clients still
// reach after the others elected another, or writes retried while their
// first attempt waits to commit; flap gives several of each.
func (n *nemesis) pick() string {
	var proc, net []string
	for _, f := range n.cfg.faults {
		if slices.Contains(networkFaults, f) {
			net = append(net, f)
		} else {
			proc = append(proc, f)
		}
	}
	if len(net) == 0 || (len(proc) > 0 && n.rng.IntN(3) == 0) {
		return proc[n.rng.IntN(len(proc))]
	}
	if slices.Contains(net, faultFlap) && n.rng.IntN(2) == 0 {
		return faultFlap
	}
	return net[n.rng.IntN(len(net))]
}

func nameOf(inst *instance) string {
	if inst == nil {
		return "unknown"
	}
	return inst.Name
}

// inject does one fault and undoes it (restarts, resumes) before it
// returns, also when ctx ends.
func (n *nemesis) inject(ctx context.Context, fault string, target *instance) (string, error) {
	hold := n.between(500*time.Millisecond, n.cfg.hold)
	switch fault {
	case faultKillWorker:
		pid, err := target.KillWorker()
		if err != nil {
			return "", err
		}
		return fmt.Sprintf("worker pid %d killed", pid), nil
	case faultCrash:
		target.Kill()
		sleep(ctx, hold)
		return fmt.Sprintf("down for %v", hold.Round(time.Millisecond)), target.Start()
	case faultCrashQuorum, faultCrashAll:
		victims := []*instance{target}
		others := slices.DeleteFunc(slices.Clone(n.c.insts), func(i *instance) bool { return i == target })
		if fault == faultCrashAll {
			victims = append(victims, others...)
		} else {
			victims = append(victims, others[n.rng.IntN(len(others))])
		}
		var names []string
		for _, v := range victims {
			v.Kill()
			names = append(names, v.Name)
		}
		sleep(ctx, hold)
		var errs []error
		for _, v := range victims {
			errs = append(errs, v.Start())
		}
		return fmt.Sprintf("%s down for %v", strings.Join(names, ", "), hold.Round(time.Millisecond)), errors.Join(errs...)
	case faultStall:
		if err := target.Stop(); err != nil {
			return "", err
		}
		sleep(ctx, hold)
		return fmt.Sprintf("stopped for %v", hold.Round(time.Millisecond)), target.Cont()
	case faultRestart:
		began := time.Now()
		termErr := target.Term(n.cfg.termTimeout)
		took := time.Since(began)
		if err := target.Start(); err != nil {
			return "", err
		}
		return fmt.Sprintf("exited %v after SIGTERM", took.Round(time.Millisecond)), termErr
	case faultIsolate, faultPartition, faultFlap:
		return n.injectNetwork(ctx, fault, target)
	}
	return "", fmt.Errorf("unknown fault %q (want one of %s)", fault, strings.Join(allFaults, ", "))
}

// injectNetwork cuts raft links (netfaults_test.go) for a hold of at least
// 2s, which outlasts an election, and mends them before it returns.
func (n *nemesis) injectNetwork(ctx context.Context, fault string, target *instance) (string, error) {
	hold := n.between(2*time.Second, max(n.cfg.hold, 3*time.Second))
	others := slices.DeleteFunc(slices.Clone(n.c.insts), func(i *instance) bool { return i == target })
	var links []link
	var detail string
	switch fault {
	case faultIsolate:
		links = append(between([]*instance{target}, others), between(others, []*instance{target})...)
		detail = fmt.Sprintf("%s cut from every peer both ways", target.Name)
	case faultPartition:
		n.rng.Shuffle(len(others), func(i, j int) { others[i], others[j] = others[j], others[i] })
		size := max(1, (len(n.c.insts)-1)/2)
		minority := append([]*instance{target}, others[:size-1]...)
		majority := others[size-1:]
		var names []string
		for _, m := range minority {
			names = append(names, m.Name)
		}
		switch n.rng.IntN(3) {
		case 0:
			links, detail = between(minority, majority), "messages from the minority dropped"
		case 1:
			links, detail = between(majority, minority), "messages to the minority dropped"
		default:
			links, detail = append(between(minority, majority), between(majority, minority)...), "both ways"
		}
		detail = fmt.Sprintf("minority %s: %s", strings.Join(names, ", "), detail)
	}
	if fault != faultFlap {
		err := n.c.cutLinks(ctx, links)
		sleep(ctx, hold)
		// What each side says of its replicaset's leader while cut: a
		// leader cut off alone names itself until it steps down.
		views := n.c.describeLeaders(ctx)
		err = errors.Join(err, n.c.mendLinks(context.WithoutCancel(ctx), links))
		return fmt.Sprintf("%s, for %v; leaders seen before the mend: %s", detail, hold.Round(time.Millisecond), views), err
	}
	hold = n.between(4*time.Second, 8*time.Second)
	until := time.Now().Add(hold)
	var cut []string
	for time.Now().Before(until) && ctx.Err() == nil {
		leader := n.c.replicasetLeader(ctx)
		if leader == nil {
			leader = target
		}
		others := slices.DeleteFunc(slices.Clone(n.c.insts), func(i *instance) bool { return i == leader })
		links, how := between(others, []*instance{leader}), "to"
		d := n.between(200*time.Millisecond, 900*time.Millisecond)
		long := n.rng.IntN(2) == 0
		if long {
			d = n.between(1800*time.Millisecond, 3*time.Second)
		}
		if long || n.rng.IntN(2) == 0 {
			links, how = append(links, between([]*instance{leader}, others)...), "both ways"
		}
		if err := n.c.cutLinks(ctx, links); err != nil {
			return "", errors.Join(err, n.c.mendLinks(context.WithoutCancel(ctx), links))
		}
		sleep(ctx, d)
		views := n.c.describeLeaders(ctx)
		if err := n.c.mendLinks(context.WithoutCancel(ctx), links); err != nil {
			return "", err
		}
		cut = append(cut, fmt.Sprintf("%s %s for %v (then %s)", leader.Name, how, d.Round(time.Millisecond), views))
		sleep(ctx, n.between(200*time.Millisecond, 800*time.Millisecond))
	}
	return fmt.Sprintf("over %v, cut in turn: %s", hold.Round(time.Millisecond), strings.Join(cut, "; ")), nil
}

// heal makes sure that every instance runs, none is stopped and no raft
// link is cut.
func (c *cluster) heal() error {
	for _, inst := range c.insts {
		if inst.Stopped() {
			if err := inst.Cont(); err != nil {
				return err
			}
		}
		if !inst.Running() {
			if err := inst.Start(); err != nil {
				return err
			}
		}
	}
	return c.mendAll(context.Background())
}
