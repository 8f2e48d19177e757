#!/usr/bin/env bash
# Installs (via apt, when missing), starts and stops the real servers some
# shardkit tests use: MariaDB and PostgreSQL (SQL lease tables of cache/lease)
# and ZooKeeper (the numerator's coordinator). See docs/testing.md.
#
#   scripts/services.sh env     ensure all three run, print `export` lines
#   scripts/services.sh start   ensure all three run, print nothing
#   scripts/services.sh stop    stop the servers this script started
#   scripts/services.sh status  show which of them run (exit 1 if any does not)
#   scripts/services.sh install-etcd
#                               install etcd and etcdctl (Debian's etcd-server
#                               and etcd-client) if missing, for
#                               scripts/bench-vs-etcd.sh; starts nothing
#   scripts/services.sh install-chromium
#                               install Chromium (Debian's chromium) if missing,
#                               for the web console's browser tests
#                               (tests/browser); starts nothing
#
# The servers are ordinary background daemons (no systemd), listening on
# 127.0.0.1 only, each with its data and its log under one root directory:
#
#   MariaDB     127.0.0.1:13306   $root/mariadb/{data,mariadb.log,my.cnf}
#   PostgreSQL  127.0.0.1:15432   $root/postgres/{data,postgres.log}
#   ZooKeeper   127.0.0.1:12181   $root/zookeeper/{data,zookeeper.log,conf}
#
# root defaults to /var/tmp/shardkit-services. Overrides (rarely needed):
# SHARDKIT_SERVICES_DIR, SHARDKIT_MYSQL_PORT, SHARDKIT_POSTGRES_PORT,
# SHARDKIT_ZOOKEEPER_PORT, SHARDKIT_SERVICES_TIMEOUT (readiness deadline in
# seconds per server, default 120).
#
# Everything but the `export` lines of `env` goes to stderr, so that
# `eval "$(scripts/services.sh env)"` works. These are disposable test
# servers: durability is traded for speed (fsync off and the like).
set -euo pipefail

ROOT=${SHARDKIT_SERVICES_DIR:-/var/tmp/shardkit-services}
if [[ $ROOT != /* ]]; then ROOT=$PWD/$ROOT; fi
MYSQL_PORT=${SHARDKIT_MYSQL_PORT:-13306}
PG_PORT=${SHARDKIT_POSTGRES_PORT:-15432}
ZK_PORT=${SHARDKIT_ZOOKEEPER_PORT:-12181}
TIMEOUT=${SHARDKIT_SERVICES_TIMEOUT:-120}

DB_USER=shardkit
DB_PASS=shardkit
DB_NAME=shardkit_test

MY_DIR=$ROOT/mariadb
MY_DATA=$MY_DIR/data
MY_CNF=$MY_DIR/my.cnf
MY_LOG=$MY_DIR/mariadb.log
MY_PID=$MY_DIR/mariadbd.pid
MY_SOCK=$MY_DIR/mariadbd.sock

PG_DIR=$ROOT/postgres
PG_DATA=$PG_DIR/data
PG_LOG=$PG_DIR/postgres.log

ZK_DIR=$ROOT/zookeeper
ZK_DATA=$ZK_DIR/data
ZK_CONF=$ZK_DIR/conf
ZK_LOG=$ZK_DIR/zookeeper.log
ZK_PID=$ZK_DIR/zookeeper.pid
ZK_JAR=/usr/share/java/zookeeper.jar # Debian's libzookeeper-java

log() { printf 'services.sh: %s\n' "$*" >&2; }
die() {
  log "error: $*"
  exit 1
}

usage() {
  sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "$0" >&2
  exit 2
}

# ---------------------------------------------------------------- helpers

# The user a server runs as: its system user when we are root, else ourselves.
svc_user() {
  local u=$1
  if [[ $EUID -ne 0 ]]; then id -un; elif id -u "$u" >/dev/null 2>&1; then echo "$u"; else echo root; fi
}

# as_user USER CMD...: run CMD as USER (exec'ing, so a pid stays the server's).
as_user() {
  local u=$1
  shift
  if [[ $EUID -ne 0 || $u == root ]]; then
    "$@"
  else
    setpriv --reuid="$(id -u "$u")" --regid="$(id -g "$u")" --init-groups -- "$@"
  fi
}

# spawn LOG CMD...: start CMD as a daemon in its own session, stdin from
# /dev/null, stdout and stderr appended to LOG, and no other descriptor
# inherited (an inherited pipe would keep `$(services.sh env)` or a CI log
# pipe open forever; an inherited lock fd would keep our lock held).
# Sets SPAWNED_PID (the daemon's pid: setsid, setpriv and env all exec).
spawn() {
  local logf=$1
  shift
  (
    for fd in /proc/self/fd/*; do
      fd=${fd##*/}
      if ((fd > 2)); then eval "exec ${fd}>&-"; fi
    done
    exec setsid "$@" </dev/null >>"$logf" 2>&1
  ) &
  SPAWNED_PID=$!
}

