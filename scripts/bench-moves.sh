#!/usr/bin/env bash
# Bucket moves under a write load: a scale out from
# one replicaset to two while clients replace rows, measured end to end. The
# figures and how to read them are in docs/benchmarks.md ("Bucket moves
# under load").
#
#   bash scripts/bench-moves.sh                          # defaults, ~5 minutes
#   ROWS=600000 MAX_SENDING=300 MAX_RECEIVING=300 bash scripts/bench-moves.sh
#
# What it does:
#   1. builds shardkit (unless SHARDKIT_BIN) into a temporary directory and
#      starts three instances on loopback with replication factor 3 (one
#      replicaset), at --log-level debug;
#   2. preloads ROWS rows of VALUE_SIZE bytes into the space "bench"
#      (`shardkit bench --workload insert`), ROWS/3000 per bucket;
#   3. idle: IDLE_RUNS runs of CHUNK of `shardkit bench --workload replace`
#      over the same keys (no moves): the p99 to compare with;
#   4. starts the same replace load again, as back-to-back runs of CHUNK
#      (the bench prints its result only when a run ends, so the load under
#      the moves is a series of runs, not one), waits LEAD_IN seconds, and
#      starts three more instances: they make a second replicaset, the
#      governor gives it weight 1 and the rebalancer moves 1500 buckets to it
#      with no command; it polls `shardkit rebalance status` every second
#      until nothing is left to move, then lets the load run end;
#   5. counts the rows per replicaset (`shardkit map-call count`): the rows
#      on the new replicaset are the tuples moved, and the sum must be ROWS;
#      then AFTER_RUNS runs of the same load on the balanced cluster (the
#      p99 of the new layout without moves);
#   5b. the drain (DRAIN=1): the same load again, and after LEAD_IN seconds
#      the new replicaset's weight is set to 0 (`shardkit replicaset weight
#      RS 0`): its 1500 buckets move back while the load runs, polled as in
#      4 until it holds none. Its idle is the balanced runs of 5: the same
#      six instances and raft groups, so its p99 ratio is the moves' own
#      cost, which the scale out's ratio against idle mixes with the cost of
#      doubling the cluster on the same cores;
#   6. reads the move times from the instances' debug logs (for the scale
#      out and the drain apart, by time): the move window
#      (the first "rebalancer: moving a bucket" to the last "bucket moved",
#      both on the group-0 leader) and, per bucket, how long it refused
#      writes: from its source leader's "bucket state" line recording
#      SENDING to group 0's "bucket move" line recording PHASE_COPY (the
#      switch; from then the destination takes the bucket's writes), and
#      the mean time of each step of a move (where a move's time goes);
#   7. prints a summary and appends every bench run's JSON line and one
#      summary line to the results file. The summary also gives, for the
#      idle and the balanced runs, the mean synced raft persist (from each
#      instance's /metrics) and the servers' CPU per write (/proc): what
#      the doubled cluster costs on the same machine with no move running;
#      and for the scale out and the drain, the six instances' memtable
#      flushes, ingests and tables ingested over the memtable (/metrics).
#
# Tuples moved per second = rows on the new replicaset at the end / the move
# window. Write p99 "during the moves" is over the load runs that overlap the
# window from the start of instances 4-6 to balanced: the median and the
# largest of their p99s (the p99 of all of their calls together is at most
# the largest). A run that overlaps the window counts whole, calls made
# before and after the moves too, so CHUNK must be short next to the window:
# the moves take 3-20 s, and runs of 10 s (the default until 2026-11-25)
# halved the p99 of a 7 s window (docs/benchmarks.md, "Shorter load runs").
# Errors are the bench's failed calls in those runs. The
# longest single successful write (the bench's max_ms) bounds from above how
# long any write waited on a bucket, as seen by a client.
#
# Environment (defaults in brackets):
#   ROWS        rows preloaded, keys 0..ROWS-1, and the replace load's key range [300000]
#   VALUE_SIZE  bytes per value [100]
#   CLIENTS     concurrent calls of the load [64]
#   CONNS       client connections shared by the clients [16]
#   CHUNK       length of each load run: Ns or Nm [3s]
#   IDLE_RUNS   load runs before the scale out (the idle p99) [5]
#   AFTER_RUNS  load runs once balanced (two replicasets, no moves) [IDLE_RUNS]
#   LEAD_IN     seconds of load before instances 4-6 start, and before the drain [5]
#   DRAIN       1: drain the new replicaset after the balanced runs (5b); 0: stop there [1]
#   MAX_SENDING, MAX_RECEIVING  when set, `shardkit rebalance config
#               --max-sending/--max-receiving` before the scale out (the
#               defaults are 100 and 100, mover.DefaultMaxSending/Receiving)
#   COPY_RATE   when set, `shardkit rebalance config --copy-rate` before the
#               scale out: bytes of tuples per second a replicaset copies in,
#               e.g. 4MiB (default: no limit)
#   COPY_PACE   when set (auto or off), `shardkit rebalance config --copy-pace`
#               before the scale out: off, the copy does not yield to the
#               clients' writes by itself (default: auto, it does)
#   RATE        when set, every load run is paced at RATE writes a second in all
#               (`shardkit bench --rate`: latency from each call's scheduled
#               start), the latency of a given load rather than of a saturated
#               cluster; default: a closed loop of CLIENTS calls
#   MOVE_TIMEOUT  seconds from the scale out until balanced, else it fails [1200]
#   READY_TIMEOUT seconds for started instances to become Online, else it fails [120]
#   LOG_LEVEL   the instances' --log-level [debug]; the per-bucket figures need debug
#   RESULTS     results file (JSON lines) [/var/tmp/bench-moves-<UTC time>.jsonl]
#   WORKDIR_PARENT  where the temporary data dirs go; local disk [/var/tmp]
#   SHARDKIT_BIN    a prebuilt shardkit binary (else built from this repo)
#   SHARDKIT_PORT_BASE [24400], SHARDKIT_HTTP_PORT_BASE [24420]: instance N on BASE+N;
#               below the ephemeral range (32768-60999 here), so that no outgoing
#               connection holds an instance's port when s4-s6 start minutes later
#   PIN=1       each replicaset's instances on a CPU of their own (`taskset`:
#               s1-s3 on CPU 0, s4-s6 on CPU 1; the load generator on any),
#               as when each replicaset has machines of its own: the p99
#               during the moves is then their own cost, not that of six
#               instances sharing every core [0]
#   KEEP_WORKDIR=1  keep the data dirs and logs (they are kept anyway on failure)
#   PROFILE     when set to N, the instances run with --enable-pprof and, from
#               s4-s6's start, every instance's CPU is profiled for N seconds
#               into WORKDIR/profiles/sK.pprof, from the balanced runs' start
#               into sK-balanced.pprof, and from the drain's weight change
#               into sK-drain.pprof (the moves start ~1 s after s4-s6;
#               read with `go tool pprof -top BIN FILE`); implies KEEP_WORKDIR
#
# Everything it started is stopped on exit, by pid; nothing else is.
set -euo pipefail
export LC_ALL=C TZ=UTC # UTC: the instances' log times are read back as epoch seconds

REPO=$(cd "$(dirname "$0")/.." && pwd)

ROWS=${ROWS:-300000}
VALUE_SIZE=${VALUE_SIZE:-100}
CLIENTS=${CLIENTS:-64}
CONNS=${CONNS:-16}
CHUNK=${CHUNK:-3s}
IDLE_RUNS=${IDLE_RUNS:-5}
AFTER_RUNS=${AFTER_RUNS:-$IDLE_RUNS}
LEAD_IN=${LEAD_IN:-5}
DRAIN=${DRAIN:-1}
MAX_SENDING=${MAX_SENDING:-}
MAX_RECEIVING=${MAX_RECEIVING:-}
COPY_RATE=${COPY_RATE:-}
COPY_PACE=${COPY_PACE:-}
RATE=${RATE:-}
MOVE_TIMEOUT=${MOVE_TIMEOUT:-1200}
LOG_LEVEL=${LOG_LEVEL:-debug}
STAMP=$(date -u +%Y%m%dT%H%M%SZ)
RESULTS=${RESULTS:-/var/tmp/bench-moves-$STAMP.jsonl}
WORKDIR_PARENT=${WORKDIR_PARENT:-/var/tmp}
SHARDKIT_PORT_BASE=${SHARDKIT_PORT_BASE:-24400}
SHARDKIT_HTTP_PORT_BASE=${SHARDKIT_HTTP_PORT_BASE:-24420}
READY_TIMEOUT=${READY_TIMEOUT:-120}
PROFILE=${PROFILE:-}
PIN=${PIN:-0}
NCPU=$(nproc)
if [[ -n $PROFILE ]]; then KEEP_WORKDIR=1; fi
LOAD_ARGS=()
if [[ -n $RATE ]]; then LOAD_ARGS=(--rate "$RATE"); fi

