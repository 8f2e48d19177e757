// Package client is the one way Go code dials a shardkit cluster: the CLI,
// the cache template's lease store, the numerator's coordinator, the demo
// and the test harnesses all go through it, and so will every user's
// program.
//
// It owns: the transport credentials and dial options (DialOptions is the
// only function in shardkit that decides how a connection to an instance is
// secured), one connection per instance address, the choice of which
// instance to ask (the leader an earlier answer named first, then the
// configured peers in turn), the retries that are safe, and the mapping of
// gRPC answers to typed errors (Error, and the sentinels ErrUnavailable,
// ErrOutcomeUnknown, ErrInvalid, ...) that say whether a retry is safe.
//
// A Client is safe for concurrent use. Its calls are grouped by area:
// the cluster's own calls (Status, Expel) on Client, leases with fencing
// tickets on Client.Leases. The data layer's calls are added the same way.
//
// Ranges and scans: Space.Range reads one bucket's tuples within bounds
// that are leading parts of the primary key; Space.Scan is an iterator
// (iter.Seq2) over a whole space in (bucket, key) order, a page a call,
// each page asked of the replicaset that holds its bucket when it is
// asked, resumable from any tuple's cursor (docs/data.md, "Ranges and
// scans").
//
// Pipelining: the writes and point reads made on one Client to the same
// instance go on one DataService.Stream, each a message with an id,
// those made together sent together, each answered by its id; each
// caller gets its own answer or error, with its own context, exactly as
// alone (a broken stream is a broken connection: a write's outcome is
// unknown, and it is retried with its request id). With
// Config.DisableStream, point reads beyond Config.PipelineDepth under way
// to an address queue, and the next free slot sends all that wait (up to
// datav1.MaxMultiItems) as one DataService.Multi (writes too with
// Config.PipelineWrites). There is no timer: a call made alone goes out
// at once. An instance without Stream gets the Multi pipeline, one without
// Multi unary calls, from then on. Config.DisablePipelining turns it all
// off.
//
// It must never import shardkit's internal packages: it speaks only the
// public API in api/ and imports only gRPC and shardkit's public packages
// (api/, certs, proc, sharding, tuple), so a program that uses it links
// none of the cluster's code. It is not a module of its own: it shares
// the repository's go.mod, so a program that requires it has the
// repository's other requirements (arrow-go, the SQL drivers, ZooKeeper)
// in its module graph, though its build compiles only what the client's
// imports reach. It keeps no package-level state.
package client