# alive PID WORD: PID runs and its command line contains WORD.
alive() {
  local pid=$1 word=$2 cmd
  [[ $pid =~ ^[0-9]+$ ]] || return 1
  cmd=$(tr '\0' ' ' 2>/dev/null <"/proc/$pid/cmdline") || return 1
  [[ $cmd == *"$word"* ]]
}

read_pid() {
  if [[ -r $1 ]]; then head -n1 "$1" | tr -dc '0-9'; fi
}

fail_server() { # NAME LOG MESSAGE
  log "error: $1 $3; log: $2"
  if [[ -r $2 ]]; then
    log "last lines of $2:"
    tail -n 40 "$2" >&2
  fi
  exit 1
}

# wait_ready NAME LOG PID PROBE...: wait until PROBE succeeds, failing early
# if PID dies and at the deadline.
wait_ready() {
  local name=$1 logf=$2 pid=$3 deadline=$((SECONDS + TIMEOUT))
  shift 3
  until "$@"; do
    if [[ -n $pid ]] && ! kill -0 "$pid" 2>/dev/null; then
      fail_server "$name" "$logf" "exited during startup"
    fi
    if ((SECONDS >= deadline)); then
      fail_server "$name" "$logf" "did not become ready within ${TIMEOUT}s"
    fi
    sleep 0.2
  done
}

# stop_pid NAME PID WORD SIGNAL: signal the server and wait for it to exit.
stop_pid() {
  local name=$1 pid=$2 word=$3 sig=$4 deadline=$((SECONDS + 60))
  if ! alive "$pid" "$word"; then
    log "$name: not running"
    return 0
  fi
  log "$name: stopping (pid $pid)"
  kill -s "$sig" "$pid" 2>/dev/null || true
  while alive "$pid" "$word"; do
    if ((SECONDS >= deadline)); then
      log "$name: still running after 60s, killing it"
      kill -s KILL "$pid" 2>/dev/null || true
    fi
    sleep 0.2
  done
}

# ---------------------------------------------------------------- binaries

MARIADBD='' PG_BIN='' JAVA=''

find_mariadb() {
  MARIADBD=$(PATH=$PATH:/usr/sbin:/usr/local/sbin command -v mariadbd || true)
  [[ -n $MARIADBD ]] && command -v mariadb-install-db mariadb mariadb-admin >/dev/null
}

