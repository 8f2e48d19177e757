package goals_test

// The "shardkit" lease backend needs a running cluster: the tests run a
// one-instance cluster inside the test process (internal/server, the code
// behind `shardkit run`, without its supervisor). Only this test file
// imports internal/server/servertest; goals-server reaches the cluster through the
// public api/cluster/v1 like any client.
