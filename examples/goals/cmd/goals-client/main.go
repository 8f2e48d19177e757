// Command goals-client asks goals-servers through the cache template's
// fan-out client.
//
//	goals-client get --hosts hosts.txt --hit 42:1:https://site1.example/page/0
//	goals-client get --hosts hosts.txt --demo 100 --counters 100 --goals 8 --check
//	goals-client bench --hosts hosts.txt --requests 10000 --concurrency 4 --batch 30
//
// hosts.txt has one "DC HOST:PORT" per line and is re-read every ping
// period. Exit status: 0 on success, 1 when a Get failed or an answer was
// wrong, 2 for bad flags.
package main

import (
	"os"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}
