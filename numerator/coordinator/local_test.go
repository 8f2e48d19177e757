package coordinator_test

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/shardkit/shardkit/numerator/coordinator"
	"github.com/shardkit/shardkit/numerator/coordinator/coordtest"
)

// clocks hands each test its fake clock.
type clocks struct {
	mu sync.Mutex
	m  map[*testing.T]*fakeClock
}

func (c *clocks) of(t *testing.T) *fakeClock {
	t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m[t] == nil {
		c.m[t] = newFakeClock()
	}
	return c.m[t]
}

func recordKey(name string) string {
	h := sha256.Sum256([]byte(name))
	return hex.EncodeToString(h[:8])
}

func TestLocalConformance(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	cl := &clocks{m: map[*testing.T]*fakeClock{}}
	coordtest.Run(t, coordtest.Harness{
		New: func(t *testing.T, record string) coordinator.Coordinator {
			t.Helper()
			c, err := coordinator.NewLocal(filepath.Join(root, recordKey(record)), cl.of(t).Now)
			if err != nil {
				t.Fatal(err)
			}
			return c
		},
		Advance: func(t *testing.T, d time.Duration) {
			t.Helper()
			cl.of(t).Advance(d)
		},
		Timeout: time.Minute,
	})
}

func TestLocalRefusesACorruptRecord(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "record.json"), []byte(`{"format":1,"last_ticket":1,"lock":{"holder":"x","ticket":5}}`), 0o644); err != nil {
		t.Fatal(err)
	}
	c, err := coordinator.NewLocal(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Acquire(t.Context(), "dc-a", time.Minute); !errors.Is(err, coordinator.ErrCorrupt) {
		t.Fatalf("Acquire on a corrupt record = %v, want ErrCorrupt", err)
	}
	b, _ := os.ReadFile(filepath.Join(dir, "record.json"))
	if string(b) != `{"format":1,"last_ticket":1,"lock":{"holder":"x","ticket":5}}` {
		t.Fatalf("a refused update rewrote the record: %s", b)
	}
}

func TestParseZKAddr(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in      string
		servers int
		path    string
		ok      bool
	}{
		{"127.0.0.1:2181", 1, coordinator.DefaultZKPath, true},
		{"a:1,b:2/x/y", 2, "/x/y", true},
		{"a:1/", 0, "", false},
		{"", 0, "", false},
		{"/only/path", 0, "", false},
	}
	for _, tt := range tests {
		s, p, err := coordinator.ParseZKAddr(tt.in)
		if (err == nil) != tt.ok || len(s) != tt.servers || p != tt.path {
			t.Errorf("ParseZKAddr(%q) = %v, %q, %v", tt.in, s, p, err)
		}
	}
}

func FuzzDecodeDocument(f *testing.F) {
	f.Add([]byte(`{"format":1,"last_ticket":3,"lock":{"holder":"a","ticket":3,"acquired":"2026-01-01T00:00:00Z","expires":"2026-01-01T00:01:00Z"},"state":{"location":"/s","ticket":2}}`))
	f.Add([]byte(``))
	f.Add([]byte(`{"format":2}`))
	f.Add([]byte(`{"format":1} {}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		d, err := coordinator.DecodeDocument(b)
		if err != nil {
			if !errors.Is(err, coordinator.ErrCorrupt) {
				t.Fatalf("error %v does not wrap ErrCorrupt", err)
			}
			return
		}
		again, err := coordinator.DecodeDocument(d.Encode())
		if err != nil || again.LastTicket != d.LastTicket || again.State.Location != d.State.Location || (again.Lock == nil) != (d.Lock == nil) {
			t.Fatalf("re-decoding %+v: %+v, %v", d, again, err)
		}
	})
}
