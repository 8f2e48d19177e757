// Command shardkit is the single binary of the shardkit platform. All of its
// behaviour lives in internal/cli, reached through cmd/shardkit/app (which a
// binary with its own stored procedures calls the same way).
package main

import (
	"os"

	"github.com/shardkit/shardkit/cmd/shardkit/app"
)

func main() {
	os.Exit(app.Main(os.Args[1:]))
}
