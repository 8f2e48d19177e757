package router

import (
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	datav1 "github.com/shardkit/shardkit/api/data/v1"
	"github.com/shardkit/shardkit/api/rpccodec"
)

// Watch implements DataService: a watch of a replicaset's buckets is
// served by a member of that replicaset, from its own state, never
// forwarded (a stream of changes through a second instance would cost
// that instance a copy of every event); the client's routing table names
// the members (client.Watch picks one).
func (r *Router) Watch(req *datav1.WatchRequest, ss grpc.ServerStreamingServer[datav1.WatchResponse]) error {
	l := r.local()
	if l == nil || l.ReplicasetID() != req.GetReplicasetId() {
		have := "no replicaset yet"
		if l != nil {
			have = "replicaset " + l.ReplicasetID()
		}
		return status.Errorf(codes.FailedPrecondition, "replicaset_id %q: this instance serves the watch of its own replicaset only (it holds %s); ask a member of %q", req.GetReplicasetId(), have, req.GetReplicasetId())
	}
	return l.Watch(ss.Context(), req, func(e rpccodec.Encoded) error { return ss.SendMsg(e) })
}
