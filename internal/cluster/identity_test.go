package cluster

import (
	"strings"
	"testing"
)

func TestCheckRestartRefusesChangedIdentity(t *testing.T) {
	id := &Identity{ClusterID: "c", InstanceID: "i1", RaftID: 1, UUID: "u", ReplicasetID: "r1", FailureDomain: map[string]string{"dc": "a"}}
	ok := []struct {
		cluster, inst, rs string
		fd                map[string]string
	}{
		{"c", "i1", "r1", map[string]string{"dc": "a"}},
		{"c", "", "", map[string]string{"dc": "a"}}, // ids not given: keep the stored ones
	}
	for _, tc := range ok {
		if err := id.checkRestart(tc.cluster, tc.inst, tc.rs, tc.fd); err != nil {
			t.Errorf("%+v refused: %v", tc, err)
		}
	}
	bad := []struct {
		cluster, inst, rs string
		fd                map[string]string
		want              string
	}{
		{"x", "i1", "r1", map[string]string{"dc": "a"}, "different cluster_id"},
		{"c", "i9", "r1", map[string]string{"dc": "a"}, "different instance_id"},
		{"c", "i1", "r9", map[string]string{"dc": "a"}, "different replicaset_id"},
		{"c", "i1", "r1", map[string]string{"dc": "b"}, "different failure_domain: data dir has dc=a, --failure-domain has dc=b"},
		{"c", "i1", "r1", nil, "different failure_domain: data dir has dc=a, --failure-domain has no dc"},
		{"c", "i1", "r1", map[string]string{"dc": "a", "rack": "1"}, "different failure_domain: data dir has dc=a, --failure-domain has dc=a,rack=1"},
	}
	for _, tc := range bad {
		err := id.checkRestart(tc.cluster, tc.inst, tc.rs, tc.fd)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: got %v, want %q", tc, err, tc.want)
		}
	}
	// Failure domains are shown as --failure-domain takes them, not as Go maps.
	none := &Identity{ClusterID: "c", InstanceID: "i1", RaftID: 1, UUID: "u", ReplicasetID: "r1"}
	err := none.checkRestart("c", "i1", "r1", map[string]string{"dc": "a"})
	if want := "instance restarted with a different failure_domain: data dir has none, --failure-domain has dc=a"; err == nil || err.Error() != want {
		t.Errorf("got %v, want %q", err, want)
	}
}

func FuzzDecodeIdentity(f *testing.F) {
	f.Add([]byte(`{"cluster_id":"c","instance_id":"i1","raft_id":1,"uuid":"u","replicaset_id":"r1"}`))
	f.Add([]byte(`{"raft_id":-1}`))
	f.Add([]byte(`[]`))
	f.Fuzz(func(t *testing.T, b []byte) {
		id, err := decodeIdentity(b)
		if err == nil && (id.RaftID == 0 || id.ClusterID == "" || id.InstanceID == "" || id.UUID == "") {
			t.Fatalf("accepted an identity without its required fields: %+v", id)
		}
	})
}
