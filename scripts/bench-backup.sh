#!/usr/bin/env bash
# Backups and restores of shardkit against etcd's snapshots, on this machine,
# in one run: the figures and how to read them are in docs/benchmarks.md
# ("Backup and restore").
#
#   bash scripts/bench-backup.sh                       # 1M rows, three replicasets
#   ROWS=200000 SYSTEMS=shardkit bash scripts/bench-backup.sh
#
# What it does, for shardkit:
#   1. builds shardkit (unless SHARDKIT_BIN) and starts REPLICASETS x 3
#      instances on loopback, replication factor 3, and waits until the
#      rebalancer has spread the 3,000 buckets over the replicasets;
#   2. preloads ROWS rows of VALUE_SIZE bytes into the space "bench"
#      (`shardkit bench --workload insert`);
#   3. a full backup (`shardkit backup create`): its time, its size, the
#      servers' CPU (the instances' workers, /proc); then `backup verify`;
#   4. 1% of the rows replaced (ROWS/100 replaces of random keys), then an
#      incremental backup from the full one (`--incremental-from`): its
#      time, its size, the servers' CPU; then `backup verify` of it (which
#      reads its base too);
#   5. the writers' p99 without and with a backup: a replace load of
#      LOAD_DURATION alone, then the same load with a backup started
#      LOAD_LEAD seconds into it;
#   6. a second cluster of RESTORE_REPLICASETS x 3 instances, and the full
#      backup restored into it (`shardkit backup restore`): its time, and
#      the rows counted there (`shardkit map-call count`), which must be ROWS.
# And for etcd (3.4: etcdctl has the snapshot commands), one member: the
# same number of keys of VALUE_SIZE bytes (bench/etcd's preload), then
# `etcdctl snapshot save` and `etcdctl snapshot restore`, timed.
#
# Environment (defaults in brackets):
#   SYSTEMS       shardkit and/or etcd [shardkit etcd]
#   ROWS          rows (keys) [1000000]
#   VALUE_SIZE    bytes per value [100]
#   REPLICASETS   replicasets of the source cluster [3]
#   RESTORE_REPLICASETS  replicasets of the cluster restored into [REPLICASETS]
#   CLIENTS, CONNS  the load's concurrent calls and connections [64, 16]
#   LOAD_DURATION the load runs of step 4 [20s]; LOAD_LEAD [2] seconds
#   RESULTS       results file (JSON lines) [/var/tmp/bench-backup-<UTC time>.jsonl]
#   WORKDIR_PARENT  where data dirs and backups go; local disk [/var/tmp]
#   SHARDKIT_BIN, ETCD_BIN, ETCDCTL_BIN  prebuilt binaries (else built / from PATH)
#   SHARDKIT_PORT_BASE [24600], SHARDKIT_HTTP_PORT_BASE [24650], ETCD_PORT_BASE [24700]
#   KEEP_WORKDIR=1  keep the data dirs, backups and logs (kept anyway on failure)
#
# Everything it started is stopped on exit, by pid; nothing else is.
set -euo pipefail
export LC_ALL=C

REPO=$(cd "$(dirname "$0")/.." && pwd)
SYSTEMS=${SYSTEMS:-shardkit etcd}
ROWS=${ROWS:-1000000}
VALUE_SIZE=${VALUE_SIZE:-100}
REPLICASETS=${REPLICASETS:-3}
RESTORE_REPLICASETS=${RESTORE_REPLICASETS:-$REPLICASETS}
CLIENTS=${CLIENTS:-64}
CONNS=${CONNS:-16}
LOAD_DURATION=${LOAD_DURATION:-20s}
LOAD_LEAD=${LOAD_LEAD:-2}
STAMP=$(date -u +%Y%m%dT%H%M%SZ)
RESULTS=${RESULTS:-/var/tmp/bench-backup-$STAMP.jsonl}
WORKDIR_PARENT=${WORKDIR_PARENT:-/var/tmp}
SHARDKIT_PORT_BASE=${SHARDKIT_PORT_BASE:-24600}
SHARDKIT_HTTP_PORT_BASE=${SHARDKIT_HTTP_PORT_BASE:-24650}
ETCD_PORT_BASE=${ETCD_PORT_BASE:-24700}
ETCD_BIN=${ETCD_BIN:-etcd}
ETCDCTL_BIN=${ETCDCTL_BIN:-etcdctl}

