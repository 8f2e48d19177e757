// Command goals-server is the example cache server of seed 000: it claims
// one shard of its datacenter through the lease table, loads the goals of
// that shard's counters and answers MatchSharded for them.
//
//	goals-server serve --dc dc1 --listen 127.0.0.1:7001 --lease-dsn leases.db --goals-dsn goals.db
//	goals-server seed --goals-dsn goals.db --counters 1000 --goals 8
//
// Exit status: 0 after SIGINT/SIGTERM (the lease is released), 2 for bad
// flags, 3 when the lease is lost (another server may own the shard now),
// 1 for other errors.
package main

import (
	"os"
)

func main() {
	os.Exit(run(os.Args[1:]))
}