log() { printf 'bench-moves: %s\n' "$(date -u +%H:%M:%S) $*" >&2; }
die() {
  log "error: $*"
  exit 1
}

# ---------------------------------------------------------------- settings

for v in ROWS VALUE_SIZE CLIENTS CONNS IDLE_RUNS AFTER_RUNS LEAD_IN MOVE_TIMEOUT ${PROFILE:+PROFILE}; do
  [[ ${!v} =~ ^[0-9]+$ ]] || die "$v: '${!v}' is not a number"
done
((ROWS >= 3000)) || die "ROWS: $ROWS is fewer than the 3000 buckets"
((CLIENTS >= 1 && CONNS >= 1 && IDLE_RUNS >= 1)) || die "CLIENTS, CONNS and IDLE_RUNS must be at least 1"
for v in MAX_SENDING MAX_RECEIVING RATE; do
  [[ -z ${!v} || ${!v} =~ ^[1-9][0-9]*$ ]] || die "$v: '${!v}' is not a positive number"
done
[[ $DRAIN =~ ^[01]$ ]] || die "DRAIN: '$DRAIN' is not 0 or 1"
[[ -z $COPY_PACE || $COPY_PACE =~ ^(auto|off)$ ]] || die "COPY_PACE: '$COPY_PACE' is not auto or off"
[[ $PIN =~ ^[01]$ ]] || die "PIN: '$PIN' is not 0 or 1"
PIN_NOTE=''
if [[ $PIN == 1 ]]; then
  PIN_NOTE='; each replicaset on a CPU of its own'
  ((NCPU >= 2)) || die "PIN=1 needs two CPUs, this machine has $NCPU"
  command -v taskset >/dev/null || die "PIN=1 needs taskset (util-linux)"
fi
((DRAIN == 0 || AFTER_RUNS >= 1)) || die "DRAIN=1 needs AFTER_RUNS >= 1: the balanced runs are the drain's idle"
[[ $CHUNK =~ ^[1-9][0-9]*(s|m)$ ]] || die "CHUNK: '$CHUNK' is not like 10s or 1m"
[[ $LOG_LEVEL =~ ^(debug|info|warn|error)$ ]] || die "LOG_LEVEL: '$LOG_LEVEL' is not debug, info, warn or error"

SK_ADDRS=()
for n in 1 2 3 4 5 6; do SK_ADDRS+=("127.0.0.1:$((SHARDKIT_PORT_BASE + n))"); done
# The first three are everyone's discovery peers, the bench's and the
# commands' too.
SK_PEERS=$(
  IFS=,
  echo "${SK_ADDRS[*]:0:3}"
)

# ---------------------------------------------------------------- cleanup

WORK='' FAILED=1 STARTED=0
SK_PIDS=() LOAD_PID='' PROFILE_PIDS=()

# ours PID: PID runs and is one of ours (its command line names our work dir).
ours() {
  local cmd
  [[ $1 =~ ^[0-9]+$ ]] || return 1
  cmd=$(tr '\0' ' ' 2>/dev/null <"/proc/$1/cmdline") || return 1
  [[ -n $WORK && $cmd == *"$WORK"* ]]
}

# our_bench PID: PID is a `shardkit bench` against our instances.
our_bench() {
  local cmd
  [[ $1 =~ ^[0-9]+$ ]] || return 1
  cmd=$(tr '\0' ' ' 2>/dev/null <"/proc/$1/cmdline") || return 1
  [[ $cmd == *" bench "* && $cmd == *"--peer $SK_PEERS "* ]]
}

