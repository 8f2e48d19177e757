// Package robustness holds the robustness test of shardkit's data layer
// (after etcd's tests/robustness): real `shardkit run` processes, clients
// that insert, replace, compare-and-set, delete and read a few shared keys
// through every instance, a nemesis that kills, stalls and restarts
// instances and cuts their raft links (an isolated leader, a partitioned
// minority, a flapping link), and checks of the recorded history: linearizability per key
// (porcupine), no write applied twice, no acknowledged write lost.
//
// docs/testing.md ("Robustness") tells how to run it, longer runs, how
// to read a failure's report, and the deliberate defects it must catch
// (SHARDKIT_ROBUSTNESS_DEFECT).
package robustness
