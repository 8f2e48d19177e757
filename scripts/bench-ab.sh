#!/usr/bin/env bash
# Two shardkit builds against each other on this machine, alternated run
# by run: for each round and each build (A first), start a fresh cluster of
# three instances (replication factor 3, one replicaset), warm it up, run
# `shardkit bench` once, print its figures, stop the cluster. Alternating
# keeps a change of the machine's load from favouring one build.
#
#   A=/path/to/old/shardkit B=/path/to/new/shardkit bash scripts/bench-ab.sh
#
# Settings (environment):
#   A, B          the two shardkit binaries (required)
#   WORKLOAD      bench workload (default get)
#   CLIENTS       bench clients (default 256)
#   KEYS          key range (default 1000, as scripts/bench-vs-etcd.sh)
#   DURATION      timed part of each run (default 10s)
#   WARMUP        an untimed run before it (default 4s)
#   ROUNDS        rounds of A then B (default 2)
#   PORT_BASE     instances listen on PORT_BASE+1..3, HTTP on PORT_BASE+11..13 (default 25400)
#   WORKDIR       data and logs (default a new directory under /var/tmp)
set -euo pipefail

: "${A:?set A to the first shardkit binary}" "${B:?set B to the second shardkit binary}"
WORKLOAD=${WORKLOAD:-get}
CLIENTS=${CLIENTS:-256}
KEYS=${KEYS:-1000}
DURATION=${DURATION:-10s}
WARMUP=${WARMUP:-4s}
ROUNDS=${ROUNDS:-2}
PORT_BASE=${PORT_BASE:-25400}
WORKDIR=${WORKDIR:-$(mktemp -d /var/tmp/bench-ab.XXXXXX)}

log() { printf 'bench-ab: %s\n' "$*" >&2; }
PEERS=$((PORT_BASE + 1)),$((PORT_BASE + 2)),$((PORT_BASE + 3))
PEERS=127.0.0.1:${PEERS//,/,127.0.0.1:}
PIDS=()

stop() {
  ((${#PIDS[@]} > 0)) || return 0
  kill "${PIDS[@]}" 2>/dev/null || true
  for _ in $(seq 1 60); do
    kill -0 "${PIDS[@]}" 2>/dev/null || break
    sleep 0.5
  done
  PIDS=()
}
trap stop EXIT

start() { # start BIN DIR
  local bin=$1 dir=$2 n online=0
  rm -rf "$dir"
  mkdir -p "$dir/logs"
  for n in 1 2 3; do
    "$bin" run --instance-id "s$n" --listen "127.0.0.1:$((PORT_BASE + n))" \
      --http-listen "127.0.0.1:$((PORT_BASE + 10 + n))" --peer "$PEERS" \
      --data-dir "$dir/s$n" --init-replication-factor 3 --shutdown-timeout 5s \
      </dev/null >"$dir/logs/s$n.log" 2>&1 &
    PIDS+=($!)
  done
  for _ in $(seq 1 240); do
    online=$("$bin" status --peer "$PEERS" --format json --timeout 5s 2>/dev/null |
      tr -d ' \n' | grep -o '"current_grade":{"variant":"Online"' | wc -l || true)
    ((online == 3)) && return 0
    sleep 0.5
  done
  log "the cluster of $bin did not come up; logs in $dir/logs"
  exit 1
}

log "A=$A B=$B workload $WORKLOAD, $CLIENTS clients, $KEYS keys, $DURATION (after $WARMUP), $ROUNDS rounds; work in $WORKDIR"
for round in $(seq 1 "$ROUNDS"); do
  for which in A B; do
    bin=${!which}
    start "$bin" "$WORKDIR/$which"
    "$bin" bench --peer "$PEERS" --workload "$WORKLOAD" --clients "$CLIENTS" --keys "$KEYS" \
      --duration "$WARMUP" --format json >/dev/null 2>&1
    out=$("$bin" bench --peer "$PEERS" --workload "$WORKLOAD" --clients "$CLIENTS" --keys "$KEYS" \
      --duration "$DURATION" --format json 2>/dev/null)
    ops=$(grep -o '"ops_per_s":[0-9.]*' <<<"$out" | cut -d: -f2)
    p99=$(grep -o '"p99_ms":[0-9.]*' <<<"$out" | cut -d: -f2)
    errors=$(grep -o '"errors":[0-9]*' <<<"$out" | cut -d: -f2)
    printf 'round %d %s: %s %d clients: %.0f ops/s, p99 %s ms, errors %s\n' "$round" "$which" "$WORKLOAD" "$CLIENTS" "$ops" "$p99" "$errors"
    stop
  done
done
