package robustness

import "github.com/shardkit/shardkit/tests/framework"

// verifyData stops every instance and checks each one's data dir with
// `shardkit check-data` (framework.CheckData): every bucket's counts
// against its tuples, nothing left of a bucket given away, tombstones
// only in a bucket being received, no event above its bucket's revision;
// and the members of a replicaset hold the same data where they stopped
// at one applied index, or apart by entries that changed no data (a new
// leader's empty entry). A write counted twice, or a row lost on one member and
// written again, shows here with the instance and the bucket, where Count
// shows only a total and every read only the row written again. It runs
// last: the instances do not come back.
func (c *cluster) verifyData() {
	c.t.Helper()
	if framework.CheckData(c.t, c.insts) == 0 {
		c.t.Errorf("data check: no replicaset's data found in any data dir")
	}
}
