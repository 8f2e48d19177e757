#!/usr/bin/env bash
# shardkit against etcd 3.4 on this machine, in one run, interleaved: writes
# (etcd put, shardkit replace) and linearizable reads (etcd get, shardkit get)
# of 100-byte values, for each client count, etcd then shardkit then etcd
# then shardkit ...; ops/s, p99 and server CPU per operation of both, and the
# ratio. The etcd setup and the load shape (the project's etcd peer note) and
# the figures are in docs/benchmarks.md ("Data layer against etcd").
#
#   bash scripts/bench-vs-etcd.sh                     # both systems, 64 and 256 clients
#   SYSTEMS=etcd CLIENTS="1 64 256" bash scripts/bench-vs-etcd.sh
#
# It builds shardkit (unless SHARDKIT_BIN) and bench/etcd (etcd-bench) into a
# temporary directory, starts three etcd members on loopback and a
# three-instance shardkit cluster (replication factor 3), runs the load,
# prints a table on stdout and appends every run's JSON line to the results
# file. Everything it started is stopped on exit, by pid; nothing else is.
#
# Environment (defaults in brackets):
#   SYSTEMS     etcd and/or shardkit, space- or comma-separated [etcd shardkit]
#   CLIENTS     client counts [64 256]
#   WORKLOADS   write and/or read [write read]
#   ROUNDS      runs of each system per client count and workload [2]
#   DURATION    length of each run: Ns, Nms or Nm [10s]
#   VALUE_SIZE  bytes per value [100]
#   KEYS        keys per client [1000]: etcd-bench's --keys (client w uses
#               k/<w>/0..KEYS-1); shardkit bench gets the same number of
#               distinct keys as its range, --keys CLIENTS*KEYS
#   CONNS       client connections shared by the clients, both systems [16]
#   SETTLE      seconds of pause before each run, for the previous one's
#               background work (compaction, snapshots) to end [2]
#   RESULTS     results file (JSON lines) [/var/tmp/bench-vs-etcd-<UTC time>.jsonl]
#   WORKDIR_PARENT  where the temporary data dirs go; local disk [/var/tmp]
#   SHARDKIT_BIN    a prebuilt shardkit binary (else built from this repo)
#   SHARDKIT_SPACE  passed as `shardkit bench --space` when set
#   WATCHERS    watches beside the load, both systems [0]: etcd watchers of
#               the bench's key prefix, shardkit watches of the bench's space
#               (every bucket); their events and delay are in the JSON lines
#   SHARDKIT_RUN_FLAGS  more `shardkit run` flags for the three instances,
#               space-separated, e.g. --enable-pprof []
#   CHANGEFEED  1: a changefeed of the bench's space beside each shardkit run
#               (bench/feedlag: changefeed.Run into kfake in its own process,
#               FEED_PARTS parts [8]; FEEDLAG_BIN: a prebuilt one, else
#               built from this repo), started before the load and stopped
#               after it; its events/s and commit-to-Kafka-ack lag p50/p99/max
#               are in the JSON lines (changefeed_*); alt: in even rounds
#               only, for the write rate without and with it in one run [0]
#   SHARDKIT_BENCH_FLAGS  more `shardkit bench` flags, space-separated, e.g.
#               --pipelining=false (client pipelining off) []
#   ETCD_BIN, ETCDCTL_BIN  [etcd, etcdctl from PATH; see scripts/services.sh install-etcd]
#   ETCD_CLIENT_PORT_BASE [23790], ETCD_PEER_PORT_BASE [23800]: member N listens on BASE+N
#   SHARDKIT_PORT_BASE [25300], SHARDKIT_HTTP_PORT_BASE [25310]: instance N on BASE+N
#               (every default is below Linux's ephemeral ports, 32768-60999)
#   KEEP_WORKDIR=1  keep the data dirs and logs (they are kept anyway on failure)
#
# CPU per operation: the user+system time (/proc/PID/stat) of the system's
# server processes (the three etcd members; the three shardkit workers, found
# as the children of the supervisors) over the timed part of the run, i.e.
# the last duration_s seconds before the load generator exits (sampled every
# 0.1 s), divided by the operations. A preload before the timed part (get)
# is not counted.
set -euo pipefail
export LC_ALL=C

REPO=$(cd "$(dirname "$0")/.." && pwd)

