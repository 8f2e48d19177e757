#!/usr/bin/env bash
# The stage scheduler on its PostgreSQL store and on its shardkit store
# against River, on this machine and the same PostgreSQL, in one run,
# interleaved (River, scheduler, shardkit, River, ... for each measure):
#
#   throughput  OFFERS offers each needing one pass of a no-op stage, end to
#               end: put -> queued -> processed -> saved -> its changelog
#               record read back from Kafka (`shardkit scheduler bench`);
#               River: as many jobs inserted, worked and completed
#               (bench/river). Offers (jobs) per second, p50/p99 of each
#               one's time from put (insert) to record (completion).
#   timers      TIMERS timers due DUE_PER_S a second (the first LEAD after
#               the start): p50/p99 lateness, from the due time to the
#               Process call (River: the scheduled time to the first attempt).
#   pipeline    OFFERS offers through three stages in a row (each follows
#               the field the one before set): p50/p99 from put to the third
#               stage's record in Kafka. The scheduler only: a job queue has
#               no stages that follow an entity's changes.
#
#   bash scripts/bench-scheduler.sh
#   ROUNDS=3 MEASURES="throughput timers" bash scripts/bench-scheduler.sh
#
# It builds shardkit and bench/river (river-bench, a module of its own) into
# a temporary directory unless SHARDKIT_BIN / RIVER_BIN, starts PostgreSQL
# through scripts/services.sh when it is not running, prints a table on
# stdout and appends every run's JSON line (with the load average before it)
# to the results file. Each side makes its schema anew and drops its rows:
# nothing else in the database is touched. Kafka is franz-go's in-process
# broker (kfake) inside the scheduler's bench; River's side has no Kafka.
# The shardkit side (system "shardkit") runs the same bench with --peer on
# three instances this script starts on loopback (replication factor 3: one
# replicaset, as bench-vs-etcd.sh), each run on spaces of its own.
# The figures and what bounds them are in docs/benchmarks.md ("Scheduler").
#
# Environment (defaults in brackets):
#   MEASURES    throughput, timers and/or pipeline [throughput timers pipeline]
#   SYSTEMS     river, scheduler (PostgreSQL store) and/or shardkit (shardkit
#               store) [river scheduler shardkit]
#   SHARDKIT_PORT_BASE  the instances' gRPC ports are this + 1..3, HTTP + 11..13 [24300]
#   ROUNDS      runs of each system per measure [2]
#   OFFERS      offers (jobs) per throughput or pipeline run [50000]
#   TIMERS      timers per timers run [50000]
#   DUE_PER_S   timers due per second [10000]
#   LEAD        the first timer is due this long after the start [5s]
#   SCHED_PARALLEL  the scheduler's stage MaxParallel [256]
#   RIVER_WORKERS   River's workers [200]
#   SCHED_FLAGS more `shardkit scheduler bench` flags, space-separated []
#   RIVER_FLAGS more river-bench flags, space-separated []
#   SETTLE      seconds of pause before each run [2]
#   RESULTS     results file (JSON lines) [/var/tmp/bench-scheduler-<UTC time>.jsonl]
#   SHARDKIT_TEST_POSTGRES_DSN  the PostgreSQL [scripts/services.sh env's]
#   SHARDKIT_BIN, RIVER_BIN     prebuilt binaries (else built from this repo)
set -euo pipefail
export LC_ALL=C

REPO=$(cd "$(dirname "$0")/.." && pwd)

