package cli

import (
	"os"
	"testing"
)

// asShardkit, set in a child's environment, makes the test binary run the
// shardkit command line on its arguments instead of the tests: tests that
// need a real process (to kill it -9) start the test binary itself, which
// is already built, as `shardkit`.
const asShardkit = "SHARDKIT_CLI_TEST_AS_SHARDKIT"

func TestMain(m *testing.M) {
	if os.Getenv(asShardkit) == "1" {
		os.Exit(Main(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
	}
	os.Exit(m.Run())
}