log() { printf 'bench-backup: %s\n' "$(date -u +%H:%M:%S) $*" >&2; }
die() {
  log "error: $*"
  exit 1
}
has() { [[ " ${SYSTEMS//,/ } " == *" $1 "* ]]; }

for s in ${SYSTEMS//,/ }; do
  [[ $s == shardkit || $s == etcd ]] || die "SYSTEMS: unknown system '$s' (want shardkit and/or etcd)"
done
for v in ROWS VALUE_SIZE REPLICASETS RESTORE_REPLICASETS CLIENTS CONNS LOAD_LEAD; do
  [[ ${!v} =~ ^[1-9][0-9]*$ ]] || die "$v: '${!v}' is not a positive number"
done
((ROWS >= 3000)) || die "ROWS: $ROWS is fewer than the 3000 buckets"
((REPLICASETS <= 5 && RESTORE_REPLICASETS <= 5)) || die "REPLICASETS and RESTORE_REPLICASETS: at most 5 (15 instances) on loopback ports"
[[ $LOAD_DURATION =~ ^[1-9][0-9]*(s|m)$ ]] || die "LOAD_DURATION: '$LOAD_DURATION' is not like 20s or 1m"

# ---------------------------------------------------------------- cleanup

WORK='' FAILED=1
PIDS=()
# ours PID: PID runs and its command line names our work dir.
ours() {
  local cmd
  [[ $1 =~ ^[0-9]+$ ]] || return 1
  cmd=$(tr '\0' ' ' 2>/dev/null <"/proc/$1/cmdline") || return 1
  [[ -n $WORK && $cmd == *"$WORK"* ]]
}
# stop PID...: SIGTERM those of ours, up to 40 s, then SIGKILL.
stop() {
  local pid left deadline=$((SECONDS + 40))
  for pid in "$@"; do if ours "$pid"; then kill -TERM "$pid" 2>/dev/null || true; fi; done
  while :; do
    left=()
    for pid in "$@"; do if ours "$pid"; then left+=("$pid"); fi; done
    ((${#left[@]} > 0)) || break
    if ((SECONDS >= deadline)); then
      kill -KILL "${left[@]}" 2>/dev/null || true
      break
    fi
    sleep 0.2
  done
}
cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  if ((${#PIDS[@]} > 0)); then stop "${PIDS[@]}"; fi
  wait 2>/dev/null || true
  if [[ -n $WORK && -d $WORK ]]; then
    if ((FAILED == 0)) && [[ ${KEEP_WORKDIR:-} != 1 ]]; then rm -rf "$WORK"; else log "kept $WORK (remove with: rm -rf $WORK)"; fi
  fi
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# ---------------------------------------------------------------- helpers

port_free() { ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
loadavg() {
  local l
  read -r l _ </proc/loadavg
  printf '%s' "$l"
}
# jget JSON KEY: a top-level scalar of a flat JSON object.
jget() {
  awk -v k="$2" '{
    if (match($0, "\"" k "\"[ \t]*:[ \t]*(\"[^\"]*\"|[-+0-9.eE]+|null|true|false)")) {
      r = substr($0, RSTART, RLENGTH); sub(/^"[^"]*"[ \t]*:[ \t]*/, "", r); gsub(/"/, "", r); print r
    }
  }' <<<"$1"
}
# cpu_ticks PID...: user+system clock ticks of the PIDs' children (a
# shardkit supervisor's worker) or of the PIDs themselves when childless.
cpu_ticks() {
  local p c t=0 s
  for p in "$@"; do
    c=$(pgrep -P "$p" | head -n1) || c=''
    [[ -n $c ]] || c=$p
    read -r -a s <"/proc/$c/stat" || continue
    t=$((t + s[13] + s[14]))
  done
  printf '%s' "$t"
}
TICK=$(getconf CLK_TCK)
# timed VAR CMD...: run CMD, VAR = its wall seconds.
timed() {
  local var=$1 t0 t1
  shift
  t0=$EPOCHREALTIME
  "$@"
  t1=$EPOCHREALTIME
  printf -v "$var" '%s' "$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.2f", b - a }')"
}
result() { printf '%s\n' "$1" >>"$RESULTS"; }

# ---------------------------------------------------------------- shardkit

# cluster NAME FIRST COUNT: COUNT instances (ports FIRST..), replication
# factor 3, their supervisors' pids in CL_PIDS and the discovery peers in
# CL_PEERS; returns once every instance is Online and the buckets are spread.
CL_PIDS=() CL_PEERS=''
cluster() {
  local name=$1 first=$2 count=$3 n i peers=() deadline st online
  CL_PIDS=()
  for ((i = 0; i < count; i++)); do
    n=$((first + i))
    port_free $((SHARDKIT_PORT_BASE + n)) && port_free $((SHARDKIT_HTTP_PORT_BASE + n)) ||
      die "port $((SHARDKIT_PORT_BASE + n)) or $((SHARDKIT_HTTP_PORT_BASE + n)) is in use; set SHARDKIT_PORT_BASE / SHARDKIT_HTTP_PORT_BASE"
    ((i < 3)) && peers+=("127.0.0.1:$((SHARDKIT_PORT_BASE + n))")
  done
  CL_PEERS=$(
    IFS=,
    echo "${peers[*]}"
  )
  for ((i = 0; i < count; i++)); do
    n=$((first + i))
    "$SK" run --instance-id "$name$((i + 1))" --listen "127.0.0.1:$((SHARDKIT_PORT_BASE + n))" \
      --http-listen "127.0.0.1:$((SHARDKIT_HTTP_PORT_BASE + n))" --peer "$CL_PEERS" \
      --data-dir "$WORK/$name/$((i + 1))" --init-replication-factor 3 --shutdown-timeout 5s \
      </dev/null >"$WORK/logs/$name$((i + 1)).log" 2>&1 &
    CL_PIDS+=($!)
    PIDS+=($!)
  done
  deadline=$((SECONDS + 180))
  until
    st=$(timeout 15 "$SK" status --peer "$CL_PEERS" --format json --timeout 5s 2>/dev/null | tr -d ' \t\n') || st=''
    online=$(grep -o '"current_grade":{"variant":"Online"' <<<"$st" | wc -l)
    ((online == count))
  do
    ((SECONDS < deadline)) || die "cluster $name: $online of $count instances Online after 180 s (logs in $WORK/logs)"
    sleep 1
  done
  # Spread: no move under way or to come, and every replicaset holds buckets.
  until
    st=$(timeout 15 "$SK" rebalance status --peer "$CL_PEERS" --format json --timeout 5s 2>/dev/null | tr -d ' \t\n') || st=''
    [[ -n $st && $st == *'"moves":[]'* && $(jget "$st" buckets_to_move) =~ ^(0|)$ ]] &&
      (($(grep -o '"buckets":[1-9]' <<<"$st" | wc -l) == count / 3))
  do
    ((SECONDS < deadline + 600)) || die "cluster $name: the buckets were not spread over $((count / 3)) replicasets in 10 minutes"
    sleep 1
  done
}

# rows_in PEERS: the rows of space "bench" over every replicaset.
rows_in() {
  local out
  out=$(timeout 120 "$SK" map-call count '["bench"]' --peer "$1" --timeout 60s 2>&1) || die "map-call count failed: $out"
  sed -n 's/.*"result":\[\([0-9]*\)\].*/\1/p' <<<"$out" | awk '{ s += $1 } END { print s + 0 }'
}

# load TAG: a replace load of LOAD_DURATION; its JSON in runs/TAG.json.
load() {
  "$SK" bench --peer "$SRC_PEERS" --workload replace --keys "$ROWS" --duration "$LOAD_DURATION" --clients "$CLIENTS" \
    --conns "$CONNS" --value-size "$VALUE_SIZE" --timeout 5s --format json >"$WORK/runs/$1.json" 2>"$WORK/logs/$1.stderr"
}

shardkit_side() {
  local t cpu0 cpu1 size p99a p99b errs rows t_verify
  cluster src 1 $((REPLICASETS * 3))
  SRC_PIDS=("${CL_PIDS[@]}") SRC_PEERS=$CL_PEERS
  log "source: $((REPLICASETS * 3)) instances, $REPLICASETS replicasets, on $SRC_PEERS (load average $(loadavg))"

  log "preloading $ROWS rows of $VALUE_SIZE bytes"
  "$SK" bench --peer "$SRC_PEERS" --workload insert --keys "$ROWS" --count "$ROWS" --clients "$CLIENTS" --conns "$CONNS" \
    --value-size "$VALUE_SIZE" --timeout 10s --format json >"$WORK/runs/preload.json" 2>"$WORK/logs/preload.stderr" ||
    die "the preload failed: $(tail -n 5 "$WORK/logs/preload.stderr")"
  rows=$(rows_in "$SRC_PEERS")
  ((rows == ROWS)) || die "the preload left $rows rows, not $ROWS"

  log "full backup"
  cpu0=$(cpu_ticks "${SRC_PIDS[@]}")
  timed t "$SK" backup create --peer "$SRC_PEERS" --to "$WORK/backups/full" >"$WORK/logs/backup-full.log" 2>&1 ||
    die "backup create failed: $(tail -n 5 "$WORK/logs/backup-full.log")"
  cpu1=$(cpu_ticks "${SRC_PIDS[@]}")
  size=$(du -sb "$WORK/backups/full" | cut -f1)
  timed t_verify "$SK" backup verify "$WORK/backups/full" >"$WORK/logs/verify-full.log" 2>&1 ||
    die "backup verify failed: $(tail -n 5 "$WORK/logs/verify-full.log")"
  log "    $t s, $size bytes, servers' CPU $(((cpu1 - cpu0) * 1000 / TICK)) ms; verify $t_verify s"
  result "{\"bench\":\"backup\",\"system\":\"shardkit\",\"step\":\"full\",\"rows\":$ROWS,\"value_size\":$VALUE_SIZE,\"replicasets\":$REPLICASETS,\"seconds\":$t,\"bytes\":$size,\"server_cpu_ms\":$(((cpu1 - cpu0) * 1000 / TICK)),\"verify_seconds\":$t_verify,\"load1\":$(loadavg)}"
  SUMMARY+=("shardkit full backup: $t s, $((size / 1048576)) MiB, servers' CPU $(((cpu1 - cpu0) * 1000 / TICK)) ms; verify $t_verify s")

  log "replacing 1% of the rows ($((ROWS / 100)) at random), then an incremental backup from the full one"
  "$SK" bench --peer "$SRC_PEERS" --workload replace --keys "$ROWS" --count $((ROWS / 100)) --clients "$CLIENTS" \
    --conns "$CONNS" --value-size "$VALUE_SIZE" --timeout 5s --format json >"$WORK/runs/change.json" 2>"$WORK/logs/change.stderr" ||
    die "the 1% replace failed"
  cpu0=$(cpu_ticks "${SRC_PIDS[@]}")
  timed t "$SK" backup create --peer "$SRC_PEERS" --incremental-from "$WORK/backups/full" --to "$WORK/backups/inc" \
    >"$WORK/logs/backup-inc.log" 2>&1 || die "incremental backup failed: $(tail -n 5 "$WORK/logs/backup-inc.log")"
  cpu1=$(cpu_ticks "${SRC_PIDS[@]}")
  size=$(du -sb "$WORK/backups/inc" | cut -f1)
  timed t_verify "$SK" backup verify "$WORK/backups/inc" >"$WORK/logs/verify-inc.log" 2>&1 ||
    die "backup verify of the incremental failed: $(tail -n 5 "$WORK/logs/verify-inc.log")"
  log "    $t s, $size bytes, servers' CPU $(((cpu1 - cpu0) * 1000 / TICK)) ms; verify (with its base) $t_verify s; $(grep '^incremental since' "$WORK/logs/backup-inc.log" | sed 's/^incremental since [^:]*: //')"
  result "{\"bench\":\"backup\",\"system\":\"shardkit\",\"step\":\"incremental\",\"changed_rows\":$((ROWS / 100)),\"seconds\":$t,\"bytes\":$size,\"server_cpu_ms\":$(((cpu1 - cpu0) * 1000 / TICK)),\"verify_seconds\":$t_verify,\"load1\":$(loadavg)}"
  SUMMARY+=("shardkit incremental backup of 1% changed since the full one: $t s, $((size / 1024)) KiB, servers' CPU $(((cpu1 - cpu0) * 1000 / TICK)) ms; verify with its base $t_verify s")

  log "writers without a backup ($LOAD_DURATION)"
  load idle || die "the load failed: $(tail -n 5 "$WORK/logs/idle.stderr")"
  log "writers with a backup started ${LOAD_LEAD} s into the load"
  load during &
  local lpid=$!
  sleep "$LOAD_LEAD"
  timed t "$SK" backup create --peer "$SRC_PEERS" --to "$WORK/backups/during" >"$WORK/logs/backup-during.log" 2>&1 ||
    die "backup create under load failed: $(tail -n 5 "$WORK/logs/backup-during.log")"
  wait "$lpid" || die "the load failed: $(tail -n 5 "$WORK/logs/during.stderr")"
  p99a=$(jget "$(tr -d '\n' <"$WORK/runs/idle.json")" p99_ms)
  p99b=$(jget "$(tr -d '\n' <"$WORK/runs/during.json")" p99_ms)
  errs=$(jget "$(tr -d '\n' <"$WORK/runs/during.json")" errors)
  log "    p99 $p99a ms alone, $p99b ms with a backup ($t s); errors $errs"
  result "{\"bench\":\"backup\",\"system\":\"shardkit\",\"step\":\"under_load\",\"backup_seconds\":$t,\"p99_ms_alone\":${p99a:-null},\"p99_ms_with_backup\":${p99b:-null},\"errors\":${errs:-null},\"load1\":$(loadavg)}"
  SUMMARY+=("shardkit writers' p99: $p99a ms alone, $p99b ms with a backup ($t s; $CLIENTS clients, $LOAD_DURATION; errors $errs)")

  stop "${SRC_PIDS[@]}"

  cluster dst 20 $((RESTORE_REPLICASETS * 3))
  log "restoring the full backup into $((RESTORE_REPLICASETS * 3)) new instances, $RESTORE_REPLICASETS replicasets"
  cpu0=$(cpu_ticks "${CL_PIDS[@]}")
  timed t "$SK" backup restore --from "$WORK/backups/full" --peer "$CL_PEERS" >"$WORK/logs/restore.log" 2>&1 ||
    die "backup restore failed: $(tail -n 5 "$WORK/logs/restore.log")"
  cpu1=$(cpu_ticks "${CL_PIDS[@]}")
  rows=$(rows_in "$CL_PEERS")
  ((rows == ROWS)) || die "the restored cluster holds $rows rows, not $ROWS"
  log "    $t s, $rows rows, servers' CPU $(((cpu1 - cpu0) * 1000 / TICK)) ms"
  result "{\"bench\":\"backup\",\"system\":\"shardkit\",\"step\":\"restore\",\"replicasets\":$RESTORE_REPLICASETS,\"seconds\":$t,\"rows\":$rows,\"server_cpu_ms\":$(((cpu1 - cpu0) * 1000 / TICK)),\"load1\":$(loadavg)}"
  SUMMARY+=("shardkit restore into $RESTORE_REPLICASETS replicasets: $t s, $rows rows, servers' CPU $(((cpu1 - cpu0) * 1000 / TICK)) ms")
  stop "${CL_PIDS[@]}"
}

# ---------------------------------------------------------------- etcd

etcd_side() {
  local pid t size clients=250 keys c=$((ETCD_PORT_BASE + 1)) p=$((ETCD_PORT_BASE + 2))
  ((ROWS % clients == 0)) || die "ROWS: $ROWS is not a multiple of $clients (etcd's preload: $clients clients, ROWS/$clients keys each)"
  keys=$((ROWS / clients))
  port_free "$c" && port_free "$p" || die "port $c or $p is in use; set ETCD_PORT_BASE"
  "$ETCD_BIN" --name m1 --data-dir "$WORK/etcd/m1" --listen-client-urls "http://127.0.0.1:$c" \
    --advertise-client-urls "http://127.0.0.1:$c" --listen-peer-urls "http://127.0.0.1:$p" \
    --initial-advertise-peer-urls "http://127.0.0.1:$p" --initial-cluster "m1=http://127.0.0.1:$p" \
    --quota-backend-bytes $((8 * 1024 * 1024 * 1024)) >"$WORK/logs/etcd.log" 2>&1 &
  pid=$!
  PIDS+=("$pid")
  for _ in $(seq 1 60); do
    "$ETCDCTL_BIN" --endpoints "127.0.0.1:$c" endpoint health >/dev/null 2>&1 && break
    sleep 0.5
  done
  log "etcd: preloading $ROWS keys of $VALUE_SIZE bytes"
  "$ETCD_BENCH" --endpoints "127.0.0.1:$c" --workload get --clients "$clients" --keys "$keys" --value-size "$VALUE_SIZE" \
    --duration 1s --settle=false >"$WORK/logs/etcd-preload.log" 2>&1 || die "etcd's preload failed: $(tail -n 5 "$WORK/logs/etcd-preload.log")"
  timed t "$ETCDCTL_BIN" --endpoints "127.0.0.1:$c" snapshot save "$WORK/etcd/snap.db" >"$WORK/logs/etcd-save.log" 2>&1 ||
    die "etcdctl snapshot save failed: $(tail -n 5 "$WORK/logs/etcd-save.log")"
  size=$(stat -c %s "$WORK/etcd/snap.db")
  log "    snapshot save: $t s, $size bytes"
  result "{\"bench\":\"backup\",\"system\":\"etcd\",\"step\":\"snapshot_save\",\"keys\":$ROWS,\"value_size\":$VALUE_SIZE,\"seconds\":$t,\"bytes\":$size,\"load1\":$(loadavg)}"
  SUMMARY+=("etcd snapshot save: $t s, $((size / 1048576)) MiB (one member)")
  stop "$pid"
  timed t "$ETCDCTL_BIN" snapshot restore "$WORK/etcd/snap.db" --data-dir "$WORK/etcd/restored" >"$WORK/logs/etcd-restore.log" 2>&1 ||
    die "etcdctl snapshot restore failed: $(tail -n 5 "$WORK/logs/etcd-restore.log")"
  log "    snapshot restore: $t s"
  result "{\"bench\":\"backup\",\"system\":\"etcd\",\"step\":\"snapshot_restore\",\"keys\":$ROWS,\"seconds\":$t,\"load1\":$(loadavg)}"
  SUMMARY+=("etcd snapshot restore: $t s (one member's data dir)")
}

# ---------------------------------------------------------------- main

WORK=$(mktemp -d "$WORKDIR_PARENT/bench-backup.XXXXXX")
mkdir -p "$WORK/bin" "$WORK/logs" "$WORK/runs" "$WORK/backups" "$WORK/etcd"
mkdir -p "$(dirname "$RESULTS")"
: >>"$RESULTS"
SUMMARY=()
if has shardkit; then
  if [[ -n ${SHARDKIT_BIN:-} ]]; then
    SK=$SHARDKIT_BIN
  else
    log "building shardkit"
    (cd "$REPO" && go build -o "$WORK/bin/shardkit" ./cmd/shardkit) || die "building shardkit failed"
    SK=$WORK/bin/shardkit
  fi
  "$SK" backup --help >/dev/null 2>&1 || die "$SK has no 'backup' command"
fi
if has etcd; then
  command -v "$ETCD_BIN" >/dev/null && command -v "$ETCDCTL_BIN" >/dev/null ||
    die "etcd or etcdctl is missing (bash scripts/services.sh install-etcd)"
  log "building etcd-bench (bench/etcd)"
  (cd "$REPO/bench/etcd" && go build -o "$WORK/bin/etcd-bench" .) || die "building bench/etcd failed"
  ETCD_BENCH=$WORK/bin/etcd-bench
fi
log "$(nproc) cores, $(uname -sr), load average $(loadavg); results in $RESULTS"
if has shardkit; then shardkit_side; fi
if has etcd; then etcd_side; fi
printf '\n%s\n' "backups, $ROWS rows of $VALUE_SIZE bytes, $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) cores:"
printf '  %s\n' "${SUMMARY[@]}"
FAILED=0
