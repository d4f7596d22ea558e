#!/usr/bin/env bash
# integration/testenv.sh — THE test command of adksession.
#
#   integration/testenv.sh                 # runs: go test -race -count=1 -timeout 80m ./...
#   integration/testenv.sh CMD [ARGS...]   # runs CMD with the same environment, e.g.
#   integration/testenv.sh go test -race -count=1 -v ./integration/...
#
# It starts throwaway servers, all bound to 127.0.0.1 on free ports, with their data and logs in one temp dir:
#   - a standalone redis-server                      (no persistence: --save "" --appendonly no)
#     (the shared servers refuse FLUSHALL and FLUSHDB: wiping one would wipe every test's data)
#   - a Redis Cluster of 3 masters + 3 replicas      (cluster-node-timeout 2000 ms)
#   - a PostgreSQL 15 cluster (initdb -A trust, fsync/synchronous_commit/full_page_writes off) with database
#     "adksession"
# then runs the command with these variables exported:
#   ADKSESSION_TEST_REDIS_URL          redis://127.0.0.1:P/0
#   ADKSESSION_TEST_REDIS_CLUSTER_URL  redis+cluster://127.0.0.1:p1,...,127.0.0.1:p6 (all six nodes)
#   ADKSESSION_TEST_DATABASE_URL       postgres://USER@127.0.0.1:Q/adksession?sslmode=disable
#   ADKSESSION_TEST_PG_CTL             a command prefix that runs pg_ctl on that cluster as the right OS user,
#                                      with -D and -l already given. Append the pg_ctl mode and options; split
#                                      on spaces (the temp dir never contains spaces):
#                                        $ADKSESSION_TEST_PG_CTL stop -m fast
#                                        $ADKSESSION_TEST_PG_CTL start -w
#                                        $ADKSESSION_TEST_PG_CTL status
#                                      From Go use testenv.PgCtl(t, "stop", "-m", "fast").
#   ADKSESSION_TEST_PGDATA             the data directory of that cluster
#   ADKSESSION_TEST_PG_BIN             /usr/lib/postgresql/15/bin
#   ADKSESSION_TEST_PG_USER            the OS user that owns PGDATA (= the database superuser name)
#   ADKSESSION_TEST_PG_RUNAS           "runuser -u USER --" when running as root, empty otherwise
#   ADKSESSION_TEST_REDIS_SERVER       path of redis-server (tests may start their own, e.g. with AOF)
#   ADKSESSION_TEST_REDIS_CLI          path of redis-cli
#   ADKSESSION_TEST_REDIS_BENCHMARK    path of redis-benchmark
#   ADKSESSION_TEST_CHROMIUM           /usr/bin/chromium, only when it is installed (this script never installs it)
#   ADKSESSION_TEST_TMPDIR             the temp dir (mode 0755; removed afterwards)
#   ADKSESSION_TEST_REQUIRE            1: integration tests fail, rather than skip, when a server is missing
#
# The servers are shared by all tests of all packages (go test runs packages in parallel): tests isolate their
# data with testenv.UniqueName / testenv.FreshDatabase and use private servers (testenv.StartRedis,
# StartCluster, StartPostgres) for fault injection. See integration/testenv/testenv.go.
#
# Whatever happens (success, failure, Ctrl-C, SIGTERM) every server is stopped and the temp dir removed; the
# script exits with the command's exit code (128+N when it was interrupted by signal N). The command runs in
# its own process group, which is killed at the end, and any process left running from the temp dir (by
# command line or working directory) is killed too.
#
# Knobs: ADKSESSION_TESTENV_DEADLINE (seconds a server gets to come up, default 60), ADKSESSION_TEST_PG_BIN
# (default /usr/lib/postgresql/15/bin), ADKSESSION_TEST_CHROMIUM (kept when already set), TMPDIR (parent of
# the temp dir), ADKSESSION_TESTENV_DEBUG=1 (cleanup timing).
#
# Works on a fresh Debian 12 machine, as root or as a normal user (who needs sudo only to install packages).
# When root, PostgreSQL runs as the existing "postgres" user, else as a system user "adksession-test" created
# on first use, because initdb refuses to run as root.
set -euo pipefail

DEBUG_TIMING=${ADKSESSION_TESTENV_DEBUG:-0}
readonly START_DEADLINE=${ADKSESSION_TESTENV_DEADLINE:-60}   # seconds each server gets to come up
PG_BIN=${ADKSESSION_TEST_PG_BIN:-/usr/lib/postgresql/15/bin}