# stop_servers PID...: SIGTERM those of ours, wait up to 40 s (a shardkit
# supervisor kills its worker --shutdown-timeout + 15 s after the signal),
# then SIGKILL what is left.
stop_servers() {
  local pid left deadline=$((SECONDS + 40))
  for pid in "$@"; do
    if ours "$pid"; then kill -TERM "$pid" 2>/dev/null || true; fi
  done
  while :; do
    left=()
    for pid in "$@"; do
      if ours "$pid"; then left+=("$pid"); fi
    done
    ((${#left[@]} > 0)) || break
    if ((SECONDS >= deadline)); then
      log "still running after 40s, killing: ${left[*]}"
      kill -KILL "${left[@]}" 2>/dev/null || true
      sleep 0.5
      break
    fi
    sleep 0.2
  done
}

# stop_load: end the background load loop and the bench run it waits for.
stop_load() {
  local bpid=''
  [[ -n $WORK ]] && touch "$WORK/stop-load"
  if [[ -n $LOAD_PID ]]; then
    kill -TERM "$LOAD_PID" 2>/dev/null || true
    wait "$LOAD_PID" 2>/dev/null || true
    LOAD_PID=''
  fi
  if [[ -n $WORK && -r $WORK/load.pid ]]; then read -r bpid <"$WORK/load.pid" || true; fi
  if our_bench "$bpid"; then kill -TERM "$bpid" 2>/dev/null || true; fi
}

cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  stop_load
  if ((${#SK_PIDS[@]} > 0)); then
    log "stopping the instances this run started (supervisor pids ${SK_PIDS[*]})"
    stop_servers "${SK_PIDS[@]}"
  fi
  for p in "${PROFILE_PIDS[@]}"; do # a profile's curl still running (its pid, checked, not reused)
    if grep -qa "$WORK/profiles" "/proc/$p/cmdline" 2>/dev/null; then kill "$p" 2>/dev/null || true; fi
  done
  wait 2>/dev/null || true
  if [[ -n $WORK && -d $WORK ]]; then
    if ((FAILED == 0 || STARTED == 0)) && [[ ${KEEP_WORKDIR:-} != 1 ]]; then
      rm -rf "$WORK"
    else
      log "data dirs and logs kept in $WORK (remove with: rm -rf $WORK)"
    fi
  fi
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# ---------------------------------------------------------------- helpers

# port_free PORT: nothing accepts connections on 127.0.0.1:PORT.
port_free() { ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# fail_log NAME LOG MESSAGE
fail_log() {
  log "error: $1 $3; log: $2"
  if [[ -r $2 ]]; then
    log "last lines of $2:"
    tail -n 30 "$2" >&2
  fi
  exit 1
}

# jget JSON KEY: the value of a top-level scalar KEY of a flat JSON object.
jget() {
  awk -v k="$2" '{
    if (match($0, "\"" k "\"[ \t]*:[ \t]*(\"[^\"]*\"|[-+0-9.eE]+|null|true|false)")) {
      r = substr($0, RSTART, RLENGTH); sub(/^"[^"]*"[ \t]*:[ \t]*/, "", r); gsub(/"/, "", r); print r
    }
  }' <<<"$1"
}

# one_json FILE: the JSON object in FILE on one line (from the first { to the last }).
one_json() { tr '\n' ' ' <"$1" | tr -s ' ' | sed -e 's/^[^{]*//' -e 's/}[^}]*$/}/'; }

# loadavg: the 1-minute load average now.
loadavg() {
  local l
  read -r l _ </proc/loadavg
  printf '%s' "$l"
}

SK_STATUS=''
sk_status() { SK_STATUS=$(timeout 15 "$SK" status --peer "$SK_PEERS" --format json --timeout 5s 2>/dev/null | tr -d ' \t\n'); }

# sk_online N: N instances Online.
sk_online() {
  local online
  sk_status || return 1
  online=$(grep -o '"current_grade":{"variant":"Online"' <<<"$SK_STATUS" | wc -l)
  ((online == $1))
}

# start_instance N: shardkit run for instance sN, in the background.
start_instance() {
  local n=$1 pin=()
  if [[ $PIN == 1 ]]; then pin=(taskset -c "$(((n - 1) / 3 % NCPU))"); fi
  "${pin[@]}" "$SK" run --instance-id "s$n" \
    --listen "${SK_ADDRS[n - 1]}" \
    --http-listen "127.0.0.1:$((SHARDKIT_HTTP_PORT_BASE + n))" \
    --peer "$SK_PEERS" --data-dir "$WORK/shardkit/s$n" \
    --init-replication-factor 3 --shutdown-timeout 5s --log-level "$LOG_LEVEL" \
    ${PROFILE:+--enable-pprof} </dev/null >"$WORK/logs/shardkit-s$n.log" 2>&1 &
  SK_PIDS+=($!)
}

# wait_online N FIRST LAST: until N instances are Online, failing when one
# of instances FIRST..LAST exits.
wait_online() {
  local want=$1 first=$2 last=$3 n deadline=$((SECONDS + READY_TIMEOUT))
  until sk_online "$want"; do
    for ((n = first; n <= last; n++)); do
      kill -0 "${SK_PIDS[n - 1]}" 2>/dev/null || fail_log "shardkit s$n" "$WORK/logs/shardkit-s$n.log" "exited"
    done
    ((SECONDS < deadline)) || fail_log shardkit "$WORK/logs/shardkit-s$first.log" "not $want instances Online within ${READY_TIMEOUT}s"
    sleep 0.5
  done
}

check_alive() {
  local n
  for n in "${!SK_PIDS[@]}"; do
    ours "${SK_PIDS[n]}" || fail_log "shardkit s$((n + 1))" "$WORK/logs/shardkit-s$((n + 1)).log" "supervisor (pid ${SK_PIDS[n]}) is gone"
  done
}

# bench_run TAG ARGS...: one `shardkit bench` run; its JSON object, with the
# tag, the phase's facts and the load average, is appended to RESULTS and
# left in BENCH_JSON.
BENCH_JSON=''
bench_run() {
  local tag=$1 out err rc=0 l0 started
  shift
  out=$WORK/runs/$tag.json err=$WORK/logs/$tag.stderr
  l0=$(loadavg)
  started=$(date -u +%Y-%m-%dT%H:%M:%SZ)
  timeout -k 10 900 "$SK" bench --peer "$SK_PEERS" --clients "$CLIENTS" --conns "$CONNS" \
    --value-size "$VALUE_SIZE" --timeout 5s --format json "$@" >"$out" 2>"$err" || rc=$?
  ((rc == 0)) || fail_log "bench $tag" "$err" "exited with status $rc"
  BENCH_JSON=$(one_json "$out")
  [[ $(jget "$BENCH_JSON" ops) =~ ^[0-9]+$ ]] || fail_log "bench $tag" "$err" "printed no result: $(head -c 300 "$out")"
  BENCH_JSON="{\"bench\":\"moves\",\"phase\":\"$tag\",${BENCH_JSON#\{}"
  BENCH_JSON="${BENCH_JSON%\}},\"load1\":$l0,\"started_at\":\"$started\"}"
  printf '%s\n' "$BENCH_JSON" >>"$RESULTS"
}

# load_loop PREFIX: back-to-back replace runs of CHUNK until
# $WORK/stop-load exists; each run's JSON in runs/PREFIX-I.json, and
# "I START END RC LOAD1" (epoch seconds) in runs/PREFIX-runs.
load_loop() {
  local prefix=$1 i=0 t0 t1 rc
  trap - EXIT
  trap 'exit 143' TERM
  while [[ ! -e $WORK/stop-load ]]; do
    i=$((i + 1))
    t0=$EPOCHREALTIME rc=0
    "$SK" bench --peer "$SK_PEERS" --workload replace --keys "$ROWS" --duration "$CHUNK" --clients "$CLIENTS" \
      --conns "$CONNS" --value-size "$VALUE_SIZE" --timeout 5s --format json --progress "${LOAD_ARGS[@]}" \
      </dev/null >"$WORK/runs/$prefix-$i.json" 2>"$WORK/logs/$prefix-$i.stderr" &
    echo "$!" >"$WORK/load.pid"
    wait "$!" || rc=$?
    t1=$EPOCHREALTIME
    printf '%s %s %s %s %s\n' "$i" "$t0" "$t1" "$rc" "$(loadavg)" >>"$WORK/runs/$prefix-runs"
  done
}

# rs_field STATUS RS FIELD: FIELD of replicaset RS in a compact rebalance
# status JSON (0 when absent: zero fields are left out).
rs_field() {
  local obj v
  obj=$(grep -o "{\"replicaset_id\":\"$2\"[^{}]*}" <<<"$1" | head -n1) || true
  v=$(jget "$obj" "$3")
  printf '%s' "${v:-0}"
}

# counts: COUNTS = "rs count" lines of `shardkit map-call count ["bench"]`.
COUNTS=''
counts() {
  local out
  out=$(timeout 60 "$SK" map-call count '["bench"]' --peer "$SK_PEERS" --timeout 30s 2>&1) || die "map-call count failed: $out"
  COUNTS=$(sed -n 's/.*"replicaset":"\([^"]*\)","result":\[\([0-9]*\)\].*/\1 \2/p' <<<"$out")
  [[ -n $COUNTS ]] || die "map-call count printed no counts: $out"
}

# ---------------------------------------------------------------- build

WORK=$(mktemp -d "$WORKDIR_PARENT/bench-moves.XXXXXX")
mkdir -p "$WORK/bin" "$WORK/logs" "$WORK/runs"
log "work dir $WORK"

if [[ -n ${SHARDKIT_BIN:-} ]]; then
  [[ -x $SHARDKIT_BIN ]] || die "SHARDKIT_BIN=$SHARDKIT_BIN is not an executable"
  SK=$(cd "$(dirname "$SHARDKIT_BIN")" && pwd)/$(basename "$SHARDKIT_BIN")
else
  log "building shardkit (./cmd/shardkit)"
  (cd "$REPO" && go build -o "$WORK/bin/shardkit" ./cmd/shardkit) || die "building shardkit failed"
  SK=$WORK/bin/shardkit
fi
for c in bench "rebalance status" map-call; do
  # shellcheck disable=SC2086 # the command's words
  timeout 20 "$SK" $c --help >/dev/null 2>&1 || die "$SK has no working '$c' command"
done

# ---------------------------------------------------------------- cluster

for n in 1 2 3 4 5 6; do
  if ! port_free $((SHARDKIT_PORT_BASE + n)) || ! port_free $((SHARDKIT_HTTP_PORT_BASE + n)); then
    die "port $((SHARDKIT_PORT_BASE + n)) or $((SHARDKIT_HTTP_PORT_BASE + n)) is in use; set SHARDKIT_PORT_BASE / SHARDKIT_HTTP_PORT_BASE"
  fi
done
mkdir -p "$(dirname "$RESULTS")"
: >>"$RESULTS"
STARTED=1
for n in 1 2 3; do start_instance "$n"; done
log "instances s1 s2 s3 (supervisor pids ${SK_PIDS[*]}) on $SK_PEERS, log level $LOG_LEVEL"
wait_online 3 1 3
log "three instances Online (load average $(loadavg))"

# ---------------------------------------------------------------- preload, idle

log "preloading $ROWS rows of $VALUE_SIZE bytes"
bench_run preload --workload insert --keys "$ROWS" --count "$ROWS"
PRELOAD_JSON=$BENCH_JSON
[[ $(jget "$PRELOAD_JSON" errors) == 0 ]] || die "the preload had errors: $PRELOAD_JSON"
log "    $(jget "$PRELOAD_JSON" ops) rows in $(jget "$PRELOAD_JSON" duration_s) s"
counts
log "rows per replicaset: $(tr '\n' ' ' <<<"$COUNTS")"
RS_OLD=$(awk 'NR == 1 { print $1 }' <<<"$COUNTS")

# persist_totals FIRST LAST: the seconds and the count of the synced raft
# persists (shardkit_raft_persist_seconds{sync="true"}: a round's write
# with its fsync) of instances FIRST..LAST together, from their /metrics.
persist_totals() {
  local n
  for ((n = $1; n <= $2; n++)); do
    curl -sS --max-time 5 "http://127.0.0.1:$((SHARDKIT_HTTP_PORT_BASE + n))/metrics" 2>/dev/null || true
  done | awk '/^shardkit_raft_persist_seconds_(sum|count)\{sync="true"\}/ { if ($1 ~ /_sum/) s += $2; else c += $2 }
    END { printf "%.6f %d\n", s, c }'
}

# storage_totals FIRST LAST: the memtable flushes, ingests and tables
# ingested over the memtable (flushables) of instances FIRST..LAST
# together so far, from their /metrics (an instance not yet started
# counts 0).
storage_totals() {
  local n
  for ((n = $1; n <= $2; n++)); do
    curl -sS --max-time 5 "http://127.0.0.1:$((SHARDKIT_HTTP_PORT_BASE + n))/metrics" 2>/dev/null || true
  done | awk '/^shardkit_storage_flushes_total / { f += $2 } /^shardkit_storage_ingests_total / { i += $2 }
    /^shardkit_storage_flushable_tables_total / { t += $2 } END { printf "%d %d %d\n", f, i, t }'
}

# storage_delta BEFORE AFTER: "F flushes, I ingests, T tables over the
# memtable" between two storage_totals.
storage_delta() {
  awk -v b="$1" -v a="$2" 'BEGIN { split(b, x, " "); split(a, y, " ")
    printf "%d flushes, %d ingests, %d tables over the memtable\n", y[1] - x[1], y[2] - x[2], y[3] - x[3] }'
}

# persist_mean BEFORE AFTER SECONDS: "M ms, R/s": the mean synced persist
# between two persist_totals, and how many a second over SECONDS.
persist_mean() {
  awk -v b="$1" -v a="$2" -v t="$3" 'BEGIN { split(b, x, " "); split(a, y, " "); n = y[2] - x[2]
    if (n <= 0 || t <= 0) { print "n/a"; exit }
    printf "%.2f ms, %.0f/s\n", 1000 * (y[1] - x[1]) / n, n / t }'
}

# server_ticks FIRST LAST: user+system CPU (clock ticks) of instances
# FIRST..LAST so far: their supervisors and the supervisors' children.
server_ticks() {
  local n pid p
  for ((n = $1; n <= $2; n++)); do
    pid=${SK_PIDS[n - 1]}
    for p in "$pid" $(ps --ppid "$pid" -o pid= 2>/dev/null); do
      cat "/proc/$p/stat" 2>/dev/null || true
    done
  done | awk '{ sub(/^.*\) /, ""); t += $12 + $13 } END { print t + 0 }'
}

# cpu_per_op TICKS0 TICKS1 OPS: server CPU-µs per operation.
cpu_per_op() {
  awk -v a="$1" -v b="$2" -v n="$3" -v hz="$(getconf CLK_TCK)" 'BEGIN { if (n <= 0) { print "n/a"; exit }
    printf "%.0f\n", (b - a) / hz * 1e6 / n }'
}

IDLE_P99S='' IDLE_MAXS='' IDLE_ERRS=0 IDLE_OPS='' IDLE_LOADS='' IDLE_N=0
# steady_run TAG LABEL I N: run I of N of the replace load with no moves
# (idle, or balanced after them), its JSON in BENCH_JSON, logged.
steady_run() {
  check_alive
  bench_run "$1-$3" --workload replace --keys "$ROWS" --duration "$CHUNK" "${LOAD_ARGS[@]}"
  log "$2 run $3/$4: $(jget "$BENCH_JSON" ops_per_s | awk '{ printf "%.0f", $1 }') ops/s, p99 $(jget "$BENCH_JSON" p99_ms) ms, max $(jget "$BENCH_JSON" max_ms) ms, errors $(jget "$BENCH_JSON" errors) (load average $(jget "$BENCH_JSON" load1))"
}

IDLE_PERSIST0=$(persist_totals 1 3) IDLE_T0=$EPOCHREALTIME IDLE_TICKS0=$(server_ticks 1 3)
for ((i = 1; i <= IDLE_RUNS; i++)); do
  steady_run idle idle "$i" "$IDLE_RUNS"
  IDLE_P99S+=" $(jget "$BENCH_JSON" p99_ms)"
  IDLE_MAXS+=" $(jget "$BENCH_JSON" max_ms)"
  IDLE_OPS+=" $(jget "$BENCH_JSON" ops_per_s)"
  IDLE_LOADS+=" $(jget "$BENCH_JSON" load1)"
  IDLE_ERRS=$((IDLE_ERRS + $(jget "$BENCH_JSON" errors)))
  IDLE_N=$((IDLE_N + $(jget "$BENCH_JSON" ops)))
done
IDLE_CPU=$(cpu_per_op "$IDLE_TICKS0" "$(server_ticks 1 3)" "$IDLE_N")
IDLE_PERSIST=$(persist_mean "$IDLE_PERSIST0" "$(persist_totals 1 3)" "$(awk -v a="$IDLE_T0" -v b="$EPOCHREALTIME" 'BEGIN { print b - a }')")

# ---------------------------------------------------------------- scale out under load

if [[ -n $MAX_SENDING || -n $MAX_RECEIVING || -n $COPY_RATE || -n $COPY_PACE ]]; then
  cfg=()
  if [[ -n $MAX_SENDING ]]; then cfg+=(--max-sending "$MAX_SENDING"); fi
  if [[ -n $MAX_RECEIVING ]]; then cfg+=(--max-receiving "$MAX_RECEIVING"); fi
  if [[ -n $COPY_RATE ]]; then cfg+=(--copy-rate "$COPY_RATE"); fi
  if [[ -n $COPY_PACE ]]; then cfg+=(--copy-pace "$COPY_PACE"); fi
  timeout 30 "$SK" rebalance config "${cfg[@]}" --peer "$SK_PEERS" >"$WORK/logs/rebalance-config.log" 2>&1 ||
    fail_log "rebalance config" "$WORK/logs/rebalance-config.log" "failed"
  log "rebalancer: ${cfg[*]}"
fi

# start_load PREFIX: the replace load (load_loop PREFIX) in the background.
start_load() {
  rm -f "$WORK/stop-load"
  load_loop "$1" &
  LOAD_PID=$!
}

# end_load: let the current load run end, and wait for the loop.
end_load() {
  touch "$WORK/stop-load"
  wait "$LOAD_PID" || die "the load loop failed"
  LOAD_PID=''
}

# wait_moves WHAT PREFIX: poll `shardkit rebalance status` every second
# (a status not confirmed with group 0's leader exits 3 and is skipped)
# until nothing is left to move and, for WHAT=scale, a second replicaset
# (RS_NEW, found here) holds buckets, for WHAT=drain, RS_NEW holds none.
# Sets T_DONE (when) and ST (that status, compact JSON). PREFIX names the
# load loop's files.
T_DONE='' ST='' POLLS=0 LOADS='' RS_NEW=''
wait_moves() {
  local what=$1 prefix=$2 now r rss moving to_move held line last_line='' deadline=$((SECONDS + MOVE_TIMEOUT))
  while :; do
    check_alive
    kill -0 "$LOAD_PID" 2>/dev/null || die "the load loop ended early; see $WORK/logs/$prefix-*.stderr"
    now=$EPOCHREALTIME
    ST=$(timeout 15 "$SK" rebalance status --peer "$SK_PEERS" --format json --timeout 5s 2>/dev/null | tr -d ' \t\n') || ST=''
    if [[ -n $ST ]]; then
      POLLS=$((POLLS + 1))
      LOADS+=" $(loadavg)"
      printf '%s %s\n' "$now" "$ST" >>"$WORK/runs/rebalance-status"
      if [[ $what == scale ]]; then
        mapfile -t rss < <(grep -o '"replicaset_id":"[^"]*"' <<<"$ST" | cut -d'"' -f4)
        RS_NEW=''
        for r in "${rss[@]}"; do
          if [[ $r != "$RS_OLD" ]]; then RS_NEW=$r; fi
        done
      fi
      moving=0
      if [[ $ST == *'"moves":[{'* ]]; then moving=1; fi # "moves":[] when none
      to_move=$(jget "$ST" buckets_to_move)
      to_move=${to_move:-0}
      if [[ -n $RS_NEW ]]; then
        held=$(rs_field "$ST" "$RS_NEW" buckets)
        line="$RS_OLD $(rs_field "$ST" "$RS_OLD" buckets), $RS_NEW $held (target $(rs_field "$ST" "$RS_NEW" target)); to move $to_move"
        if [[ $line != "$last_line" ]] && ((POLLS % 10 == 0 || to_move == 0)); then
          log "    $line; load average $(loadavg)"
          last_line=$line
        fi
        if ((moving == 0 && to_move == 0)); then
          if { [[ $what == scale ]] && ((held > 0)); } || { [[ $what == drain ]] && ((held == 0)); }; then
            T_DONE=$now
            return
          fi
        fi
      fi
    fi
    ((SECONDS < deadline)) || die "the $what did not end within ${MOVE_TIMEOUT}s; see $WORK/runs/rebalance-status"
    sleep 1
  done
}

# start_profiles SUFFIX: with PROFILE set, every instance's CPU profiled for
# PROFILE seconds from now, into profiles/sN$SUFFIX.pprof, in the background.
start_profiles() {
  local n
  [[ -n $PROFILE ]] || return 0
  mkdir -p "$WORK/profiles"
  for n in 1 2 3 4 5 6; do
    curl -fsS --retry 30 --retry-connrefused --retry-delay 1 --retry-max-time 30 --max-time $((PROFILE + 30)) \
      -o "$WORK/profiles/s$n$1.pprof" "http://127.0.0.1:$((SHARDKIT_HTTP_PORT_BASE + n))/debug/pprof/profile?seconds=$PROFILE" \
      >"$WORK/logs/profile-s$n$1.log" 2>&1 &
    PROFILE_PIDS+=($!)
  done
  log "profiling every instance's CPU for ${PROFILE}s into $WORK/profiles/sN$1.pprof"
}

start_load move
log "replace load started (runs of $CHUNK, $CLIENTS clients); starting instances s4 s5 s6 in ${LEAD_IN}s"
sleep "$LEAD_IN"
T_SCALE=$EPOCHREALTIME STORE_SCALE0=$(storage_totals 1 6)
for n in 4 5 6; do start_instance "$n"; done
log "instances s4 s5 s6 started (supervisor pids ${SK_PIDS[*]:3})"
start_profiles ""

wait_moves scale move
T_BALANCED=$T_DONE ST_SCALE=$ST STORE_SCALE=$(storage_delta "$STORE_SCALE0" "$(storage_totals 1 6)")
log "balanced: $(awk -v a="$T_SCALE" -v b="$T_BALANCED" 'BEGIN { printf "%.1f", b - a }') s after the scale out; letting the current load run end"
end_load
timeout 15 "$SK" rebalance status --peer "$SK_PEERS" >"$WORK/logs/rebalance-status-final.log" 2>&1 || true

counts
log "rows per replicaset: $(tr '\n' ' ' <<<"$COUNTS")"
MOVED_ROWS=$(awk -v r="$RS_NEW" '$1 == r { print $2 }' <<<"$COUNTS")
TOTAL_ROWS=$(awk '{ s += $2 } END { print s + 0 }' <<<"$COUNTS")
[[ -n $MOVED_ROWS ]] || die "no count for the new replicaset $RS_NEW: $COUNTS"
if ((TOTAL_ROWS != ROWS)); then log "warning: the replicasets hold $TOTAL_ROWS rows in all, not $ROWS"; fi

# The same load on the balanced cluster: what the load does on two
# replicasets (six instances on the same cores) without moves, to tell the
# moves' cost from the new layout's.
AFTER_P99S='' AFTER_OPS='' AFTER_ERRS=0
AFTER_PERSIST0=$(persist_totals 1 6) AFTER_T0=$EPOCHREALTIME AFTER_TICKS0=$(server_ticks 1 6) AFTER_N=0
# With PROFILE, the balanced runs are profiled too (from their start, for
# PROFILE seconds: AFTER_RUNS x CHUNK should cover it), to set against the
# drain's profile: the same six instances, with and without moves.
for p in "${PROFILE_PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
start_profiles -balanced
for ((i = 1; i <= AFTER_RUNS; i++)); do
  steady_run after balanced "$i" "$AFTER_RUNS"
  AFTER_P99S+=" $(jget "$BENCH_JSON" p99_ms)"
  AFTER_OPS+=" $(jget "$BENCH_JSON" ops_per_s)"
  AFTER_ERRS=$((AFTER_ERRS + $(jget "$BENCH_JSON" errors)))
  AFTER_N=$((AFTER_N + $(jget "$BENCH_JSON" ops)))
done
AFTER_CPU=$(cpu_per_op "$AFTER_TICKS0" "$(server_ticks 1 6)" "$AFTER_N")
AFTER_PERSIST=$(persist_mean "$AFTER_PERSIST0" "$(persist_totals 1 6)" "$(awk -v a="$AFTER_T0" -v b="$EPOCHREALTIME" 'BEGIN { print b - a }')")

# ---------------------------------------------------------------- drain under load

# The drain: RS_NEW's weight set to 0 under the same load, and its buckets
# move back to RS_OLD. The balanced runs just before are its idle: the same
# six instances and the same two raft groups, so its p99 ratio is the
# moves' own cost, without the scale out's change of cluster size.
if ((DRAIN == 1)); then
  start_load drain
  log "replace load started; setting $RS_NEW's weight to 0 in ${LEAD_IN}s"
  sleep "$LEAD_IN"
  T_DRAIN=$EPOCHREALTIME D_TICKS0=$(server_ticks 1 6) STORE_DRAIN0=$(storage_totals 1 6)
  timeout 30 "$SK" replicaset weight "$RS_NEW" 0 --peer "$SK_PEERS" >"$WORK/logs/drain-weight.log" 2>&1 ||
    fail_log "replicaset weight $RS_NEW 0" "$WORK/logs/drain-weight.log" "failed"
  # One CPU profile at a time per process: the scale out's must be done.
  for p in "${PROFILE_PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
  start_profiles -drain
  wait_moves drain drain
  T_DRAINED=$T_DONE D_TICKS1=$(server_ticks 1 6) STORE_DRAIN=$(storage_delta "$STORE_DRAIN0" "$(storage_totals 1 6)")
  log "drained: $(awk -v a="$T_DRAIN" -v b="$T_DRAINED" 'BEGIN { printf "%.1f", b - a }') s after the weight change; letting the current load run end"
  end_load
  counts
  log "rows per replicaset: $(tr '\n' ' ' <<<"$COUNTS")"
  D_LEFT=$(awk -v r="$RS_NEW" '$1 == r { print $2 }' <<<"$COUNTS")
  D_LEFT=${D_LEFT:-0} # a replicaset with no bucket is not called
  D_ROWS=$(awk -v r="$RS_OLD" '$1 == r { print $2 }' <<<"$COUNTS")
  if ((D_LEFT != 0 || ${D_ROWS:-0} != ROWS)); then
    log "warning: after the drain $RS_OLD holds ${D_ROWS:-no} rows and $RS_NEW $D_LEFT, not $ROWS and 0"
  fi
fi

# ---------------------------------------------------------------- the logs

# Log times (time=2026-01-02T03:04:05.678Z) as epoch seconds; every line
# with its file's instance.
logs_times() {
  local n
  for n in 1 2 3 4 5 6; do
    awk -v inst="s$n" '
      function epoch(t,   d, y, m, dd, era, yoe, doy, doe, days) {
        # days from civil (UTC), then seconds
        y = substr(t, 1, 4) + 0; m = substr(t, 6, 2) + 0; dd = substr(t, 9, 2) + 0
        y -= (m <= 2); era = int(y / 400); yoe = y - era * 400
        doy = int((153 * (m + (m > 2 ? -3 : 9)) + 2) / 5) + dd - 1
        doe = yoe * 365 + int(yoe / 4) - int(yoe / 100) + doy
        days = era * 146097 + doe - 719468
        return days * 86400 + substr(t, 12, 2) * 3600 + substr(t, 15, 2) * 60 + substr(t, 18)
      }
      match($0, /time=[0-9-]+T[0-9:.]+Z/) {
        t = substr($0, RSTART + 5, RLENGTH - 6)
        printf "%.3f %s %s\n", epoch(t), inst, $0
      }' "$WORK/logs/shardkit-s$n.log"
  done | sort -n -k1,1
}
logs_times >"$WORK/runs/log-times"

# analyse_moves NAME FROM TO: the moves of the log lines from FROM to TO
# (epoch seconds; the polls' times, TO widened by 2 s for the last log
# lines) into runs/log-times-NAME. Sets T_FIRST T_LAST (the move window:
# the first "moving a bucket" to the last "bucket moved", both on group 0's
# leader), MOVE_WINDOW_SRC, N_STARTED N_MOVED N_ABORTED, PHASES (the mean
# time of each step of a move, over the buckets whose every step is in the
# logs, in ms: where a move's time goes; the destination's RECEIVING comes
# before the source's SENDING since the builds of 2026-11-26, so a build
# before those shows a negative receiving_to_sending) and, per bucket, how long it
# refused writes (its source leader's SENDING line to group 0's PHASE_COPY
# line): N_WINDOWS WIN_P50 WIN_P99 WIN_MAX WIN_MAX_B.
analyse_moves() {
  local name=$1 from=$2 to=$3 lt=$WORK/runs/log-times-$1
  awk -v a="$from" -v b="$to" '$1 >= a && $1 <= b + 2' "$WORK/runs/log-times" >"$lt"
  awk '
    function field(k,   r) { if (match($0, " " k "=[^ ]+")) { r = substr($0, RSTART + length(k) + 2, RLENGTH - length(k) - 2); return r } return "" }
    / msg="rebalancer: moving a bucket"/ { if (first == "") first = $1; starts++ }
    / msg="bucket moved"/ { last = $1; moved++ }
    / msg="bucket move aborted"/ { aborted++ }
    / msg="bucket state"/ && /record="SENDING/ { b = field("bucket"); sending[b] = $1 }
    / msg="bucket move"/ && / phase=PHASE_COPY/ {
      b = field("bucket")
      if (b in sending) { w = $1 - sending[b]; printf "window %s %.3f\n", b, w; delete sending[b] }
    }
    END { printf "moves %s %s %d %d %d\n", first == "" ? "-" : first, last == "" ? "-" : last, starts, moved, aborted + 0 }
  ' "$lt" >"$WORK/runs/log-moves-$name"
  read -r _ T_FIRST T_LAST N_STARTED N_MOVED N_ABORTED < <(grep '^moves ' "$WORK/runs/log-moves-$name")
  PHASES=$(awk '
    function field(k,   r) { if (match($0, " " k "=[^ ]+")) { r = substr($0, RSTART + length(k) + 2, RLENGTH - length(k) - 2); return r } return "" }
    function at(i) { b = field("bucket"); if (!((b, i) in t)) t[b, i] = $1 }
    / msg="rebalancer: moving a bucket"/ { b = field("bucket"); all[b] = 1; t[b, 0] = $1 }
    / msg="bucket state"/ && /record="RECEIVING/ { at(1) }
    / msg="bucket state"/ && /record="SENDING/ { at(2) }
    / msg="bucket move"/ && / phase=PHASE_COPY/ { at(3) }
    / msg="bucket state"/ && /record="ACTIVE/ { at(4) }
    / msg="bucket move"/ && / phase=PHASE_CLEANUP/ { at(5) }
    / msg="bucket state"/ && /record="GARBAGE/ { at(6) }
    / msg="bucket moved"/ { at(7) }
    END {
      split("prepare_to_receiving receiving_to_sending sending_to_switch copy_to_active active_to_cleanup cleanup_to_garbage garbage_to_finished", nm, " ")
      for (b in all) {
        ok = 1
        for (i = 0; i <= 7; i++) if (!((b, i) in t)) ok = 0
        if (!ok) continue
        n++; tot += t[b, 7] - t[b, 0]
        for (i = 1; i <= 7; i++) s[i] += t[b, i] - t[b, i - 1]
      }
      if (n == 0) { print "{}"; exit }
      printf "{\"buckets\":%d,\"move_total\":%.0f", n, 1000 * tot / n
      for (i = 1; i <= 7; i++) printf ",\"%s\":%.0f", nm[i], 1000 * s[i] / n
      print "}"
    }' "$lt")
  grep '^window ' "$WORK/runs/log-moves-$name" | awk '{ print $3, $2 }' | sort -n >"$WORK/runs/windows-$name"
  N_WINDOWS=$(wc -l <"$WORK/runs/windows-$name")
  if ((N_WINDOWS > 0)); then
    read -r WIN_P50 WIN_P99 WIN_MAX WIN_MAX_B < <(awk '{ v[NR] = $1; b[NR] = $2 }
      END { i50 = int(NR * 0.5 + 0.999); i99 = int(NR * 0.99 + 0.999); printf "%.3f %.3f %.3f %s\n", v[i50], v[i99], v[NR], b[NR] }' "$WORK/runs/windows-$name")
  else
    WIN_P50=null WIN_P99=null WIN_MAX=null WIN_MAX_B=null
    log "warning: $name: no SENDING / PHASE_COPY pairs in the logs (LOG_LEVEL=$LOG_LEVEL; debug is needed)"
  fi
  if [[ $T_FIRST == - || $T_LAST == - ]]; then
    # No debug lines: the polls' window (coarser: from the scale out or the weight change).
    T_FIRST=$from T_LAST=$to
    MOVE_WINDOW_SRC=polls
  else
    MOVE_WINDOW_SRC=logs
  fi
  MOVE_S=$(awk -v a="$T_FIRST" -v b="$T_LAST" 'BEGIN { printf "%.1f", b - a }')
  MOVE_S_EXACT=$(awk -v a="$T_FIRST" -v b="$T_LAST" 'BEGIN { printf "%.3f", b - a }') # the rates' divisor
}
analyse_moves scale "$T_SCALE" "$T_BALANCED"
TUPLES_PER_S=$(awk -v n="$MOVED_ROWS" -v s="$MOVE_S_EXACT" 'BEGIN { printf "%.0f", (s > 0 ? n / s : 0) }')
SCALE_S=$(awk -v a="$T_SCALE" -v b="$T_BALANCED" 'BEGIN { printf "%.1f", b - a }')
BUCKETS_NEW=$(rs_field "$ST_SCALE" "$RS_NEW" buckets)

# ---------------------------------------------------------------- the load under the moves

# load_during PREFIX FROM TO: the load loop PREFIX's runs whose timed part
# (its last duration_s before it ended) overlaps [FROM, TO] (epoch
# seconds); every run's JSON goes to RESULTS, marked during_moves or not.
# Sets RUNS_IN P99S MAXS OPS_S RUN_LOADS (lists), ERRS OPS FIRST_ERROR.
load_during() {
  local prefix=$1 from=$2 to=$3 i t0 t1 rc l1 f j dur in
  RUNS_IN='' P99S='' MAXS='' OPS_S='' ERRS=0 OPS=0 RUN_LOADS='' FIRST_ERROR=''
  while read -r i t0 t1 rc l1; do
    f=$WORK/runs/$prefix-$i.json
    if ((rc != 0)); then
      # The run stopped at the end (the stop file came during its set-up) or failed.
      log "warning: load run $prefix-$i exited with status $rc; see $WORK/logs/$prefix-$i.stderr"
      continue
    fi
    j=$(one_json "$f")
    dur=$(jget "$j" duration_s)
    in=$(awk -v s="$t1" -v d="$dur" -v a="$from" -v b="$to" 'BEGIN { print ((s - d < b && s > a) ? 1 : 0) }')
    j="{\"bench\":\"moves\",\"phase\":\"$prefix-$i\",\"during_moves\":$([[ $in == 1 ]] && echo true || echo false),${j#\{}"
    j="${j%\}},\"load1\":$l1,\"ended_at_epoch\":$t1}"
    printf '%s\n' "$j" >>"$RESULTS"
    if [[ $in == 1 ]]; then
      RUNS_IN+=" $i"
      P99S+=" $(jget "$j" p99_ms)"
      MAXS+=" $(jget "$j" max_ms)"
      OPS_S+=" $(jget "$j" ops_per_s)"
      RUN_LOADS+=" $l1"
      ERRS=$((ERRS + $(jget "$j" errors)))
      OPS=$((OPS + $(jget "$j" ops)))
      if [[ -z $FIRST_ERROR ]]; then FIRST_ERROR=$(jget "$j" first_error); fi
    fi
  done <"$WORK/runs/$prefix-runs"
  [[ -n $RUNS_IN ]] || die "no load run of $prefix overlaps its moves"
}
load_during move "$T_SCALE" "$T_BALANCED"

# stats LIST: "median max" of the numbers.
stats() { tr ' ' '\n' <<<"$1" | awk 'NF { v[++n] = $1 + 0 } END {
  for (i = 2; i <= n; i++) for (j = i; j > 1 && v[j - 1] > v[j]; j--) { t = v[j]; v[j] = v[j - 1]; v[j - 1] = t }
  printf "%s %s %s\n", n % 2 ? v[(n + 1) / 2] : (v[n / 2] + v[n / 2 + 1]) / 2, v[n], v[1] }'; }
# ratio A B: A / B to two places (0 when B is 0).
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", (b > 0 ? a / b : 0) }'; }

read -r IDLE_P99 IDLE_P99_MAX _ < <(stats "$IDLE_P99S")
read -r _ IDLE_MAX _ < <(stats "$IDLE_MAXS")
read -r IDLE_OPS_MED _ _ < <(stats "$IDLE_OPS")
read -r AFTER_P99 _ _ < <(stats "$AFTER_P99S")
read -r AFTER_OPS_MED _ _ < <(stats "$AFTER_OPS")
read -r MOVE_P99 MOVE_P99_MAX _ < <(stats "$P99S")
read -r _ MOVE_MAX _ < <(stats "$MAXS")
read -r MOVE_OPS_MED _ MOVE_OPS_MIN < <(stats "$OPS_S")
read -r _ LOAD_MAX LOAD_MIN < <(stats "$IDLE_LOADS $RUN_LOADS $LOADS")
P99_RATIO=$(ratio "$MOVE_P99" "$IDLE_P99")
P99_RATIO_MAX=$(ratio "$MOVE_P99_MAX" "$IDLE_P99")
P99_RATIO_AFTER=$(ratio "$MOVE_P99" "$AFTER_P99")
P99_RATIO_AFTER_MAX=$(ratio "$MOVE_P99_MAX" "$AFTER_P99")

# drain_report: the drain, measured as the scale out is, against the
# balanced runs (its idle). Run in a subshell: analyse_moves and
# load_during set the globals the scale out's summary reads. Prints the
# summary's drain fields (JSON, one line), the load averages of its runs
# (one line), then the drain's lines of the text summary.
drain_report() {
  trap - EXIT # a subshell: the cleanup is the main shell's
  set -e      # bash does not keep -e in a command substitution
  local D_TUPLES D_RATE D_SECS D_P99 D_P99_MAX D_MAX D_OPS_MED D_OPS_MIN D_RATIO D_RATIO_MAX D_JSON D_CPU D_CPU_TUPLE
  analyse_moves drain "$T_DRAIN" "$T_DRAINED"
  load_during drain "$T_DRAIN" "$T_DRAINED"
  D_TUPLES=$((MOVED_ROWS - D_LEFT))
  D_RATE=$(awk -v n="$D_TUPLES" -v s="$MOVE_S_EXACT" 'BEGIN { printf "%.0f", (s > 0 ? n / s : 0) }')
  D_SECS=$(awk -v a="$T_DRAIN" -v b="$T_DRAINED" 'BEGIN { printf "%.1f", b - a }')
  read -r D_P99 D_P99_MAX _ < <(stats "$P99S")
  read -r _ D_MAX _ < <(stats "$MAXS")
  read -r D_OPS_MED _ D_OPS_MIN < <(stats "$OPS_S")
  D_RATIO=$(ratio "$D_P99" "$AFTER_P99") D_RATIO_MAX=$(ratio "$D_P99_MAX" "$AFTER_P99")
  # The instances' CPU from the weight change to drained (up to a second
  # after the last move: the polls'), the load's writes included: with a
  # light load (RATE=50) it is what the moves cost.
  D_CPU=$(awk -v a="$D_TICKS0" -v b="$D_TICKS1" -v hz="$(getconf CLK_TCK)" 'BEGIN { printf "%.2f", (b - a) / hz }')
  D_CPU_TUPLE=$(cpu_per_op "$D_TICKS0" "$D_TICKS1" "$D_TUPLES")
  D_JSON=$(printf '"drain_buckets_moved":%s,"drain_moves_aborted":%s,"drain_tuples_moved":%s,"drain_rows_left":%s,"drain_move_s":%s,"drain_s":%s,"drain_tuples_per_s":%s,' \
    "$N_MOVED" "$N_ABORTED" "$D_TUPLES" "$D_LEFT" "$MOVE_S" "$D_SECS" "$D_RATE")
  D_JSON+=$(printf '"drain_p99_ms_median":%s,"drain_p99_ms_max":%s,"drain_p99_ratio_balanced":%s,"drain_p99_ratio_balanced_max":%s,"drain_max_ms":%s,"drain_errors":%s,"drain_ops":%s,"drain_ops_per_s_median":%s,' \
    "$D_P99" "$D_P99_MAX" "$D_RATIO" "$D_RATIO_MAX" "$D_MAX" "$ERRS" "$OPS" "$D_OPS_MED")
  D_JSON+=$(printf '"drain_move_step_mean_ms":%s,"drain_refused_windows":%s,"drain_refused_p99_s":%s,"drain_refused_max_s":%s,' "$PHASES" "$N_WINDOWS" "$WIN_P99" "$WIN_MAX")
  D_JSON+=$(printf '"drain_server_cpu_s":%s,"drain_server_cpu_us_per_tuple":%s,' "$D_CPU" "${D_CPU_TUPLE/#n\/a/null}")
  printf '%s\n%s\n' "$D_JSON" "$RUN_LOADS"
  {
    echo
    printf '%-44s %s (moves started %s, finished %s, aborted %s)\n' "drain: buckets moved $RS_NEW -> $RS_OLD" "$N_MOVED" "$N_STARTED" "$N_MOVED" "$N_ABORTED"
    printf '%-44s %s (rows left on %s: %s)\n' "drain: tuples moved" "$D_TUPLES" "$RS_NEW" "$D_LEFT"
    printf '%-44s %s s (from the %s); weight 0 to drained %s s\n' "drain: move window" "$MOVE_S" "$MOVE_WINDOW_SRC" "$D_SECS"
    printf '%-44s %s  (target >= 50000)\n' "drain: tuples moved per second" "$D_RATE"
    printf '%-44s %s ms (median of %s runs; largest %s ms)\n' "drain: write p99 during the moves" "$D_P99" "$(wc -w <<<"$RUNS_IN")" "$D_P99_MAX"
    printf '%-44s %s (largest run: %s)  (target <= 2; the same six instances idle)\n' "drain: p99 ratio, moves / balanced" "$D_RATIO" "$D_RATIO_MAX"
    printf '%-44s %s / %s ops/s (median; slowest run during: %s)\n' "drain: write throughput, balanced / during" "$AFTER_OPS_MED" "$D_OPS_MED" "$D_OPS_MIN"
    printf '%-44s %s ms\n' "drain: longest successful write" "$D_MAX"
    printf '%-44s %s of %s buckets; p50 %s s, p99 %s s, max %s s (bucket %s)\n' "drain: writes refused, logs" "$N_WINDOWS" "$N_MOVED" "$WIN_P50" "$WIN_P99" "$WIN_MAX" "$WIN_MAX_B"
    printf '%-44s %s\n' "drain: mean time of a move's steps, ms" "$PHASES"
    printf '%-44s %s\n' "drain: storage, six instances (/metrics)" "$STORE_DRAIN"
    printf "%-44s %s s, %s µs per tuple moved (weight 0 to drained, with the load's writes)\n" "drain: server CPU" "$D_CPU" "$D_CPU_TUPLE"
    printf '%-44s %s during the drain (%s calls)  (target 0)\n' "drain: client errors" "$ERRS" "$OPS"
    if [[ -n $FIRST_ERROR ]]; then printf '%-44s %s\n' "drain: first error" "$FIRST_ERROR"; fi
  }
}
D_JSON='' D_TEXT=''
if ((DRAIN == 1)); then
  D_OUT=$(drain_report) || die "the drain's figures could not be read; see $WORK/runs"
  D_JSON=$(sed -n 1p <<<"$D_OUT")
  read -r _ LOAD_MAX LOAD_MIN < <(stats "$IDLE_LOADS $RUN_LOADS $LOADS $(sed -n 2p <<<"$D_OUT")")
  D_TEXT=$(sed -n '3,$p' <<<"$D_OUT")
fi

SETTINGS=$(grep -o '"settings":{[^}]*}' <<<"$ST_SCALE" | head -n1) || SETTINGS='"settings":{}'
{
  printf '{"bench":"moves","phase":"summary","rows":%s,"value_size":%s,"clients":%s,"rate":%s,"pin":%s,"chunk":"%s",' "$ROWS" "$VALUE_SIZE" "$CLIENTS" "${RATE:-0}" "$PIN" "$CHUNK"
  printf '%s,"from":"%s","to":"%s","buckets_moved":%s,"moves_started":%s,"moves_finished":%s,"moves_aborted":%s,' "$SETTINGS" "$RS_OLD" "$RS_NEW" "$BUCKETS_NEW" "$N_STARTED" "$N_MOVED" "$N_ABORTED"
  printf '"tuples_moved":%s,"rows_total":%s,"move_s":%s,"move_window_from":"%s","scale_out_to_balanced_s":%s,"tuples_per_s":%s,' "$MOVED_ROWS" "$TOTAL_ROWS" "$MOVE_S" "$MOVE_WINDOW_SRC" "$SCALE_S" "$TUPLES_PER_S"
  printf '"idle_p99_ms":%s,"moves_p99_ms_median":%s,"moves_p99_ms_max":%s,"p99_ratio":%s,"p99_ratio_max":%s,' "$IDLE_P99" "$MOVE_P99" "$MOVE_P99_MAX" "$P99_RATIO" "$P99_RATIO_MAX"
  printf '"idle_max_ms":%s,"moves_max_ms":%s,"idle_errors":%s,"moves_errors":%s,"moves_ops":%s,' "$IDLE_MAX" "$MOVE_MAX" "$IDLE_ERRS" "$ERRS" "$OPS"
  printf '"idle_ops_per_s":%s,"moves_ops_per_s_median":%s,' "$IDLE_OPS_MED" "$MOVE_OPS_MED"
  printf '"after_p99_ms":%s,"after_ops_per_s":%s,"after_errors":%s,"p99_ratio_after":%s,"p99_ratio_after_max":%s,' "${AFTER_P99:-0}" "${AFTER_OPS_MED:-0}" "$AFTER_ERRS" "$P99_RATIO_AFTER" "$P99_RATIO_AFTER_MAX"
  printf '"move_step_mean_ms":%s,' "$PHASES"
  printf '"refused_windows":%s,"refused_p50_s":%s,"refused_p99_s":%s,"refused_max_s":%s,"refused_max_bucket":%s,' "$N_WINDOWS" "$WIN_P50" "$WIN_P99" "$WIN_MAX" "$WIN_MAX_B"
  printf '%s' "$D_JSON"
  printf '"load1_min":%s,"load1_max":%s,"nproc":%s,"started_at":"%s"}\n' "$LOAD_MIN" "$LOAD_MAX" "$(nproc)" "$STAMP"
} >>"$RESULTS"

# ---------------------------------------------------------------- summary

{
  echo "bucket moves under load: $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) cores ($(lscpu | sed -n 's/^Model name: *//p' | head -n1)), $(uname -sr)"
  echo "$("$SK" version 2>/dev/null | head -n1); $ROWS rows of $VALUE_SIZE bytes; replace load: $CLIENTS clients${RATE:+ paced at $RATE writes/s}, runs of $CHUNK$PIN_NOTE; load average $LOAD_MIN - $LOAD_MAX"
  echo "rebalancer $SETTINGS"
  echo
  printf '%-44s %s\n' "buckets moved $RS_OLD -> $RS_NEW" "$BUCKETS_NEW (moves started $N_STARTED, finished $N_MOVED, aborted $N_ABORTED)"
  printf '%-44s %s\n' "tuples moved (rows on $RS_NEW at the end)" "$MOVED_ROWS (all replicasets: $TOTAL_ROWS of $ROWS)"
  printf '%-44s %s s (from the %s)\n' "move window (first move to last)" "$MOVE_S" "$MOVE_WINDOW_SRC"
  printf '%-44s %s s\n' "scale out started to balanced" "$SCALE_S"
  printf '%-44s %s  (target >= 50000)\n' "tuples moved per second" "$TUPLES_PER_S"
  printf '%-44s %s ms (median of %s runs; largest %s ms)\n' "write p99, idle" "$IDLE_P99" "$IDLE_RUNS" "$IDLE_P99_MAX"
  printf '%-44s %s ms (median of %s runs; largest %s ms)\n' "write p99, during the moves" "$MOVE_P99" "$(wc -w <<<"$RUNS_IN")" "$MOVE_P99_MAX"
  printf '%-44s %s (largest run: %s)  (target <= 2)\n' "p99 ratio, moves / idle" "$P99_RATIO" "$P99_RATIO_MAX"
  printf '%-44s %s / %s ops/s (median; slowest run during: %s)\n' "write throughput, idle / during" "$IDLE_OPS_MED" "$MOVE_OPS_MED" "$MOVE_OPS_MIN"
  if ((AFTER_RUNS > 0)); then
    printf '%-44s %s ms, %s ops/s (median of %s runs); moves / balanced p99 %s (largest run: %s)\n' "write p99, balanced (after the moves)" "$AFTER_P99" "$AFTER_OPS_MED" "$AFTER_RUNS" "$P99_RATIO_AFTER" "$P99_RATIO_AFTER_MAX"
  fi
  printf '%-44s %s ms idle, %s ms during the moves\n' "longest successful write" "$IDLE_MAX" "$MOVE_MAX"
  printf '%-44s idle %s (3 instances); balanced %s (6)\n' "raft write with fsync, mean (/metrics)" "$IDLE_PERSIST" "${AFTER_PERSIST:-n/a}"
  printf '%-44s idle %s, balanced %s (the instances, whole runs)\n' "server CPU-µs per write" "$IDLE_CPU" "${AFTER_CPU:-n/a}"
  printf '%-44s %s of %s buckets; p50 %s s, p99 %s s, max %s s (bucket %s)\n' "writes refused (SENDING to switch), logs" "$N_WINDOWS" "$N_MOVED" "$WIN_P50" "$WIN_P99" "$WIN_MAX" "$WIN_MAX_B"
  printf '%-44s %s\n' "mean time of a move's steps, ms (logs)" "$PHASES"
  printf '%-44s %s\n' "storage during the moves, six (/metrics)" "$STORE_SCALE"
  printf '%-44s %s during the moves (%s calls), %s idle, %s balanced  (target 0)\n' "client errors" "$ERRS" "$OPS" "$IDLE_ERRS" "$AFTER_ERRS"
  if [[ -n $FIRST_ERROR ]]; then printf '%-44s %s\n' "first error" "$FIRST_ERROR"; fi
  if [[ -n $D_TEXT ]]; then printf '%s\n' "$D_TEXT"; fi
  echo
  echo "results: $RESULTS"
}
FAILED=0
if [[ ${KEEP_WORKDIR:-} == 1 ]]; then log "logs in $WORK/logs, runs in $WORK/runs"; fi
