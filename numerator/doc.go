// Package numerator gives every offer of an index generation a persistent
// <shard_id, doc_id> (seed 003, N1–N9).
//
// A run sort-merges the previous state (one Parquet table) with the
// generation's offers (another) shard by shard: known keys keep their ids,
// keys unseen for more than TTL runs are expired and free their ids, new keys
// take freed ids first and then max+1. Shards whose holes pass a threshold
// are rebuilt (ids dense from 0 again). The state carries its version
// T.S.V.G, run counter and scheme in the Parquet key-value metadata.
//
// It owns the algorithm, the state format, external sorting with spill files
// and the Parquet I/O of its tables. Coordination between masters lives in
// numerator/coordinator; RunCoordinated is a run as one master's turn there. It must never overwrite an existing output, never
// change its input tables, never hold more than its memory budget of rows in
// memory, and never import internal/server.
package numerator