MEASURES=${MEASURES:-throughput timers pipeline}
MEASURES=${MEASURES//,/ }
SYSTEMS=${SYSTEMS:-river scheduler shardkit}
SYSTEMS=${SYSTEMS//,/ }
ROUNDS=${ROUNDS:-2}
OFFERS=${OFFERS:-50000}
TIMERS=${TIMERS:-50000}
DUE_PER_S=${DUE_PER_S:-10000}
LEAD=${LEAD:-5s}
SCHED_PARALLEL=${SCHED_PARALLEL:-256}
RIVER_WORKERS=${RIVER_WORKERS:-200}
SETTLE=${SETTLE:-2}
STAMP=$(date -u +%Y%m%dT%H%M%SZ)
RESULTS=${RESULTS:-/var/tmp/bench-scheduler-$STAMP.jsonl}

log() { printf 'bench-scheduler: %s\n' "$*" >&2; }
die() {
  log "error: $*"
  exit 1
}

has() { [[ " $2 " == *" $1 "* ]]; }

for m in $MEASURES; do
  [[ $m == throughput || $m == timers || $m == pipeline ]] || die "MEASURES: unknown measure '$m' (want throughput, timers and/or pipeline)"
done
for s in $SYSTEMS; do
  [[ $s == river || $s == scheduler || $s == shardkit ]] || die "SYSTEMS: unknown system '$s' (want river, scheduler and/or shardkit)"
done
[[ -n ${MEASURES// /} && -n ${SYSTEMS// /} ]] || die "MEASURES and SYSTEMS must not be empty"
for v in ROUNDS OFFERS TIMERS DUE_PER_S SCHED_PARALLEL RIVER_WORKERS; do
  [[ ${!v} =~ ^[1-9][0-9]*$ ]] || die "$v: '${!v}' is not a positive number"
done
[[ $SETTLE =~ ^[0-9]+$ ]] || die "SETTLE: '$SETTLE' is not a number"
[[ $LEAD =~ ^[0-9]+(ms|s|m)$ ]] || die "LEAD: '$LEAD' is not like 5s, 500ms or 1m"

if [[ -z ${SHARDKIT_TEST_POSTGRES_DSN:-} ]]; then
  eval "$(bash "$REPO/scripts/services.sh" env)"
fi
DSN=$SHARDKIT_TEST_POSTGRES_DSN

WORK=$(mktemp -d "${TMPDIR:-/tmp}/bench-scheduler.XXXXXX")
RUN_PID=''
SK_PIDS=()
cleanup() {
  local rc=$?
  if [[ -n $RUN_PID ]]; then kill "$RUN_PID" 2>/dev/null || true; fi
  if ((${#SK_PIDS[@]} > 0)); then
    kill "${SK_PIDS[@]}" 2>/dev/null || true
    wait "${SK_PIDS[@]}" 2>/dev/null || true
  fi
  if ((rc == 0)); then rm -rf "$WORK"; else log "logs kept in $WORK"; fi
}
trap cleanup EXIT

SK=${SHARDKIT_BIN:-}
if [[ -z $SK ]]; then
  log "building shardkit"
  (cd "$REPO" && nice -n 19 go build -o "$WORK/shardkit" ./cmd/shardkit) || die "go build ./cmd/shardkit failed"
  SK=$WORK/shardkit
fi
RIVER=${RIVER_BIN:-}
if [[ -z $RIVER ]] && has river "$SYSTEMS"; then
  log "building river-bench (bench/river)"
  (cd "$REPO/bench/river" && nice -n 19 go build -o "$WORK/river-bench" .) || die "go build in bench/river failed"
  RIVER=$WORK/river-bench
fi

# The shardkit store's cluster: three instances, replication factor 3.
SHARDKIT_PORT_BASE=${SHARDKIT_PORT_BASE:-24300}
SK_PEERS=127.0.0.1:$((SHARDKIT_PORT_BASE + 1)),127.0.0.1:$((SHARDKIT_PORT_BASE + 2)),127.0.0.1:$((SHARDKIT_PORT_BASE + 3))
if has shardkit "$SYSTEMS"; then
  mkdir -p "$WORK/logs"
  for n in 1 2 3; do
    "$SK" run --instance-id "s$n" --listen "127.0.0.1:$((SHARDKIT_PORT_BASE + n))" \
      --http-listen "127.0.0.1:$((SHARDKIT_PORT_BASE + 10 + n))" --peer "$SK_PEERS" \
      --data-dir "$WORK/data/s$n" --init-replication-factor 3 --shutdown-timeout 5s \
      </dev/null >"$WORK/logs/shardkit-s$n.log" 2>&1 &
    SK_PIDS+=($!)
  done
  deadline=$((SECONDS + 90))
  until (($("$SK" status --peer "$SK_PEERS" 2>/dev/null | grep -c 'Online(') >= 3)); do
    ((SECONDS < deadline)) || die "the shardkit instances were not Online within 90s (logs in $WORK/logs)"
    sleep 0.5
  done
  log "shardkit: three instances Online on $SK_PEERS"
fi

# jget JSON KEY: the value of a top-level scalar KEY of a flat JSON object.
jget() {
  awk -v k="$2" '{
    if (match($0, "\"" k "\"[ \t]*:[ \t]*(\"[^\"]*\"|[-+0-9.eE]+|null|true|false)")) {
      r = substr($0, RSTART, RLENGTH); sub(/^"[^"]*"[ \t]*:[ \t]*/, "", r); gsub(/"/, "", r); print r
    }
  }' <<<"$1"
}

RUN_NO=0 RUN_TOTAL=0
for m in $MEASURES; do
  for s in $SYSTEMS; do
    if [[ $m == pipeline && $s == river ]]; then continue; fi
    RUN_TOTAL=$((RUN_TOTAL + ROUNDS))
  done
done

# run_one SYSTEM MEASURE ROUND: one run; appends its JSON line to RESULTS.
run_one() {
  local sys=$1 measure=$2 round=$3 out err load1 started json rc=0
  local -a cmd
  RUN_NO=$((RUN_NO + 1))
  if [[ $sys == river ]]; then
    cmd=("$RIVER" --dsn "$DSN" --workers "$RIVER_WORKERS")
    case $measure in
    throughput) cmd+=(--jobs "$OFFERS") ;;
    timers) cmd+=(--jobs "$TIMERS" --due-per-s "$DUE_PER_S" --lead "$LEAD") ;;
    esac
    # shellcheck disable=SC2206 # split on purpose: a list of flags
    if [[ -n ${RIVER_FLAGS:-} ]]; then cmd+=($RIVER_FLAGS); fi
  else
    cmd=("$SK" scheduler bench --mode "$measure" --parallel "$SCHED_PARALLEL")
    if [[ $sys == shardkit ]]; then cmd+=(--peer "$SK_PEERS"); else cmd+=(--postgres "$DSN"); fi
    case $measure in
    throughput | pipeline) cmd+=(--offers "$OFFERS") ;;
    timers) cmd+=(--offers "$TIMERS" --due-per-s "$DUE_PER_S" --lead "$LEAD") ;;
    esac
    # shellcheck disable=SC2206 # split on purpose: a list of flags
    if [[ -n ${SCHED_FLAGS:-} ]]; then cmd+=($SCHED_FLAGS); fi
  fi
  sleep "$SETTLE"
  out=$WORK/$sys-$measure-r$round.json err=$WORK/$sys-$measure-r$round.stderr
  read -r load1 _ </proc/loadavg
  started=$(date -u +%Y-%m-%dT%H:%M:%SZ)
  log "[$RUN_NO/$RUN_TOTAL] $sys $measure, round $round (load average $load1)"
  "${cmd[@]}" >"$out" 2>"$err" &
  RUN_PID=$!
  wait "$RUN_PID" || rc=$?
  RUN_PID=''
  if ((rc != 0)); then
    tail -n 20 "$err" >&2
    die "$sys $measure exited with status $rc"
  fi
  json=$(tr -d '\n' <"$out")
  [[ $(jget "$json" jobs_per_s) =~ ^[0-9.eE+-]+$ ]] || die "$sys $measure printed no result: $(head -c 300 "$out")"
  json=${json%\}}
  json+=",\"measure\":\"$measure\",\"round\":$round,\"load1\":$load1,\"started_at\":\"$started\"}"
  printf '%s\n' "$json" >>"$RESULTS"
  log "    $(jget "$json" jobs_per_s | awk '{ printf "%.0f", $1 }')/s, p50 $(jget "$json" p50_ms) ms, p99 $(jget "$json" p99_ms) ms"
}

mkdir -p "$(dirname "$RESULTS")"
: >>"$RESULTS"
first_line=$(($(wc -l <"$RESULTS") + 1))
log "$RUN_TOTAL runs: $MEASURES; $ROUNDS rounds of $SYSTEMS; results in $RESULTS"
for measure in $MEASURES; do
  for ((round = 1; round <= ROUNDS; round++)); do
    for sys in river scheduler shardkit; do
      if ! has "$sys" "$SYSTEMS" || [[ $measure == pipeline && $sys == river ]]; then continue; fi
      run_one "$sys" "$measure" "$round"
    done
  done
done

{
  echo "scheduler (scheduler-pg: PostgreSQL store; scheduler-shardkit: three instances) vs River: $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) cores ($(lscpu | sed -n 's/^Model name: *//p' | head -n1)), $(uname -sr)"
  echo "$(psql "$DSN" -Atc 'SHOW server_version' 2>/dev/null | sed 's/^/PostgreSQL /'); $("$SK" version 2>/dev/null | head -n1)"
  echo "throughput/pipeline: per second from the first put (insert) to the last record (completion); p50/p99 of each one's time"
  echo "timers: per second after the lead; p50/p99 lateness (due time to Process call / first attempt); results: $RESULTS"
  echo
  tail -n "+$first_line" "$RESULTS" | awk '
    function jget(s, k,   r) {
      if (match(s, "\"" k "\"[ \t]*:[ \t]*(\"[^\"]*\"|[-+0-9.eE]+|null|true|false)")) {
        r = substr(s, RSTART, RLENGTH); sub(/^"[^"]*"[ \t]*:[ \t]*/, "", r); gsub(/"/, "", r); return r
      }
      return ""
    }
    BEGIN { printf "%-10s %-18s %5s | %9s %10s %10s | %s\n", "measure", "system", "round", "per s", "p50 ms", "p99 ms", "load1" }
    {
      printf "%-10s %-18s %5s | %9.0f %10.1f %10.1f | %s\n", jget($0, "measure"), jget($0, "system"), jget($0, "round"),
        jget($0, "jobs_per_s"), jget($0, "p50_ms"), jget($0, "p99_ms"), jget($0, "load1")
    }'
}
