package robustness

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/shardkit/shardkit/internal/multiraft"
	"github.com/shardkit/shardkit/internal/multiraft/grpcnet"
	"github.com/shardkit/shardkit/internal/replicaset"
	"github.com/shardkit/shardkit/internal/server"
)

// The network faults cut raft links only: the transport's failpoints
// (grpcnet.FailpointDropTo and FailpointDropFrom, set over each
// instance's /debug/failpoints) drop the raft messages of a link, while
// clients, and the instances' calls to each other, still get through. So
// a leader cut off from its followers goes on being asked by the clients
// that still reach it, the classic stale read's setting. docs/testing.md
// ("Robustness") says why failpoints rather than a proxy per link.
const (
	failpointDropTo   = grpcnet.FailpointDropTo
	failpointDropFrom = grpcnet.FailpointDropFrom
)

// link is one direction of a raft link: from's messages to to.
type link struct{ from, to *instance }

func (l link) String() string { return l.from.Name + "->" + l.to.Name }

// cutLinks drops the raft messages of every link: the sender drops what
// it sends on it and the receiver what it receives on it, so the cut holds
// whichever side looks.
func (c *cluster) cutLinks(ctx context.Context, links []link) error {
	var errs []error
	for _, l := range links {
		errs = append(errs,
			c.failpoint(ctx, l.from, failpointDropTo+l.to.Listen, "error"),
			c.failpoint(ctx, l.to, failpointDropFrom+l.from.Listen, "error"))
	}
	return errors.Join(errs...)
}

// mendLinks undoes cutLinks.
func (c *cluster) mendLinks(ctx context.Context, links []link) error {
	var errs []error
	for _, l := range links {
		errs = append(errs,
			c.failpoint(ctx, l.from, failpointDropTo+l.to.Listen, ""),
			c.failpoint(ctx, l.to, failpointDropFrom+l.from.Listen, ""))
	}
	return errors.Join(errs...)
}

// mendAll removes every link cut on every running instance.
func (c *cluster) mendAll(ctx context.Context) error {
	if !failpoints {
		return nil
	}
	var links []link
	for _, a := range c.insts {
		for _, b := range c.insts {
			if a != b && a.Running() && b.Running() {
				links = append(links, link{a, b})
			}
		}
	}
	return c.mendLinks(ctx, links)
}

// between returns the links from every instance of a to every one of b.
func between(a, b []*instance) []link {
	var out []link
	for _, x := range a {
		for _, y := range b {
			if x != y {
				out = append(out, link{x, y})
			}
		}
	}
	return out
}

// failpoint sets (action != "") or removes (action == "") a failpoint on
// inst's worker, retrying for a few seconds (a worker may be starting).
func (c *cluster) failpoint(ctx context.Context, inst *instance, name, action string) error {
	method := http.MethodPut
	if action == "" {
		method = http.MethodDelete
	}
	url := "http://" + c.http[inst.Name] + "/debug/failpoints/" + name
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := func() error {
			rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			defer cancel()
			req, err := http.NewRequestWithContext(rctx, method, url, strings.NewReader(action))
			if err != nil {
				return err
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				return err
			}
			defer resp.Body.Close()
			if resp.StatusCode != http.StatusNoContent {
				body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
				return fmt.Errorf("HTTP %s: %s", resp.Status, strings.TrimSpace(string(body)))
			}
			return nil
		}()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("%s failpoint %s on %s: %w", method, name, inst.Name, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// Deliberate defects a run can switch on (envDefect), to show that the
// checks catch them; each is a failpoint of the binary, set through its
// environment so that it holds through restarts.
var defects = map[string]string{
	// rw reads on the leader skip the read index
	// (replicaset.FailpointSkipReadIndex).
	"skip-read-index": replicaset.FailpointSkipReadIndex + "=error",
	// a leader serves lease reads past its lease's end, for its whole term
	// (multiraft.FailpointLeaseUnchecked).
	"lease-unchecked": multiraft.FailpointLeaseUnchecked + "=error",
	// the apply does not look request ids up: a retried write applies
	// twice (replicaset.FailpointForgetRequestID).
	"forget-request-id": replicaset.FailpointForgetRequestID + "=error",
}

// envFailpoints is the instances' variable that sets failpoints at start.
const envFailpoints = server.EnvFailpoints

// describeLeaders says which instance each running instance names as its
// replicaset's leader, e.g. "n1:n2 n2:n2 n3:n3".
func (c *cluster) describeLeaders(ctx context.Context) string {
	views := c.replicasetLeaders(ctx)
	var parts []string
	for _, inst := range c.insts {
		leader := "?"
		if v, ok := views[inst.Name]; ok {
			leader = nameOf(c.byAddr(v.leader))
		}
		parts = append(parts, inst.Name+":"+leader)
	}
	return strings.Join(parts, " ")
}
