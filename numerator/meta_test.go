package numerator

import (
	"errors"
	"testing"
)

func TestStateMetaRoundTrip(t *testing.T) {
	t.Parallel()
	m := StateMeta{Version: Version{1, 2, 3, 4}, Run: 9, TTL: 2, SchemeName: "offer-16", Shards: 16, LastRebuildRun: 5}
	kv := m.keyValues(tableState, 3)
	got, err := parseStateMeta(func(k string) (string, bool) { v, ok := kv[k]; return v, ok })
	if err != nil || got != m {
		t.Fatalf("parse = %+v, %v; want %+v", got, err, m)
	}
}

func TestStateMetaRefusals(t *testing.T) {
	t.Parallel()
	good := StateMeta{Version: Version{1, 2, 3, 4}, Run: 9, TTL: 2, SchemeName: "s", Shards: 16, LastRebuildRun: 5}.keyValues(tableState, 0)
	tests := []struct {
		name string
		key  string
		val  string // "" with del = remove the key
		del  bool
	}{
		{"missing version", metaVersion, "", true},
		{"bad version", metaVersion, "1.2.3", false},
		{"other format", metaFormat, "2", false},
		{"new docs table", metaTable, tableNewDocs, false},
		{"run not a number", metaRun, "x", false},
		{"negative ttl", metaTTL, "-1", false},
		{"zero shards", metaShards, "0", false},
		{"too many shards", metaShards, "4294967296", false},
		{"rebuild after run", metaLastRebuildRun, "10", false},
		{"missing scheme name", metaSchemeName, "", true},
	}
	for _, tt := range tests {
		kv := make(map[string]string)
		for k, v := range good {
			kv[k] = v
		}
		if tt.del {
			delete(kv, tt.key)
		} else {
			kv[tt.key] = tt.val
		}
		_, err := parseStateMeta(func(k string) (string, bool) { v, ok := kv[k]; return v, ok })
		if !errors.Is(err, ErrBadState) {
			t.Errorf("%s: error %v, want ErrBadState", tt.name, err)
		}
	}
}

func FuzzParseStateMeta(f *testing.F) {
	f.Add("1", "state", "1.0.0.0", "1", "0", "16", "0", "offer-16")
	f.Add("1", "state", "1.2.3", "x", "-1", "0", "99", "")
	f.Fuzz(func(t *testing.T, format, table, version, run, ttl, shards, rebuild, scheme string) {
		kv := map[string]string{metaFormat: format, metaTable: table, metaVersion: version, metaRun: run,
			metaTTL: ttl, metaShards: shards, metaLastRebuildRun: rebuild, metaSchemeName: scheme}
		m, err := parseStateMeta(func(k string) (string, bool) { v, ok := kv[k]; return v, ok })
		if err != nil {
			if !errors.Is(err, ErrBadState) {
				t.Fatalf("error %v does not wrap ErrBadState", err)
			}
			return
		}
		if m.Shards == 0 || m.LastRebuildRun > m.Run {
			t.Fatalf("accepted an inconsistent state %+v", m)
		}
		back := m.keyValues(tableState, 0)
		again, err := parseStateMeta(func(k string) (string, bool) { v, ok := back[k]; return v, ok })
		if err != nil || again != m {
			t.Fatalf("round trip of %+v: %+v, %v", m, again, err)
		}
	})
}
