// Command shardkit is the single binary of the shardkit platform. All of its
// behaviour lives in internal/cli; this file only hands the arguments over.
package main

import (
	"os"

	"github.com/shardkit/shardkit/internal/cli"
)

func main() {
	os.Exit(cli.Main(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}
