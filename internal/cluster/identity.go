package cluster

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"

	"github.com/cockroachdb/pebble/v2"

	"github.com/shardkit/shardkit/internal/statusview"
	"github.com/shardkit/shardkit/internal/storage"
)

// Identity is what an instance keeps in its own database: who it is in
// which cluster. With it, a restart skips discovery (K5).
type Identity struct {
	ClusterID     string            `json:"cluster_id"`
	ClusterUUID   string            `json:"cluster_uuid,omitempty"`
	InstanceID    string            `json:"instance_id"`
	RaftID        uint64            `json:"raft_id"`
	UUID          string            `json:"uuid"`
	ReplicasetID  string            `json:"replicaset_id"`
	FailureDomain map[string]string `json:"failure_domain,omitempty"`
	// Peers are group 0's members as the join answer gave them, with the
	// commit index of that answer (K8).
	Peers            map[uint64]string `json:"peers,omitempty"`
	PeersCommitIndex uint64            `json:"peers_commit_index,omitempty"`
}

var keyIdentity = []byte(storage.PrefixLocal + "identity")

// ErrCorruptIdentity: the stored identity cannot be decoded.
var ErrCorruptIdentity = errors.New("cluster: stored instance identity is corrupt")

func loadIdentity(r pebble.Reader) (*Identity, error) {
	v, c, err := r.Get(keyIdentity)
	if errors.Is(err, pebble.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer c.Close()
	return decodeIdentity(v)
}

func decodeIdentity(v []byte) (*Identity, error) {
	id := &Identity{}
	if err := json.Unmarshal(v, id); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrCorruptIdentity, err)
	}
	if id.ClusterID == "" || id.InstanceID == "" || id.RaftID == 0 || id.UUID == "" {
		return nil, fmt.Errorf("%w: missing fields in %s", ErrCorruptIdentity, v)
	}
	return id, nil
}

func saveIdentity(db *pebble.DB, id *Identity) error {
	v, err := json.Marshal(id)
	if err != nil {
		return err
	}
	return db.Set(keyIdentity, v, pebble.Sync)
}

// checkRestart refuses a restart whose settings contradict the identity.
func (id *Identity) checkRestart(clusterID, instanceID, replicasetID string, fd map[string]string) error {
	switch {
	case clusterID != id.ClusterID:
		return fmt.Errorf("instance restarted with a different cluster_id: data dir has %q, --cluster-id is %q", id.ClusterID, clusterID)
	case instanceID != "" && instanceID != id.InstanceID:
		return fmt.Errorf("instance restarted with a different instance_id: data dir has %q, --instance-id is %q", id.InstanceID, instanceID)
	case replicasetID != "" && replicasetID != id.ReplicasetID:
		return fmt.Errorf("instance restarted with a different replicaset_id: data dir has %q, --replicaset-id is %q", id.ReplicasetID, replicasetID)
	}
	for k, v := range id.FailureDomain {
		if nv, ok := fd[k]; !ok || nv != v {
			given := "no " + k
			if ok {
				given = k + "=" + nv
			}
			return fmt.Errorf("instance restarted with a different failure_domain: data dir has %s=%s, --failure-domain has %s", k, v, given)
		}
	}
	if !maps.Equal(fd, id.FailureDomain) && len(fd) > len(id.FailureDomain) {
		return fmt.Errorf("instance restarted with a different failure_domain: data dir has %s, --failure-domain has %s", domainText(id.FailureDomain), domainText(fd))
	}
	return nil
}

// domainText shows failure-domain pairs as --failure-domain takes them
// (dc=a,rack=1, sorted, as status shows them), or none.
func domainText(fd map[string]string) string {
	if len(fd) == 0 {
		return "none"
	}
	return statusview.FormatFailureDomain(fd)
}