log() { printf 'testenv: %s\n' "$*" >&2; }
since() { echo "$(($(now_ms) - T0)) ms"; }
die() { printf 'testenv: ERROR: %s\n' "$*" >&2; exit 1; }
now_ms() { local t; t=$(date +%s%N); echo $((t / 1000000)); }

if [[ $# -eq 0 ]]; then
  # The default command runs from the repository root, so "./..." is the whole module whatever the caller's
  # directory. An explicit command runs in the caller's directory.
  cd "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/.."
  set -- go test -race -count=1 -timeout 80m ./...
fi

# ---------------------------------------------------------------------------------------------------------------
# Packages
# ---------------------------------------------------------------------------------------------------------------
as_root() {
  if [[ $(id -u) -eq 0 ]]; then
    "$@"
  elif command -v sudo >/dev/null 2>&1; then
    sudo "$@"
  else
    die "not root and no sudo: cannot run: $*"
  fi
}

apt_install() {
  command -v apt-get >/dev/null 2>&1 || die "missing $*; no apt-get on this machine, install them by hand"
  log "installing $* (apt-get)"
  as_root env DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 update -q >&2
  as_root env DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -q \
    --no-install-recommends "$@" >&2
}

if ! command -v redis-server >/dev/null 2>&1 || ! command -v redis-cli >/dev/null 2>&1 ||
   ! command -v redis-benchmark >/dev/null 2>&1; then
  apt_install redis-server redis-tools
fi
if [[ ! -x $PG_BIN/initdb ]]; then
  apt_install postgresql-15
  [[ -x $PG_BIN/initdb ]] || die "$PG_BIN/initdb still missing after installing postgresql-15"
fi
REDIS_SERVER=$(command -v redis-server)
REDIS_CLI=$(command -v redis-cli)
REDIS_BENCHMARK=$(command -v redis-benchmark)

# ---------------------------------------------------------------------------------------------------------------
# Temp dir, bookkeeping, cleanup
# ---------------------------------------------------------------------------------------------------------------
tmp_parent=${TMPDIR:-/tmp}
[[ $tmp_parent =~ [[:space:]] || ! -d $tmp_parent || ! -w $tmp_parent ]] && tmp_parent=/tmp
TMP=$(mktemp -d "$tmp_parent/adksession-test.XXXXXX")
TMP=$(readlink -f "$TMP")
chmod 0755 "$TMP"      # the postgres OS user must be able to traverse it

REDIS_PIDS=()          # every redis-server this script started
PGDATA=""              # set once initdb ran
PG_RUNAS=()            # runuser prefix when root
PG_SETUP_PID=""        # background PostgreSQL setup
CHILD_PID=""           # the command under test
CHILD_PGID=""          # its process group (= CHILD_PID when started with setsid)
SIGNALLED=""           # signal number when interrupted
CLEANED=""

kill_wait() { # SECONDS PID...: SIGTERM, wait up to SECONDS, then SIGKILL
  local secs=$1 pid deadline; shift
  for pid in "$@"; do kill -TERM "$pid" 2>/dev/null || true; done
  deadline=$((SECONDS + secs))
  for pid in "$@"; do
    while kill -0 "$pid" 2>/dev/null && ((SECONDS < deadline)); do sleep 0.05; done
    kill -KILL "$pid" 2>/dev/null || true
  done
}

cleanup() {
  set +e
  [[ -n $CLEANED ]] && return
  CLEANED=1
  local t0; t0=$(now_ms)
  # 1. the command under test, and anything still alive in its process group (go test's test binaries, servers
  #    a test started and did not stop)
  if [[ -n $CHILD_PGID ]] && kill -0 -- "-$CHILD_PGID" 2>/dev/null; then
    log "stopping what is left of the command (process group $CHILD_PGID)"
    kill -TERM -- "-$CHILD_PGID" 2>/dev/null
    local d=$((SECONDS + 15))
    while kill -0 -- "-$CHILD_PGID" 2>/dev/null && ((SECONDS < d)); do sleep 0.1; done
    kill -KILL -- "-$CHILD_PGID" 2>/dev/null
  elif [[ -n $CHILD_PID ]] && kill -0 "$CHILD_PID" 2>/dev/null; then
    kill_wait 15 "$CHILD_PID"
  fi
  # 2. postgres (first let a still running background setup finish or die). Our redis servers persist nothing,
  #    so they get SIGKILL right away (SIGTERM can make a Redis 7 master wait for lagging replicas).
  ((${#REDIS_PIDS[@]})) && kill -KILL "${REDIS_PIDS[@]}" 2>/dev/null
  if [[ -n $PG_SETUP_PID ]]; then
    kill_wait 10 "$PG_SETUP_PID"
    wait "$PG_SETUP_PID" 2>/dev/null
  fi
  if [[ -n $PGDATA && -f $PGDATA/PG_VERSION ]]; then
    (cd "$TMP" && "${PG_RUNAS[@]}" "$PG_BIN/pg_ctl" -D "$PGDATA" stop -m immediate -w -t 30 >/dev/null 2>&1)
    if [[ -f $PGDATA/postmaster.pid ]]; then
      local ppid; ppid=$(head -n1 "$PGDATA/postmaster.pid" 2>/dev/null)
      [[ $ppid =~ ^[0-9]+$ ]] && kill -QUIT "$ppid" 2>/dev/null && sleep 0.5 && kill -KILL "$ppid" 2>/dev/null
    fi
  fi
  # 3. redis
  ((${#REDIS_PIDS[@]})) && kill_wait 10 "${REDIS_PIDS[@]}"
  ((DEBUG_TIMING)) && log "cleanup: redis+postgres stopped after $(($(now_ms) - t0)) ms"
  # 4. safety net: any process still running from the temp dir (e.g. a server a test started under
  #    ADKSESSION_TEST_TMPDIR and did not stop).
  local f pid cmd left=()
  #    Matched by command line or by working directory (redis-server rewrites its command line).
  for f in $( { grep -lsaF -- "$TMP/" /proc/[0-9]*/cmdline; find /proc/[0-9]*/cwd -maxdepth 0 -lname "$TMP/*"; } \
    2>/dev/null | sort -u); do
    pid=${f#/proc/}; pid=${pid%/*}
    [[ $pid == "$$" || $pid == "$BASHPID" ]] && continue
    cmd=$( { tr '\0' ' ' <"/proc/$pid/cmdline"; } 2>/dev/null) || continue
    log "killing leftover process $pid: ${cmd:0:120}"
    left+=("$pid")
  done
  ((${#left[@]})) && kill_wait 5 "${left[@]}"
  # 5. the temp dir
  rm -rf "$TMP"
  [[ -e $TMP ]] && log "WARNING: could not remove $TMP"
  log "stopped all servers and removed $TMP in $(($(now_ms) - t0)) ms"
}

on_signal() { # NAME NUMBER: exit now; the EXIT trap stops the command (TERM, then KILL after 15 s) and servers
  SIGNALLED=$2
  log "got SIG$1, stopping"
  exit $((128 + $2))
}
trap cleanup EXIT
trap 'on_signal INT 2' INT
trap 'on_signal TERM 15' TERM
trap 'on_signal HUP 1' HUP

# ---------------------------------------------------------------------------------------------------------------
# Ports
# ---------------------------------------------------------------------------------------------------------------
USED_PORTS=" "
port_in_use() {
  if (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; then return 0; fi
  if command -v ss >/dev/null 2>&1 && [[ -n $(ss -Htan "sport = :$1" 2>/dev/null) ]]; then return 0; fi
  return 1
}
# pick_port [bus]: sets PICKED to a free port below the ephemeral range (32768+); with "bus", PORT+10000 (the
# Redis Cluster bus port) must be free too. (Not used as $(pick_port): USED_PORTS must survive.) Collisions
# with other processes starting at the same time are handled by the callers, which retry on "address in use".
pick_port() {
  local p i
  for ((i = 0; i < 2000; i++)); do
    p=$((11000 + RANDOM % 11000))      # 11000..21999, bus ports 21000..31999
    [[ $USED_PORTS == *" $p "* || $USED_PORTS == *" $((p + 10000)) "* ]] && continue
    port_in_use "$p" && continue
    if [[ ${1:-} == bus ]]; then
      [[ $USED_PORTS == *" $((p - 10000)) "* ]] && continue
      port_in_use $((p + 10000)) && continue
    fi
    USED_PORTS+="$p $((p + 10000)) "
    PICKED=$p
    return 0
  done
  die "no free TCP port found on 127.0.0.1"
}

show_log() { # FILE
  printf 'testenv: ---- last lines of %s ----\n' "$1" >&2
  tail -n 30 "$1" >&2 2>/dev/null || true
  printf 'testenv: ----\n' >&2
}

T0=$(now_ms)

# ---------------------------------------------------------------------------------------------------------------
# PostgreSQL (set up in the background while the Redis servers start)
# ---------------------------------------------------------------------------------------------------------------
if [[ $(id -u) -eq 0 ]]; then
  if id -u postgres >/dev/null 2>&1; then
    PG_USER=postgres
  else
    PG_USER=adksession-test
    if ! id -u "$PG_USER" >/dev/null 2>&1; then
      log "creating system user $PG_USER (initdb refuses to run as root)"
      useradd -r -M -d /nonexistent -s /usr/sbin/nologin "$PG_USER" 2>/dev/null ||
        useradd -r -M -s /bin/false "$PG_USER"
    fi
  fi
  PG_RUNAS=(runuser -u "$PG_USER" --)
else
  PG_USER=$(id -un)
  PG_RUNAS=()
fi
PGROOT=$TMP/pg
PGLOG=$PGROOT/postgres.log
mkdir -p "$PGROOT/sock"
if [[ $(id -u) -eq 0 ]]; then
  chown -R "$PG_USER:" "$PGROOT"
  "${PG_RUNAS[@]}" test -w "$PGROOT" ||
    die "user $PG_USER cannot write $PGROOT (is a parent directory of $TMP not traversable? try TMPDIR=/tmp)"
fi
PGDATA=$PGROOT/data    # from here on, cleanup stops postgres if it runs
pick_port
PG_FIRST_PORT=$PICKED

# setup_postgres: initdb, configure, start, create database "adksession"; writes the port to $PGROOT/port.
# Runs in a background subshell: die only ends the subshell; the main script checks its exit status.
setup_postgres() {
  local attempt port=$PG_FIRST_PORT
  if ! (cd "$PGROOT" && "${PG_RUNAS[@]}" "$PG_BIN/initdb" -D "$PGDATA" -A trust -U "$PG_USER" -E UTF8 \
    --locale=C --no-sync) >"$TMP/initdb.log" 2>&1; then
    show_log "$TMP/initdb.log"
    die "initdb failed for $PGDATA"
  fi
  for attempt in 1 2 3 4 5; do
    if ((attempt > 1)); then pick_port; port=$PICKED; fi
    cat >>"$PGDATA/postgresql.conf" <<CONF

# adksession integration/testenv.sh (attempt $attempt)
listen_addresses = '127.0.0.1'
port = $port
unix_socket_directories = '$PGROOT/sock'
fsync = off
synchronous_commit = off
full_page_writes = off
max_connections = 200
CONF
    if (cd "$PGROOT" && "${PG_RUNAS[@]}" "$PG_BIN/pg_ctl" -D "$PGDATA" -l "$PGLOG" start -w \
      -t "$START_DEADLINE") >"$TMP/pg_ctl-start.log" 2>&1; then
      if ! "$PG_BIN/createdb" -h 127.0.0.1 -p "$port" -U "$PG_USER" adksession >"$TMP/createdb.log" 2>&1; then
        cat "$TMP/createdb.log" >&2
        show_log "$PGLOG"
        die "createdb adksession failed"
      fi
      echo "$port" >"$PGROOT/port"
      return 0
    fi
    if grep -qiE 'could not bind|address already in use' "$PGLOG" 2>/dev/null; then
      log "postgres: port $port was taken, retrying on another port"
      : >"$PGLOG"
      continue
    fi
    cat "$TMP/pg_ctl-start.log" >&2
    show_log "$PGLOG"
    die "postgres did not start within ${START_DEADLINE}s"
  done
  die "postgres: could not find a free port after 5 attempts"
}
setup_postgres </dev/null &
PG_SETUP_PID=$!

# ---------------------------------------------------------------------------------------------------------------
# Redis
# ---------------------------------------------------------------------------------------------------------------
# Node 0 is the standalone server, nodes 1..6 form the cluster. All are launched at once, then awaited.
R_PORT=()
R_PID=()
launch_redis() { # INDEX: start node INDEX on a fresh free port
  local i=$1 port dir logf cluster_args=()
  if ((i == 0)); then pick_port; else pick_port bus; fi
  port=$PICKED
  dir=$TMP/redis-$port
  logf=$TMP/redis-$port.log
  mkdir -p "$dir"
  if ((i > 0)); then
    cluster_args=(--cluster-enabled yes --cluster-config-file "$TMP/nodes-$port.conf" --cluster-node-timeout 2000
      --repl-diskless-sync-delay 0)
  fi
  # The shared servers refuse FLUSHALL and FLUSHDB: a test that wipes a Redis wipes every other test's data
  # with it (one did: another test's acknowledged appends vanished before their flush). Such a test starts
  # its own server (testenv.StartRedis).
  "$REDIS_SERVER" --bind 127.0.0.1 --port "$port" --save "" --appendonly no --daemonize no --dir "$dir" \
    --logfile "$logf" --pidfile "$TMP/redis-$port.pid" --enable-debug-command yes \
    --rename-command FLUSHALL "" --rename-command FLUSHDB "" "${cluster_args[@]}" \
    </dev/null >>"$logf" 2>&1 &
  R_PORT[i]=$port
  R_PID[i]=$!
  REDIS_PIDS+=("$!")
  disown "$!"   # no "Killed" job messages at cleanup
}
redis_name() { if (($1 == 0)); then echo "redis standalone"; else echo "redis cluster node $1"; fi; }

for i in 0 1 2 3 4 5 6; do launch_redis "$i"; done
declare -A R_READY=() R_ATTEMPTS=()
deadline=$((SECONDS + START_DEADLINE))
while :; do
  for i in 0 1 2 3 4 5 6; do
    [[ -n ${R_READY[$i]:-} ]] && continue
    port=${R_PORT[i]}
    pid=${R_PID[i]}
    logf=$TMP/redis-$port.log
    if ! kill -0 "$pid" 2>/dev/null; then
      if grep -qiE 'address already in use|could not create server tcp listening socket' "$logf" &&
        ((${R_ATTEMPTS[$i]:-1} < 5)); then
        log "$(redis_name "$i"): port $port was taken, retrying on another port"
        R_ATTEMPTS[$i]=$((${R_ATTEMPTS[$i]:-1} + 1))
        launch_redis "$i"
        continue
      fi
      show_log "$logf"
      die "$(redis_name "$i"): redis-server on 127.0.0.1:$port exited during startup"
    fi
    # ready when *our* process answers (not some other server that grabbed the port)
    if "$REDIS_CLI" -h 127.0.0.1 -p "$port" info server 2>/dev/null | grep -q "^process_id:$pid"; then
      R_READY[$i]=1
      log "$(redis_name "$i"): redis-server at 127.0.0.1:$port (pid $pid, log $logf)"
    fi
  done
  ((${#R_READY[@]} == 7)) && break
  if ((SECONDS >= deadline)); then
    for i in 0 1 2 3 4 5 6; do
      [[ -z ${R_READY[$i]:-} ]] && show_log "$TMP/redis-${R_PORT[i]}.log"
    done
    die "redis-server did not answer within ${START_DEADLINE}s"
  fi
  sleep 0.05
done
REDIS_STANDALONE_PORT=${R_PORT[0]}
CLUSTER_PORTS=("${R_PORT[@]:1}")

cluster_addrs=()
for p in "${CLUSTER_PORTS[@]}"; do cluster_addrs+=("127.0.0.1:$p"); done
log "creating the cluster (3 masters + 3 replicas) [$(since)]"
if ! "$REDIS_CLI" --cluster create "${cluster_addrs[@]}" --cluster-replicas 1 --cluster-yes \
  </dev/null >"$TMP/cluster-create.log" 2>&1; then
  show_log "$TMP/cluster-create.log"
  die "redis-cli --cluster create failed"
fi

# Wait until every node sees a healthy cluster and every replica is attached to its master.
cluster_ready() {
  local p info repl masters=0 replicas=0
  for p in "${CLUSTER_PORTS[@]}"; do
    info=$("$REDIS_CLI" -h 127.0.0.1 -p "$p" cluster info 2>/dev/null | tr -d '\r') || return 1
    [[ $info == *"cluster_state:ok"* && $info == *"cluster_slots_ok:16384"* &&
      $info == *"cluster_known_nodes:6"* && $info == *"cluster_size:3"* ]] || return 1
    repl=$("$REDIS_CLI" -h 127.0.0.1 -p "$p" info replication 2>/dev/null | tr -d '\r') || return 1
    if [[ $repl == *"role:master"* ]]; then
      [[ $repl == *"connected_slaves:1"* ]] || return 1
      masters=$((masters + 1))
    else
      [[ $repl == *"master_link_status:up"* && $repl == *"master_sync_in_progress:0"* ]] || return 1
      replicas=$((replicas + 1))
    fi
  done
  ((masters == 3 && replicas == 3))
}
deadline=$((SECONDS + START_DEADLINE))
until cluster_ready; do
  if ((SECONDS >= deadline)); then
    show_log "$TMP/cluster-create.log"
    for p in "${CLUSTER_PORTS[@]}"; do
      log "node $p:"
      "$REDIS_CLI" -h 127.0.0.1 -p "$p" cluster info 2>&1 | head -n 8 >&2 || true
      show_log "$TMP/redis-$p.log"
    done
    die "the Redis Cluster did not become healthy within ${START_DEADLINE}s"
  fi
  sleep 0.1
done
CLUSTER_URL="redis+cluster://$(IFS=,; echo "${cluster_addrs[*]}")"
log "redis cluster ready: ${cluster_addrs[*]} (3 masters + 3 replicas) [$(since)]"

# ---------------------------------------------------------------------------------------------------------------
# Wait for PostgreSQL
# ---------------------------------------------------------------------------------------------------------------
pg_rc=0
wait "$PG_SETUP_PID" || pg_rc=$?
PG_SETUP_PID=""
((pg_rc == 0)) || die "PostgreSQL setup failed (see above)"
PG_PORT=$(cat "$PGROOT/port")
PG_CTL_PREFIX="${PG_RUNAS[*]}${PG_RUNAS:+ }$PG_BIN/pg_ctl -D $PGDATA -l $PGLOG"
log "postgres 15 at 127.0.0.1:$PG_PORT (user $PG_USER, data $PGDATA, log $PGLOG) [$(since)]"

# ---------------------------------------------------------------------------------------------------------------
# Run the command
# ---------------------------------------------------------------------------------------------------------------
export ADKSESSION_TEST_REDIS_URL="redis://127.0.0.1:$REDIS_STANDALONE_PORT/0"
export ADKSESSION_TEST_REDIS_CLUSTER_URL="$CLUSTER_URL"
export ADKSESSION_TEST_DATABASE_URL="postgres://$PG_USER@127.0.0.1:$PG_PORT/adksession?sslmode=disable"
export ADKSESSION_TEST_PG_CTL="$PG_CTL_PREFIX"
export ADKSESSION_TEST_PGDATA="$PGDATA"
export ADKSESSION_TEST_PG_BIN="$PG_BIN"
export ADKSESSION_TEST_PG_USER="$PG_USER"
export ADKSESSION_TEST_PG_RUNAS="${PG_RUNAS[*]}"
export ADKSESSION_TEST_REDIS_SERVER="$REDIS_SERVER"
export ADKSESSION_TEST_REDIS_CLI="$REDIS_CLI"
export ADKSESSION_TEST_REDIS_BENCHMARK="$REDIS_BENCHMARK"
export ADKSESSION_TEST_TMPDIR="$TMP"
export ADKSESSION_TEST_REQUIRE=1
if [[ -n ${ADKSESSION_TEST_CHROMIUM:-} ]]; then
  export ADKSESSION_TEST_CHROMIUM            # the caller's choice
elif [[ -x /usr/bin/chromium ]]; then
  export ADKSESSION_TEST_CHROMIUM=/usr/bin/chromium
fi

log "servers up in $(($(now_ms) - T0)) ms; running: $*"
# The command runs in its own session / process group so that on Ctrl-C or SIGTERM the whole tree (go test and
# its test binaries, and whatever servers the tests started) can be stopped before the servers go away.
# Explicit <&0 keeps stdin (bash would otherwise give a background command /dev/null).
if command -v setsid >/dev/null 2>&1; then
  setsid "$@" <&0 &
  CHILD_PID=$!
  CHILD_PGID=$CHILD_PID
else
  "$@" <&0 &
  CHILD_PID=$!
fi
rc=0
wait "$CHILD_PID" || rc=$?
log "command exited with status $rc"
exit "$rc"