SYSTEMS=${SYSTEMS:-etcd shardkit}
SYSTEMS=${SYSTEMS//,/ }
CLIENTS=${CLIENTS:-64 256}
CLIENTS=${CLIENTS//,/ }
WORKLOADS=${WORKLOADS:-write read}
WORKLOADS=${WORKLOADS//,/ }
ROUNDS=${ROUNDS:-2}
DURATION=${DURATION:-10s}
VALUE_SIZE=${VALUE_SIZE:-100}
KEYS=${KEYS:-1000}
CONNS=${CONNS:-16}
WATCHERS=${WATCHERS:-0}
CHANGEFEED=${CHANGEFEED:-0}
FEED_PARTS=${FEED_PARTS:-8}
SETTLE=${SETTLE:-2}
STAMP=$(date -u +%Y%m%dT%H%M%SZ)
RESULTS=${RESULTS:-/var/tmp/bench-vs-etcd-$STAMP.jsonl}
WORKDIR_PARENT=${WORKDIR_PARENT:-/var/tmp}
ETCD_BIN=${ETCD_BIN:-etcd}
ETCDCTL_BIN=${ETCDCTL_BIN:-etcdctl}
ETCD_CLIENT_PORT_BASE=${ETCD_CLIENT_PORT_BASE:-23790}
ETCD_PEER_PORT_BASE=${ETCD_PEER_PORT_BASE:-23800}
SHARDKIT_PORT_BASE=${SHARDKIT_PORT_BASE:-25300}
SHARDKIT_HTTP_PORT_BASE=${SHARDKIT_HTTP_PORT_BASE:-25310}
READY_TIMEOUT=${READY_TIMEOUT:-120}

log() { printf 'bench-vs-etcd: %s\n' "$*" >&2; }
die() {
  log "error: $*"
  exit 1
}

# ---------------------------------------------------------------- settings

has_system() { [[ " $SYSTEMS " == *" $1 "* ]]; }

for s in $SYSTEMS; do
  [[ $s == etcd || $s == shardkit ]] || die "SYSTEMS: unknown system '$s' (want etcd and/or shardkit)"
done
for w in $WORKLOADS; do
  [[ $w == write || $w == read ]] || die "WORKLOADS: unknown workload '$w' (want write and/or read)"
done
for c in $CLIENTS; do
  [[ $c =~ ^[1-9][0-9]*$ ]] || die "CLIENTS: '$c' is not a positive number"
done
[[ -n ${SYSTEMS// /} && -n ${CLIENTS// /} && -n ${WORKLOADS// /} ]] || die "SYSTEMS, CLIENTS and WORKLOADS must not be empty"
[[ $ROUNDS =~ ^[1-9][0-9]*$ ]] || die "ROUNDS: '$ROUNDS' is not a positive number"
[[ $CHANGEFEED == 0 || $CHANGEFEED == 1 || $CHANGEFEED == alt ]] || die "CHANGEFEED: '$CHANGEFEED' is not 0, 1 or alt"
for v in VALUE_SIZE KEYS CONNS SETTLE FEED_PARTS; do
  [[ ${!v} =~ ^[0-9]+$ ]] || die "$v: '${!v}' is not a number"
done
if [[ $DURATION =~ ^([0-9]+)(ms|s|m)$ ]]; then
  case ${BASH_REMATCH[2]} in
  ms) DURATION_S=$(((BASH_REMATCH[1] + 999) / 1000)) ;;
  s) DURATION_S=${BASH_REMATCH[1]} ;;
  m) DURATION_S=$((BASH_REMATCH[1] * 60)) ;;
  esac
else
  die "DURATION: '$DURATION' is not like 10s, 500ms or 2m"
fi
# A run may take its duration, a preload (get) and the connection set-up;
# past this it is killed and the script fails.
RUN_LIMIT_S=$((DURATION_S + 300))
CLK_TCK=$(getconf CLK_TCK)

ETCD_EPS=() SK_ADDRS=()
for n in 1 2 3; do
  ETCD_EPS+=("127.0.0.1:$((ETCD_CLIENT_PORT_BASE + n))")
  SK_ADDRS+=("127.0.0.1:$((SHARDKIT_PORT_BASE + n))")
done
ETCD_ENDPOINTS=$(
  IFS=,
  echo "${ETCD_EPS[*]}"
)
SK_PEERS=$(
  IFS=,
  echo "${SK_ADDRS[*]}"
)

# ---------------------------------------------------------------- cleanup

WORK='' FAILED=1 STARTED=0 RUN_NO=0 RUN_TOTAL=0
ETCD_PIDS=() SK_PIDS=() SK_WORKERS=() GEN_PID='' SAMPLER_PID='' FEED_PID=''

# ours PID: PID runs and is one of ours (its command line names our work dir).
ours() {
  local cmd
  [[ $1 =~ ^[0-9]+$ ]] || return 1
  cmd=$(tr '\0' ' ' 2>/dev/null <"/proc/$1/cmdline") || return 1
  [[ -n $WORK && $cmd == *"$WORK"* ]]
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

cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  if [[ -n $SAMPLER_PID ]]; then kill "$SAMPLER_PID" 2>/dev/null || true; fi
  # The load generator runs under timeout(1), which passes SIGTERM on.
  if [[ -n $GEN_PID ]]; then kill -TERM "$GEN_PID" 2>/dev/null || true; fi
  if [[ -n $FEED_PID ]] && ours "$FEED_PID"; then kill -TERM "$FEED_PID" 2>/dev/null || true; fi
  if ((${#ETCD_PIDS[@]} + ${#SK_PIDS[@]} > 0)); then
    log "stopping the servers this run started: etcd ${ETCD_PIDS[*]:-none}, shardkit ${SK_PIDS[*]:-none}"
    stop_servers "${ETCD_PIDS[@]}" "${SK_PIDS[@]}"
    # A worker dies with its supervisor (parent-death signal); make sure.
    if ((${#SK_WORKERS[@]} > 0)); then stop_servers "${SK_WORKERS[@]}"; fi
  fi
  wait 2>/dev/null || true
  if [[ -n $WORK && -d $WORK ]]; then
    if ((FAILED == 0 || STARTED == 0)) && [[ ${KEEP_WORKDIR:-} != 1 ]]; then
      rm -rf "$WORK"
    else
      log "data dirs and logs kept in $WORK (remove with: rm -rf $WORK)"
      if ((FAILED)) && ((RUN_NO > 1)); then log "the runs before the failure are in $RESULTS"; fi
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

# sum_ticks PID...: TICKS = utime + stime of the pids (clock ticks; a pid
# that is gone counts 0). No subshell: the sampler calls it 10 times a second.
TICKS=0
sum_ticks() {
  local pid line f
  TICKS=0
  for pid in "$@"; do
    if read -r line 2>/dev/null <"/proc/$pid/stat"; then
      read -r -a f <<<"${line##*) }" # fields from 3 (state) on; comm may hold spaces
      TICKS=$((TICKS + f[11] + f[12]))
    fi
  done
}

# sampler OUT PID...: append "time ticks" to OUT every 0.1 s until killed.
sampler() {
  local out=$1 fd
  shift
  exec {fd}<>"$WORK/tick" # a fifo nobody writes: read -t sleeps without a fork
  while :; do
    sum_ticks "$@"
    printf '%s %s\n' "$EPOCHREALTIME" "$TICKS"
    read -r -t 0.1 -u "$fd" _ || true
  done >>"$out"
}

# children_of PID: CHILDREN = the pids whose parent is PID.
CHILDREN=()
children_of() {
  local d line f
  CHILDREN=()
  for d in /proc/[0-9]*; do
    read -r line 2>/dev/null <"$d/stat" || continue
    read -r -a f <<<"${line##*) }"
    if [[ ${f[1]} == "$1" ]]; then CHILDREN+=("${d#/proc/}"); fi
  done
}

# ---------------------------------------------------------------- build

WORK=$(mktemp -d "$WORKDIR_PARENT/bench-vs-etcd.XXXXXX")
mkdir -p "$WORK/bin" "$WORK/logs" "$WORK/runs"
mkfifo "$WORK/tick"
log "work dir $WORK"

if has_system etcd; then
  if ! command -v "$ETCD_BIN" >/dev/null || ! command -v "$ETCDCTL_BIN" >/dev/null; then
    die "etcd or etcdctl not found; install them with: bash scripts/services.sh install-etcd"
  fi
  ETCD_VERSION=$("$ETCD_BIN" --version 2>/dev/null | sed -n 's/^etcd Version: //p')
  [[ $ETCD_VERSION == 3.4.* ]] || log "warning: etcd is ${ETCD_VERSION:-of unknown version}, the figures are held against 3.4"
  log "building etcd-bench (bench/etcd)"
  (cd "$REPO/bench/etcd" && go build -o "$WORK/bin/etcd-bench" .) || die "building bench/etcd failed"
fi

if has_system shardkit; then
  if [[ -n ${SHARDKIT_BIN:-} ]]; then
    [[ -x $SHARDKIT_BIN ]] || die "SHARDKIT_BIN=$SHARDKIT_BIN is not an executable"
    SK=$(cd "$(dirname "$SHARDKIT_BIN")" && pwd)/$(basename "$SHARDKIT_BIN")
  else
    log "building shardkit (./cmd/shardkit)"
    (cd "$REPO" && go build -o "$WORK/bin/shardkit" ./cmd/shardkit) || die "building shardkit failed"
    SK=$WORK/bin/shardkit
  fi
  if [[ $CHANGEFEED != 0 && -n ${FEEDLAG_BIN:-} ]]; then
    [[ -x $FEEDLAG_BIN ]] || die "FEEDLAG_BIN=$FEEDLAG_BIN is not an executable"
    cp "$FEEDLAG_BIN" "$WORK/bin/feedlag" # run from the work dir: ours() finds it by its path
  elif [[ $CHANGEFEED != 0 ]]; then
    log "building feedlag (bench/feedlag)"
    (cd "$REPO" && go build -o "$WORK/bin/feedlag" ./bench/feedlag) || die "building bench/feedlag failed"
  fi
  # Fail now, not after the clusters are up, if this shardkit cannot bench.
  if ! out=$(timeout 20 "$SK" bench --help 2>&1) || [[ $out != *--workload* ]]; then
    die "$SK has no working 'bench' command: $(head -n1 <<<"$out")
  The shardkit side needs 'shardkit bench' (being built on another branch); use a
  binary that has it (SHARDKIT_BIN=...) or measure etcd alone: SYSTEMS=etcd $0"
  fi
fi

# ---------------------------------------------------------------- etcd

etcd_health() { "$ETCDCTL_BIN" --endpoints="$ETCD_ENDPOINTS" --dial-timeout=2s --command-timeout=3s endpoint health >/dev/null 2>&1; }

start_etcd() {
  local n cluster='' deadline pid
  for n in 1 2 3; do
    if ! port_free $((ETCD_CLIENT_PORT_BASE + n)) || ! port_free $((ETCD_PEER_PORT_BASE + n)); then
      die "port $((ETCD_CLIENT_PORT_BASE + n)) or $((ETCD_PEER_PORT_BASE + n)) is in use; set ETCD_CLIENT_PORT_BASE / ETCD_PEER_PORT_BASE"
    fi
    cluster+=${cluster:+,}e$n=http://127.0.0.1:$((ETCD_PEER_PORT_BASE + n))
  done
  STARTED=1
  for n in 1 2 3; do
    mkdir -p "$WORK/etcd"
    "$ETCD_BIN" --name "e$n" --data-dir "$WORK/etcd/e$n" \
      --listen-client-urls "http://127.0.0.1:$((ETCD_CLIENT_PORT_BASE + n))" \
      --advertise-client-urls "http://127.0.0.1:$((ETCD_CLIENT_PORT_BASE + n))" \
      --listen-peer-urls "http://127.0.0.1:$((ETCD_PEER_PORT_BASE + n))" \
      --initial-advertise-peer-urls "http://127.0.0.1:$((ETCD_PEER_PORT_BASE + n))" \
      --initial-cluster "$cluster" --initial-cluster-state new \
      --quota-backend-bytes 8589934592 \
      </dev/null >"$WORK/logs/etcd-e$n.log" 2>&1 &
    ETCD_PIDS+=($!)
  done
  log "etcd $ETCD_VERSION: members e1 e2 e3 (pids ${ETCD_PIDS[*]}) on $ETCD_ENDPOINTS"
  deadline=$((SECONDS + READY_TIMEOUT))
  until etcd_health; do
    for n in 0 1 2; do
      pid=${ETCD_PIDS[n]}
      kill -0 "$pid" 2>/dev/null || fail_log "etcd e$((n + 1))" "$WORK/logs/etcd-e$((n + 1)).log" "exited during startup"
    done
    ((SECONDS < deadline)) || fail_log etcd "$WORK/logs/etcd-e1.log" "not healthy within ${READY_TIMEOUT}s"
    sleep 0.3
  done
  "$ETCDCTL_BIN" --endpoints="$ETCD_ENDPOINTS" endpoint status -w table >>"$WORK/logs/etcd-status.log" 2>&1 || true
  log "etcd: healthy"
}

# ---------------------------------------------------------------- shardkit

SK_STATUS=''
sk_status() { SK_STATUS=$(timeout 15 "$SK" status --peer "${SK_ADDRS[0]}" --format json --timeout 5s 2>/dev/null | tr -d ' \t\n'); }

# sk_ready: three instances Online, replication factor 3.
sk_ready() {
  local online
  sk_status || return 1
  online=$(grep -o '"current_grade":{"variant":"Online"' <<<"$SK_STATUS" | wc -l)
  ((online == 3)) && [[ $SK_STATUS == *'"replication_factor":3'* ]]
}

start_shardkit() {
  local n deadline
  for n in 1 2 3; do
    if ! port_free $((SHARDKIT_PORT_BASE + n)) || ! port_free $((SHARDKIT_HTTP_PORT_BASE + n)); then
      die "port $((SHARDKIT_PORT_BASE + n)) or $((SHARDKIT_HTTP_PORT_BASE + n)) is in use; set SHARDKIT_PORT_BASE / SHARDKIT_HTTP_PORT_BASE"
    fi
  done
  STARTED=1
  for n in 1 2 3; do
    # shellcheck disable=SC2086 # split on purpose: a list of flags
    "$SK" run --instance-id "s$n" \
      --listen "127.0.0.1:$((SHARDKIT_PORT_BASE + n))" \
      --http-listen "127.0.0.1:$((SHARDKIT_HTTP_PORT_BASE + n))" \
      --peer "$SK_PEERS" --data-dir "$WORK/shardkit/s$n" \
      --init-replication-factor 3 --shutdown-timeout 5s ${SHARDKIT_RUN_FLAGS:-} \
      </dev/null >"$WORK/logs/shardkit-s$n.log" 2>&1 &
    SK_PIDS+=($!)
  done
  log "shardkit: instances s1 s2 s3 (supervisor pids ${SK_PIDS[*]}) on $SK_PEERS"
  deadline=$((SECONDS + READY_TIMEOUT))
  until sk_ready; do
    for n in 0 1 2; do
      kill -0 "${SK_PIDS[n]}" 2>/dev/null || fail_log "shardkit s$((n + 1))" "$WORK/logs/shardkit-s$((n + 1)).log" "exited during startup"
    done
    ((SECONDS < deadline)) || fail_log shardkit "$WORK/logs/shardkit-s1.log" "not three instances Online with replication factor 3 within ${READY_TIMEOUT}s"
    sleep 0.5
  done
  timeout 15 "$SK" status --peer "${SK_ADDRS[0]}" >>"$WORK/logs/shardkit-status.log" 2>&1 || true
  find_sk_workers
  log "shardkit: three instances Online (worker pids ${SK_WORKERS[*]})"
}

# find_sk_workers: SK_WORKERS = the worker of each supervisor, its only
# child running from our work dir. The workers are where the CPU goes; a
# restarted worker has a new pid, so this runs before every shardkit run.
find_sk_workers() {
  local n spid c w
  local -a found=()
  for n in 0 1 2; do
    spid=${SK_PIDS[n]}
    ours "$spid" || fail_log "shardkit s$((n + 1))" "$WORK/logs/shardkit-s$((n + 1)).log" "supervisor (pid $spid) is gone"
    children_of "$spid"
    w=''
    for c in "${CHILDREN[@]}"; do
      if ours "$c"; then w=$c; fi
    done
    [[ -n $w ]] || fail_log "shardkit s$((n + 1))" "$WORK/logs/shardkit-s$((n + 1)).log" "supervisor (pid $spid) has no worker"
    found+=("$w")
  done
  if ((${#SK_WORKERS[@]} > 0)) && [[ ${found[*]} != "${SK_WORKERS[*]}" ]]; then
    log "warning: shardkit workers changed (${SK_WORKERS[*]} -> ${found[*]}): one restarted; see $WORK/logs"
  fi
  SK_WORKERS=("${found[@]}")
}

check_etcd_alive() {
  local n
  for n in 0 1 2; do
    ours "${ETCD_PIDS[n]}" || fail_log "etcd e$((n + 1))" "$WORK/logs/etcd-e$((n + 1)).log" "member (pid ${ETCD_PIDS[n]}) is gone"
  done
}

# ---------------------------------------------------------------- one run

# times_children: CHILD_CPU_S = user+system seconds of this shell's waited-for children.
CHILD_CPU_S=0
times_children() {
  local a b
  times >"$WORK/times"
  { read -r _ && read -r a b; } <"$WORK/times"
  CHILD_CPU_S=$(awk -v a="$a" -v b="$b" 'function s(x, m) { split(x, m, /[ms]/); return m[1] * 60 + m[2] }
    BEGIN { printf "%.3f", s(a) + s(b) }')
}

# run_one SYSTEM CLASS CLIENTS ROUND: one run of the load generator; appends
# its JSON line, with the server CPU and a few facts of the run, to RESULTS.
run_one() {
  local sys=$1 class=$2 clients=$3 round=$4 wl tag out err samples rc=0
  local t_end ticks_end cpu0 cpu1 json dur ops started load1 cpu_ticks cpu_s cpu_us client_cpu fed
  local -a cmd pids
  RUN_NO=$((RUN_NO + 1))
  if [[ $sys == etcd ]]; then
    check_etcd_alive
    pids=("${ETCD_PIDS[@]}")
    wl='get'
    if [[ $class == write ]]; then wl=put; fi
    cmd=("$WORK/bin/etcd-bench" --endpoints "$ETCD_ENDPOINTS" --workload "$wl" --clients "$clients"
      --conns "$CONNS" --duration "$DURATION" --value-size "$VALUE_SIZE" --keys "$KEYS" --timeout 5s --format json
      --watchers "$WATCHERS")
  else
    find_sk_workers
    pids=("${SK_WORKERS[@]}")
    wl='get'
    if [[ $class == write ]]; then wl=replace; fi
    # shardkit bench's --keys is the whole key range (0..N-1, drawn
    # uniformly), etcd-bench's is per client: the same number of keys.
    cmd=("$SK" bench --peer "$SK_PEERS" --workload "$wl" --clients "$clients" --conns "$CONNS" --duration "$DURATION"
      --value-size "$VALUE_SIZE" --keys "$((KEYS * clients))" --timeout 5s --format json --watchers "$WATCHERS")
    if [[ -n ${SHARDKIT_SPACE:-} ]]; then cmd+=(--space "$SHARDKIT_SPACE"); fi
    # shellcheck disable=SC2206 # split on purpose: a list of flags
    if [[ -n ${SHARDKIT_BENCH_FLAGS:-} ]]; then cmd+=($SHARDKIT_BENCH_FLAGS); fi
  fi
  tag=$sys-$wl-c$clients-r$round
  sleep "$SETTLE"
  out=$WORK/runs/$tag.json err=$WORK/logs/$tag.stderr samples=$WORK/runs/$tag.cpu
  read -r load1 _ </proc/loadavg
  started=$(date -u +%Y-%m-%dT%H:%M:%SZ)
  log "[$RUN_NO/$RUN_TOTAL] $sys $wl, $clients clients, round $round (load average $load1)"

  fed=0
  if [[ $sys == shardkit ]] && [[ $CHANGEFEED == 1 || ($CHANGEFEED == alt && $((round % 2)) == 0) ]]; then fed=1; fi
  if ((fed)); then start_feed "$tag"; fi
  sampler "$samples" "${pids[@]}" &
  SAMPLER_PID=$!
  times_children
  cpu0=$CHILD_CPU_S
  timeout -k 10 "$RUN_LIMIT_S" "${cmd[@]}" >"$out" 2>"$err" &
  GEN_PID=$!
  wait "$GEN_PID" || rc=$?
  t_end=$EPOCHREALTIME
  sum_ticks "${pids[@]}"
  ticks_end=$TICKS
  GEN_PID=''
  times_children
  cpu1=$CHILD_CPU_S
  kill "$SAMPLER_PID" 2>/dev/null || true
  wait "$SAMPLER_PID" 2>/dev/null || true
  SAMPLER_PID=''

  if ((rc == 124 || rc == 137)); then fail_log "$sys $wl" "$err" "did not finish within ${RUN_LIMIT_S}s (killed)"; fi
  ((rc == 0)) || fail_log "$sys $wl" "$err" "exited with status $rc"
  # One JSON object, maybe spread over lines: keep it from the first { to the last }.
  json=$(tr '\n' ' ' <"$out" | tr -s ' ' | sed -e 's/^[^{]*//' -e 's/}[^}]*$/}/')
  ops=$(jget "$json" ops)
  dur=$(jget "$json" duration_s)
  [[ $ops =~ ^[0-9]+$ && $dur =~ ^[0-9.eE+-]+$ ]] || fail_log "$sys $wl" "$err" "printed no result with ops and duration_s: $(head -c 300 "$out")"

  # Server CPU over the timed part: from duration_s before the end (the
  # ticks there interpolated between the two samples around it) to the end.
  cpu_ticks=$(awk -v te="${t_end}" -v dur="$dur" -v tend="$ticks_end" '
    NF == 2 && $1 ~ /^[0-9.]+$/ && $2 ~ /^[0-9]+$/ {
      if ($1 <= te - dur) { pt = $1; pv = $2; have = 1 } else if (!after) { nt = $1; nv = $2; after = 1 }
    }
    END {
      ts = te - dur
      if (!have) v = nv               # the window starts before the first sample: cannot happen
      else if (!after) v = pv
      else v = pv + (nv - pv) * (ts - pt) / (nt - pt)
      printf "%.1f", tend - v
    }' "$samples")
  cpu_s=$(awk -v t="$cpu_ticks" -v hz="$CLK_TCK" 'BEGIN { printf "%.3f", t / hz }')
  cpu_us=$(awk -v s="$cpu_s" -v n="$ops" 'BEGIN { if (n > 0) printf "%.1f", s * 1e6 / n; else print "null" }')
  client_cpu=$(awk -v a="$cpu0" -v b="$cpu1" 'BEGIN { printf "%.3f", b - a }')

  json=${json%\}}
  [[ $json == *'"system"'* ]] || json="{\"system\":\"$sys\",${json#\{}"
  json+=",\"bench\":\"$class\",\"round\":$round,\"server_cpu_s\":$cpu_s,\"cpu_us_per_op\":$cpu_us"
  json+=",\"client_cpu_s\":$client_cpu,\"load1\":$load1,\"started_at\":\"$started\""
  if ((fed)); then
    stop_feed "$tag"
    json+=$FEED_FIELDS
  fi
  json+="}"
  printf '%s\n' "$json" >>"$RESULTS"
  log "    $(jget "$json" ops_per_s | awk '{ printf "%.0f", $1 }') ops/s, p99 $(jget "$json" p99_ms) ms, errors $(jget "$json" errors), $cpu_us server CPU-us/op"
  if [[ $(jget "$json" errors) != 0 ]]; then log "    warning: errors; see $err"; fi
}

# start_feed TAG: start feedlag on the bench's space and wait until every
# part of its feed started (the load's writes are then all sent).
start_feed() {
  local deadline=$((SECONDS + READY_TIMEOUT)) ready=$WORK/feed.ready
  rm -f "$ready"
  "$WORK/bin/feedlag" --peer "$SK_PEERS" --space "${SHARDKIT_SPACE:-bench}" --parts "$FEED_PARTS" --ready "$ready" \
    </dev/null >"$WORK/runs/$1.feed.json" 2>"$WORK/logs/$1.feed.stderr" &
  FEED_PID=$!
  until [[ -s $ready ]]; do
    ours "$FEED_PID" || fail_log feedlag "$WORK/logs/$1.feed.stderr" "exited before its feed started"
    ((SECONDS < deadline)) || fail_log feedlag "$WORK/logs/$1.feed.stderr" "feed not started within ${READY_TIMEOUT}s"
    sleep 0.2
  done
}

# stop_feed TAG: stop feedlag (it waits for Kafka's acknowledgements of
# what it sent) and set FEED_FIELDS to its figures as JSON fields.
stop_feed() {
  local rc=0 feed
  kill -TERM "$FEED_PID" 2>/dev/null || true
  wait "$FEED_PID" || rc=$?
  FEED_PID=''
  ((rc == 0)) || fail_log feedlag "$WORK/logs/$1.feed.stderr" "exited with status $rc"
  feed=$(tr -d '\n' <"$WORK/runs/$1.feed.json")
  [[ $(jget "$feed" events) =~ ^[0-9]+$ ]] || fail_log feedlag "$WORK/logs/$1.feed.stderr" "printed no events: $(head -c 300 "$WORK/runs/$1.feed.json")"
  FEED_FIELDS=",\"changefeed_events\":$(jget "$feed" events),\"changefeed_events_per_s\":$(jget "$feed" events_per_s)"
  FEED_FIELDS+=",\"changefeed_lag_p50_ms\":$(jget "$feed" lag_p50_ms),\"changefeed_lag_p99_ms\":$(jget "$feed" lag_p99_ms)"
  FEED_FIELDS+=",\"changefeed_lag_max_ms\":$(jget "$feed" lag_max_ms),\"changefeed_cpu_s\":$(jget "$feed" cpu_s)"
  log "    changefeed: $(jget "$feed" events) events, $(jget "$feed" events_per_s | awk '{ printf "%.0f", $1 }')/s; commit to Kafka ack p50 $(jget "$feed" lag_p50_ms) ms, p99 $(jget "$feed" lag_p99_ms) ms, max $(jget "$feed" lag_max_ms) ms; feed CPU $(jget "$feed" cpu_s) s"
}
FEED_FIELDS=''

# jget JSON KEY: the value of a top-level scalar KEY of a flat JSON object.
jget() {
  awk -v k="$2" '{
    if (match($0, "\"" k "\"[ \t]*:[ \t]*(\"[^\"]*\"|[-+0-9.eE]+|null|true|false)")) {
      r = substr($0, RSTART, RLENGTH); sub(/^"[^"]*"[ \t]*:[ \t]*/, "", r); gsub(/"/, "", r); print r
    }
  }' <<<"$1"
}

# ---------------------------------------------------------------- table

table() {
  awk -v systems="$SYSTEMS" '
    function jget(s, k,   r) {
      if (match(s, "\"" k "\"[ \t]*:[ \t]*(\"[^\"]*\"|[-+0-9.eE]+|null|true|false)")) {
        r = substr(s, RSTART, RLENGTH); sub(/^"[^"]*"[ \t]*:[ \t]*/, "", r); gsub(/"/, "", r); return r
      }
      return ""
    }
    function median(list,   a, n, i, j, t) {
      n = split(list, a, " ")
      if (n == 0) return ""
      for (i = 2; i <= n; i++) for (j = i; j > 1 && a[j - 1] + 0 > a[j] + 0; j--) { t = a[j]; a[j] = a[j - 1]; a[j - 1] = t }
      return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
    }
    function f0(v) { return v == "" ? "-" : sprintf("%.0f", v) }
    function f1(v) { return v == "" ? "-" : sprintf("%.1f", v) }
    function ratio(a, b) { return (a == "" || b == "" || b + 0 == 0) ? "-" : sprintf("%.2f", a / b) }
    function row(label, c, r, eo, so, ep, sp, ec, sc, eg, sg, ee, se) {
      printf "%-6s %7s %5s | %9s %9s %7s | %8s %8s | %9s %9s | %5s %5s | %s/%s\n", label, c, r,
        f0(eo), f0(so), ratio(so, eo), f1(ep), f1(sp), f0(ec), f0(sc), f0(eg), f0(sg), ee == "" ? "-" : ee, se == "" ? "-" : se
    }
    {
      sys = jget($0, "system"); b = jget($0, "bench"); c = jget($0, "clients"); r = jget($0, "round")
      k = b SUBSEP c SUBSEP r
      if (!(k in seen)) { seen[k] = 1; keys[++nk] = k }
      g = b SUBSEP c
      if (!(g in gseen)) { gseen[g] = 1; groups[++ng] = g }
      ops[sys, k] = jget($0, "ops_per_s"); p99[sys, k] = jget($0, "p99_ms")
      cpu[sys, k] = jget($0, "cpu_us_per_op"); errs[sys, k] = jget($0, "errors")
      n = jget($0, "ops"); gen[sys, k] = (n > 0 && jget($0, "client_cpu_s") != "") ? jget($0, "client_cpu_s") * 1e6 / n : ""
      ggen[sys, g] = ggen[sys, g] " " gen[sys, k]
      gops[sys, g] = gops[sys, g] " " ops[sys, k]; gp99[sys, g] = gp99[sys, g] " " p99[sys, k]
      gcpu[sys, g] = gcpu[sys, g] " " cpu[sys, k]; gerr[sys, g] += errs[sys, k]; gn[sys, g]++
    }
    END {
      printf "%-6s %7s %5s | %-27s | %-17s | %-19s | %-11s | %s\n", "", "", "", "ops/s, ratio", "p99 ms", "CPU-us/op (server)", "load gen", "errors"
      printf "%-6s %7s %5s | %9s %9s %7s | %8s %8s | %9s %9s | %5s %5s | %s\n", "bench", "clients", "round", "etcd", "shardkit", "sk/etcd", "etcd", "shardkit", "etcd", "shardkit", "etcd", "sk", "etcd/sk"
      for (i = 1; i <= nk; i++) {
        split(keys[i], p, SUBSEP)
        row(p[1], p[2], p[3], ops["etcd", keys[i]], ops["shardkit", keys[i]], p99["etcd", keys[i]], p99["shardkit", keys[i]],
          cpu["etcd", keys[i]], cpu["shardkit", keys[i]], gen["etcd", keys[i]], gen["shardkit", keys[i]], errs["etcd", keys[i]], errs["shardkit", keys[i]])
      }
      print ""
      print "median over the rounds:"
      for (i = 1; i <= ng; i++) {
        split(groups[i], p, SUBSEP)
        row(p[1], p[2], "med", median(gops["etcd", groups[i]]), median(gops["shardkit", groups[i]]),
          median(gp99["etcd", groups[i]]), median(gp99["shardkit", groups[i]]),
          median(gcpu["etcd", groups[i]]), median(gcpu["shardkit", groups[i]]),
          median(ggen["etcd", groups[i]]), median(ggen["shardkit", groups[i]]),
          gn["etcd", groups[i]] ? gerr["etcd", groups[i]] : "", gn["shardkit", groups[i]] ? gerr["shardkit", groups[i]] : "")
      }
    }' "$1"
}

# ---------------------------------------------------------------- main

n_sys=0
for _ in $SYSTEMS; do n_sys=$((n_sys + 1)); done
for _ in $CLIENTS; do for _ in $WORKLOADS; do RUN_TOTAL=$((RUN_TOTAL + ROUNDS * n_sys)); done; done

if has_system etcd; then start_etcd; fi
if has_system shardkit; then start_shardkit; fi

mkdir -p "$(dirname "$RESULTS")"
: >>"$RESULTS"
RUN_RESULTS=$WORK/results.jsonl # this run's lines only, for the table
first_line=$(($(wc -l <"$RESULTS") + 1))
log "$RUN_TOTAL runs of $DURATION: clients $CLIENTS, $WORKLOADS, $ROUNDS rounds of $SYSTEMS"
for clients in $CLIENTS; do
  for class in $WORKLOADS; do
    for ((round = 1; round <= ROUNDS; round++)); do
      for sys in etcd shardkit; do
        if has_system "$sys"; then run_one "$sys" "$class" "$clients" "$round"; fi
      done
    done
  done
done
tail -n "+$first_line" "$RESULTS" >"$RUN_RESULTS"

{
  echo "shardkit vs etcd: $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) cores ($(lscpu | sed -n 's/^Model name: *//p' | head -n1)), $(uname -sr)"
  sk_version='(not run)'
  if has_system shardkit; then sk_version=$("$SK" version 2>/dev/null | head -n1); fi
  echo "etcd ${ETCD_VERSION:-(not run)}; $sk_version; $DURATION runs, $VALUE_SIZE-byte values, $KEYS keys per client, ${CONNS} connections"
  echo "write = etcd put / shardkit replace; read = etcd get / shardkit get (both linearizable); ratio = shardkit ops/s / etcd ops/s"
  echo "CPU-us/op = server processes' user+system CPU over the timed part / ops; load gen = the load generator's CPU over its whole run"
  echo "(a get's preload included) / ops, in us; results: $RESULTS"
  echo
  table "$RUN_RESULTS"
}
FAILED=0
