package multiraft

import (
	"context"
	"io"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// lastSM keeps the last command applied under one key.
type lastSM struct{}

var lastKey = []byte("sm/last")

func (*lastSM) Apply(b *pebble.Batch, ents []Entry) ([]any, error) {
	for _, e := range ents {
		if err := b.Set(lastKey, e.Cmd, nil); err != nil {
			return nil, err
		}
	}
	return make([]any, len(ents)), nil
}
func (*lastSM) Snapshot(context.Context, pebble.Reader, io.Writer) error { return nil }
func (*lastSM) Restore(context.Context, *pebble.DB, io.Reader) error     { return nil }

// TestASoleVoterReadWaitsForItsTermsFirstEntry: the commit index is
// written without a sync, so a one-voter group that crashes may come back
// with a commit index below a write it acknowledged (the entry itself is
// durable), and raft confirms a read index of a one-voter leader at once,
// with that commit index, before its term's first entry commits. The read
// must wait for that entry, which commits the old ones with it (doc.go,
// "Lease reads", 2). Rounds are run one at a time, so that the read is
// stepped in the one round between becoming leader and that commit.
func TestASoleVoterReadWaitsForItsTermsFirstEntry(t *testing.T) {
	for _, leases := range []bool{false, true} {
		fs := vfs.NewCrashableMem()
		open := func(fs vfs.FS) (*pebble.DB, *Host, *Group) {
			db, h := startTestHost(t, fs, func(c *Config) { c.LeaseReads = leases })
			G, err := h.OpenGroup(GroupConfig{ID: 1, Members: []NodeID{1}, StateMachine: &lastSM{}})
			if err != nil {
				t.Fatal(err)
			}
			return db, h, G
		}
		db, h, G := open(fs)
		for G.Status().Role != "leader" {
			h.ProcessReady()
			time.Sleep(time.Millisecond)
		}
		done := make(chan error, 1)
		go func() { _, err := G.Propose(context.Background(), []byte("x=1")); done <- err }()
		for len(done) == 0 {
			h.ProcessReady()
			time.Sleep(time.Millisecond)
		}
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		h.Stop()
		crashed := fs.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: 0})
		_ = db.Close()

		db, h, G = open(crashed)
		read := make(chan error, 1)
		asked, answered := false, false
		for range 50 {
			if st := G.Status(); !asked && st.Role == "leader" && st.Commit < st.LastIndex {
				go func() { read <- G.ReadIndex(context.Background()) }()
				time.Sleep(10 * time.Millisecond) // queued before the next round
				asked = true
			}
			if gs, flags := h.sched.take(false); gs != nil {
				h.processRound(gs, flags)
			}
			if asked {
				time.Sleep(10 * time.Millisecond) // an answered read reaches the channel before the next round
			}
			if len(read) > 0 {
				if err := <-read; err != nil {
					t.Fatal(err)
				}
				v, closer, err := db.Get(lastKey)
				if err != nil {
					t.Fatalf("leases=%v: the read after the restart found nothing (%v): x=1 was acknowledged before the crash", leases, err)
				}
				if string(v) != "x=1" {
					t.Fatalf("leases=%v: the read found %q, want x=1", leases, v)
				}
				_ = closer.Close()
				answered = true
				break
			}
		}
		if !asked {
			t.Fatalf("leases=%v: never saw the restarted leader before its term's entry committed: the test checked nothing", leases)
		}
		if !answered {
			t.Fatalf("leases=%v: the read was not answered in 50 rounds", leases)
		}
		h.Stop()
		_ = db.Close()
	}
}