find_postgres() {
  local d
  PG_BIN=''
  # The newest major version under /usr/lib/postgresql with a server and client.
  while read -r d; do
    if [[ -x $d/initdb && -x $d/postgres && -x $d/pg_isready && -x $d/psql ]]; then PG_BIN=$d; fi
  done < <(printf '%s\n' /usr/lib/postgresql/*/bin | sort -V)
  [[ -n $PG_BIN ]]
}

find_zookeeper() {
  JAVA=$(command -v java || true)
  [[ -n $JAVA && -r $ZK_JAR ]]
}

# apt_install PKG...: apt-get install the packages (needs root), with a
# temporary /usr/sbin/policy-rc.d (unless one exists) that keeps their
# maintainer scripts from starting their own servers on the default ports
# (there is no systemd; invoke-rc.d would use init.d).
apt_install() {
  local policy=/usr/sbin/policy-rc.d own_policy=0 rc=0
  if [[ $EUID -ne 0 ]]; then
    die "missing $*; run this script as root or install them: apt-get install $*"
  fi
  log "installing $* (apt-get)"
  if [[ ! -e $policy ]]; then
    printf '#!/bin/sh\n# temporary, from shardkit scripts/services.sh\nexit 101\n' >"$policy"
    chmod 755 "$policy"
    own_policy=1
  fi
  {
    apt-get -o DPkg::Lock::Timeout=600 update -q &&
      DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -q \
        --no-install-recommends "$@"
  } >&2 || rc=$?
  if ((own_policy)); then rm -f "$policy"; fi
  ((rc == 0)) || die "apt-get install $* failed (exit $rc)"
}

ensure_installed() {
  local pkgs=()
  find_mariadb || pkgs+=(mariadb-server)
  find_postgres || pkgs+=(postgresql)
  find_zookeeper || pkgs+=(zookeeper)
  ((${#pkgs[@]} == 0)) && return 0
  apt_install "${pkgs[@]}"
  find_mariadb || die "MariaDB binaries (mariadbd, mariadb-install-db, mariadb, mariadb-admin) not found after installing"
  find_postgres || die "PostgreSQL binaries not found under /usr/lib/postgresql/*/bin after installing"
  find_zookeeper || die "java or $ZK_JAR not found after installing zookeeper"
}

# ---------------------------------------------------------------- etcd

# etcd is not a test service: scripts/bench-vs-etcd.sh runs its own three
# members. This only installs Debian's packages (3.4 on bookworm) when
# etcd or etcdctl is missing; it starts no etcd, and stops only one that the
# package's own init script started during this install.

# package_etcd_pids: pids of etcd servers as Debian's init script starts
# them: /usr/bin/etcd with no arguments (it is configured by /etc/default/etcd
# through the environment). Our benchmark members always have arguments.
package_etcd_pids() {
  local d cmd
  for d in /proc/[0-9]*; do
    cmd=$(tr '\0' ' ' 2>/dev/null <"$d/cmdline") || continue
    if [[ $cmd == '/usr/bin/etcd ' ]]; then echo "${d#/proc/}"; fi
  done
}

install_etcd() {
  local pkgs=() before pid
  lock
  command -v etcd >/dev/null || pkgs+=(etcd-server)
  command -v etcdctl >/dev/null || pkgs+=(etcd-client)
  if ((${#pkgs[@]} > 0)); then
    before=" $(package_etcd_pids | tr '\n' ' ')"
    apt_install "${pkgs[@]}"
    # policy-rc.d should have kept the package's service from starting; if
    # it started one anyway, stop that one (it was not running before we
    # installed) and no other.
    for pid in $(package_etcd_pids); do
      if [[ $before != *" $pid "* ]]; then stop_pid "etcd (started by the package)" "$pid" /usr/bin/etcd TERM; fi
    done
    if ! command -v etcd >/dev/null || ! command -v etcdctl >/dev/null; then
      die "etcd or etcdctl not found after installing ${pkgs[*]}"
    fi
  fi
  log "etcd: $(command -v etcd) ($(etcd --version 2>/dev/null | head -n1)), $(command -v etcdctl) ($(ETCDCTL_API=3 etcdctl version 2>/dev/null | head -n1))"
}

# ---------------------------------------------------------------- MariaDB

my_probe() { mariadb-admin --defaults-file="$MY_CNF" --connect-timeout=2 ping >/dev/null 2>&1; }

my_write_cnf() {
  local user=$1
  cat >"$MY_CNF" <<EOF
# Written by shardkit scripts/services.sh; rewritten on every start.
[mysqld]
user = $user
datadir = $MY_DATA
socket = $MY_SOCK
pid-file = $MY_PID
port = $MYSQL_PORT
bind-address = 127.0.0.1
skip-name-resolve
character-set-server = utf8mb4
collation-server = utf8mb4_general_ci
max_connections = 500
innodb_buffer_pool_size = 128M
innodb_flush_log_at_trx_commit = 2
innodb_doublewrite = 0
sync_binlog = 0

[client]
user = root
socket = $MY_SOCK
port = $MYSQL_PORT
EOF
}

# my_launch: make sure MariaDB runs or is starting; sets MY_STARTED_PID when
# it had to start it.
MY_STARTED_PID=''
my_launch() {
  local user
  user=$(svc_user mysql)
  mkdir -p "$MY_DIR"
  if [[ -r $MY_CNF ]] && my_probe; then return 0; fi
  if alive "$(read_pid "$MY_PID")" mariadbd; then
    MY_STARTED_PID=$(read_pid "$MY_PID") # starting or stuck: wait for it
    return 0
  fi
  my_write_cnf "$user"
  chown "$user:" "$MY_DIR"
  if [[ ! -d $MY_DATA/mysql ]]; then
    log "MariaDB: initializing $MY_DATA"
    rm -rf "$MY_DATA"
    mariadb-install-db --defaults-file="$MY_CNF" --user="$user" \
      --auth-root-authentication-method=normal --skip-test-db >>"$MY_LOG" 2>&1 ||
      fail_server MariaDB "$MY_LOG" "mariadb-install-db failed"
  fi
  # Stale after a crash; the socket lock names a pid that may still be a
  # zombie nobody has reaped, which would make mariadbd refuse to start.
  rm -f "$MY_PID" "$MY_SOCK" "$MY_SOCK.lock"
  log "MariaDB: starting on 127.0.0.1:$MYSQL_PORT"
  spawn "$MY_LOG" "$MARIADBD" --defaults-file="$MY_CNF"
  MY_STARTED_PID=$SPAWNED_PID
}

my_provision() {
  mariadb --defaults-file="$MY_CNF" --batch <<EOF || fail_server MariaDB "$MY_LOG" "could not create user $DB_USER / database $DB_NAME"
DELETE FROM mysql.global_priv WHERE User = '';
FLUSH PRIVILEGES;
CREATE DATABASE IF NOT EXISTS $DB_NAME;
CREATE USER IF NOT EXISTS '$DB_USER'@'%' IDENTIFIED BY '$DB_PASS';
CREATE USER IF NOT EXISTS '$DB_USER'@'localhost' IDENTIFIED BY '$DB_PASS';
ALTER USER '$DB_USER'@'%' IDENTIFIED BY '$DB_PASS';
ALTER USER '$DB_USER'@'localhost' IDENTIFIED BY '$DB_PASS';
GRANT ALL PRIVILEGES ON *.* TO '$DB_USER'@'%' WITH GRANT OPTION;
GRANT ALL PRIVILEGES ON *.* TO '$DB_USER'@'localhost' WITH GRANT OPTION;
EOF
}

# ---------------------------------------------------------------- PostgreSQL

# pg_probe: our server (its socket is in our directory) accepts connections.
pg_probe() { "$PG_BIN/pg_isready" -q -h "$PG_DIR" -p "$PG_PORT" -t 2 >/dev/null 2>&1; }

PG_STARTED_PID=''
pg_launch() {
  local user major pid
  user=$(svc_user postgres)
  [[ $user != root ]] || die "PostgreSQL refuses to run as root and there is no 'postgres' user; create one (useradd --system postgres)"
  major=$(basename "$(dirname "$PG_BIN")")
  mkdir -p "$PG_DIR"
  if pg_probe; then return 0; fi
  pid=$(read_pid "$PG_DATA/postmaster.pid")
  if alive "$pid" postgres; then
    PG_STARTED_PID=$pid # starting or in recovery: wait for it
    return 0
  fi
  chown "$user:" "$PG_DIR"
  if [[ -r $PG_DATA/PG_VERSION && $(<"$PG_DATA/PG_VERSION") != "$major" ]]; then
    log "PostgreSQL: $PG_DATA is from version $(<"$PG_DATA/PG_VERSION"), binaries are $major: re-initializing"
    rm -rf "$PG_DATA"
  fi
  if [[ ! -r $PG_DATA/PG_VERSION ]]; then
    log "PostgreSQL $major: initializing $PG_DATA"
    rm -rf "$PG_DATA"
    as_user "$user" "$PG_BIN/initdb" -D "$PG_DATA" -U postgres -E UTF8 --locale=C \
      --auth-local=trust --auth-host=scram-sha-256 >>"$PG_LOG" 2>&1 ||
      fail_server PostgreSQL "$PG_LOG" "initdb failed"
  fi
  # Stale after a crash: their process is gone, though maybe still a zombie
  # nobody has reaped, which would make postgres refuse to start.
  rm -f "$PG_DATA/postmaster.pid" "$PG_DIR/.s.PGSQL.$PG_PORT" "$PG_DIR/.s.PGSQL.$PG_PORT.lock"
  log "PostgreSQL $major: starting on 127.0.0.1:$PG_PORT"
  spawn "$PG_LOG" env -C "$PG_DIR" setpriv --reuid="$(id -u "$user")" --regid="$(id -g "$user")" --init-groups -- \
    "$PG_BIN/postgres" -D "$PG_DATA" -p "$PG_PORT" -k "$PG_DIR" \
    -c listen_addresses=127.0.0.1 -c max_connections=300 \
    -c fsync=off -c synchronous_commit=off -c full_page_writes=off
  PG_STARTED_PID=$SPAWNED_PID
}

pg_provision() {
  "$PG_BIN/psql" -h "$PG_DIR" -p "$PG_PORT" -U postgres -d postgres -X -q -v ON_ERROR_STOP=1 >/dev/null <<EOF || fail_server PostgreSQL "$PG_LOG" "could not create role $DB_USER / database $DB_NAME"
DO \$\$ BEGIN
  IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = '$DB_USER') THEN
    CREATE ROLE $DB_USER;
  END IF;
END \$\$;
ALTER ROLE $DB_USER LOGIN CREATEDB PASSWORD '$DB_PASS';
SELECT 'CREATE DATABASE $DB_NAME OWNER $DB_USER'
  WHERE NOT EXISTS (SELECT FROM pg_database WHERE datname = '$DB_NAME')\gexec
EOF
}

# ---------------------------------------------------------------- ZooKeeper

# zk_probe: the server on our port serves requests and is ours: it answers
# the `conf` four-letter word with our data dir (a server that is not yet
# serving answers "This ZooKeeper instance is not currently serving requests").
zk_probe() {
  local out
  # shellcheck disable=SC2016 # $1 is expanded by the inner bash
  out=$(timeout 3 bash -c 'exec 3<>"/dev/tcp/127.0.0.1/$1" && printf conf >&3 && cat <&3' _ "$ZK_PORT" 2>/dev/null) || return 1
  [[ $out == *"dataDir=$ZK_DATA/"* ]]
}

zk_write_conf() {
  mkdir -p "$ZK_CONF"
  cat >"$ZK_CONF/zoo.cfg" <<EOF
# Written by shardkit scripts/services.sh; rewritten on every start.
# tickTime 500ms lets tests use session timeouts from 1s (minSessionTimeout)
# up to 60s (maxSessionTimeout).
tickTime=500
minSessionTimeout=1000
maxSessionTimeout=60000
dataDir=$ZK_DATA
clientPort=$ZK_PORT
clientPortAddress=127.0.0.1
maxClientCnxns=0
forceSync=no
admin.enableServer=false
4lw.commands.whitelist=conf,srvr,stat,ruok,mntr,cons,envi,isro,wchs,dump
autopurge.snapRetainCount=3
autopurge.purgeInterval=1
EOF
  cat >"$ZK_CONF/log4j.properties" <<'EOF'
log4j.rootLogger=INFO, CONSOLE
log4j.appender.CONSOLE=org.apache.log4j.ConsoleAppender
log4j.appender.CONSOLE.layout=org.apache.log4j.PatternLayout
log4j.appender.CONSOLE.layout.ConversionPattern=%d{ISO8601} %-5p [%t:%C{1}@%L] - %m%n
EOF
}

ZK_STARTED_PID=''
zk_launch() {
  local user pid
  user=$(svc_user zookeeper)
  mkdir -p "$ZK_DIR"
  if zk_probe; then return 0; fi
  pid=$(read_pid "$ZK_PID")
  if alive "$pid" zookeeper; then
    ZK_STARTED_PID=$pid # starting: wait for it
    return 0
  fi
  zk_write_conf
  mkdir -p "$ZK_DATA"
  chown -R "$user:" "$ZK_DATA"
  log "ZooKeeper: starting on 127.0.0.1:$ZK_PORT"
  spawn "$ZK_LOG" env -C "$ZK_DIR" HOME="$ZK_DIR" setpriv --reuid="$(id -u "$user")" --regid="$(id -g "$user")" --init-groups -- \
    "$JAVA" -Xms64m -Xmx256m -XX:+UseSerialGC -XX:TieredStopAtLevel=1 -XX:-UsePerfData \
    -Djava.net.preferIPv4Stack=true \
    -Dlog4j.configuration="file:$ZK_CONF/log4j.properties" \
    -Dzookeeper.log.dir="$ZK_DIR" \
    -cp "$ZK_CONF:$ZK_JAR" \
    org.apache.zookeeper.server.quorum.QuorumPeerMain "$ZK_CONF/zoo.cfg"
  ZK_STARTED_PID=$SPAWNED_PID
  echo "$ZK_STARTED_PID" >"$ZK_PID"
}

# ---------------------------------------------------------------- commands

lock() {
  mkdir -p "$ROOT"
  chmod 755 "$ROOT"
  exec 9>>"$ROOT/.lock"
  if ! flock -w 600 9; then die "another scripts/services.sh holds $ROOT/.lock for 10 minutes"; fi
}

start_all() {
  lock
  cd "$ROOT" # the servers' users may not read the caller's directory
  ensure_installed
  # Launch all that are not running, then wait for each: the slow starts
  # (JVM, InnoDB recovery) overlap.
  my_launch
  pg_launch
  zk_launch
  if [[ -n $MY_STARTED_PID ]]; then wait_ready MariaDB "$MY_LOG" "$MY_STARTED_PID" my_probe; fi
  if [[ -n $PG_STARTED_PID ]]; then wait_ready PostgreSQL "$PG_LOG" "$PG_STARTED_PID" pg_probe; fi
  if [[ -n $ZK_STARTED_PID ]]; then wait_ready ZooKeeper "$ZK_LOG" "$ZK_STARTED_PID" zk_probe; fi
  my_provision
  pg_provision
  log "ready: MariaDB 127.0.0.1:$MYSQL_PORT, PostgreSQL 127.0.0.1:$PG_PORT, ZooKeeper 127.0.0.1:$ZK_PORT (data and logs in $ROOT)"
}

print_env() {
  printf "export SHARDKIT_TEST_MYSQL_DSN='%s'\n" "$DB_USER:$DB_PASS@tcp(127.0.0.1:$MYSQL_PORT)/$DB_NAME?parseTime=true"
  printf "export SHARDKIT_TEST_POSTGRES_DSN='%s'\n" "postgres://$DB_USER:$DB_PASS@127.0.0.1:$PG_PORT/$DB_NAME?sslmode=disable"
  printf "export SHARDKIT_TEST_ZOOKEEPER='%s'\n" "127.0.0.1:$ZK_PORT"
}

stop_all() {
  lock
  stop_pid MariaDB "$(read_pid "$MY_PID")" mariadbd TERM
  # SIGINT is PostgreSQL's "fast" shutdown (SIGTERM would wait for clients).
  stop_pid PostgreSQL "$(read_pid "$PG_DATA/postmaster.pid")" postgres INT
  stop_pid ZooKeeper "$(read_pid "$ZK_PID")" zookeeper TERM
  rm -f "$ZK_PID"
}

status_all() {
  local bad=0 pid
  find_mariadb || true
  find_postgres || true
  find_zookeeper || true
  pid=$(read_pid "$MY_PID")
  if [[ -n $MARIADBD && -r $MY_CNF ]] && my_probe; then
    echo "MariaDB     running  127.0.0.1:$MYSQL_PORT  pid ${pid:-?}  $MY_DIR"
  else
    echo "MariaDB     stopped  127.0.0.1:$MYSQL_PORT  $MY_DIR"
    bad=1
  fi
  pid=$(read_pid "$PG_DATA/postmaster.pid")
  if [[ -n $PG_BIN ]] && pg_probe; then
    echo "PostgreSQL  running  127.0.0.1:$PG_PORT  pid ${pid:-?}  $PG_DIR ($PG_BIN)"
  else
    echo "PostgreSQL  stopped  127.0.0.1:$PG_PORT  $PG_DIR"
    bad=1
  fi
  pid=$(read_pid "$ZK_PID")
  if zk_probe; then
    echo "ZooKeeper   running  127.0.0.1:$ZK_PORT  pid ${pid:-?}  $ZK_DIR"
  else
    echo "ZooKeeper   stopped  127.0.0.1:$ZK_PORT  $ZK_DIR"
    bad=1
  fi
  return "$bad"
}

# install_chromium installs the headless browser of tests/browser, which
# finds it on PATH (or in SHARDKIT_CHROMIUM).
install_chromium() {
  local b
  for b in chromium chromium-browser google-chrome; do
    if command -v "$b" >/dev/null; then
      log "chromium: $(command -v "$b") ($("$b" --version 2>/dev/null | head -n1))"
      return 0
    fi
  done
  lock
  apt_install chromium
  command -v chromium >/dev/null || die "chromium not found after installing it"
  log "chromium: $(command -v chromium) ($(chromium --version 2>/dev/null | head -n1))"
}

case ${1:-} in
env)
  exec 3>&1 1>&2 # only the export lines go to the real stdout
  start_all
  print_env >&3
  ;;
start)
  start_all >&2
  ;;
stop) stop_all ;;
status) status_all ;;
install-etcd) install_etcd ;;
install-chromium) install_chromium ;;
-h | --help | help) usage ;;
*) usage ;;
esac
