package integration

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"
)

// After two of three voters are gone, status on the third used to show
// every instance Online, "leader none known", and exit 0. It now says that
// group 0 has no quorum, how many voters answer of how many, marks the
// grades as last known, and exits 3.
func TestStatusWithoutQuorum(t *testing.T) {
	c := newCluster(t, 3)
	c.startAll()
	c.waitOnline(3)
	st := c.waitStatus("3 voters", 60*time.Second, func(s *statusJSON) bool { return len(voters(s)) == 3 })
	survivor := c.insts[0]
	self := st.byAddress(survivor.Listen)
	c.insts[1].Kill()
	c.insts[2].Kill()

	// Until the survivor notices, status may still find the old leader's
	// lease; poll for the refusal with a deadline.
	var out, errs string
	var code int
	deadline := time.Now().Add(60 * time.Second)
	for {
		out, errs, code = shardkit(30*time.Second, "status", "--peer", survivor.Listen)
		if code == 3 || time.Now().After(deadline) {
			break
		}
		time.Sleep(500 * time.Millisecond)
	}
	if code != 3 {
		t.Fatalf("status without quorum: exit %d, want 3:\n%s\n%s", code, out, errs)
	}
	for _, want := range []string{"(no quorum)", "NO QUORUM: group 0 has no quorum: 1 of 3 voters answer (" + self.InstanceID + ")", "Online(", ")?"} {
		if !strings.Contains(out, want) {
			t.Errorf("the table does not say %q:\n%s", want, out)
		}
	}
	if !strings.Contains(errs, "1 of 3 voters answer") || strings.Count(errs, "\n") != 1 {
		t.Errorf("stderr %q: want one line with the quorum", errs)
	}
	t.Logf("status:\n%s%s", out, errs)

	out, _, code = shardkit(30*time.Second, "status", "--peer", survivor.Listen, "--format", "json")
	var doc struct {
		Quorum struct {
			HasQuorum          bool     `json:"has_quorum"`
			Voters             []uint64 `json:"voters"`
			VotersAnswering    []uint64 `json:"voters_answering"`
			VotersNotAnswering []uint64 `json:"voters_not_answering"`
		} `json:"quorum"`
		GradesLastKnown bool `json:"grades_last_known"`
	}
	if err := json.Unmarshal([]byte(out), &doc); err != nil || code != 3 {
		t.Fatalf("status --format json: exit %d, %v: %s", code, err, out)
	}
	q := doc.Quorum
	if q.HasQuorum || !doc.GradesLastKnown || len(q.Voters) != 3 || fmt.Sprint(q.VotersAnswering) != fmt.Sprint([]uint64{self.RaftID}) || len(q.VotersNotAnswering) != 2 {
		t.Fatalf("json quorum %+v, grades_last_known %v; want 1 of 3 answering (raft_id %d)", q, doc.GradesLastKnown, self.RaftID)
	}
}
