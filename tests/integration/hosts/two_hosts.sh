#!/usr/bin/env bash
# two_hosts.sh [OPTIONS] CASE...: the two-host test bed on one machine
# (docs/launching.md, "Two hosts on one machine").
#
# Makes two "hosts": network namespaces joined by a veth pair (10.213.X.1/24
# and 10.213.X.2/24), each with its own hostname (UTS namespace) and its own
# /dev/shm (a mount namespace with a private tmpfs there), and runs 4-rank
# jobs on them, ranks 0 and 1 on host 0, ranks 2 and 3 on host 1, over
# libfabric tcp. Ranks get the environment courier-run would give them
# (COURIER_RANK, COURIER_WORLD_SIZE, COURIER_LOCAL_RANK, COURIER_LOCAL_SIZE,
# COURIER_BOOTSTRAP=<host 0>:PORT, COURIER_JOB_TOKEN); their output is
# shown prefixed "[RANK] ". After every job neither host's /dev/shm may hold
# a courier-* file. Everything is removed again on exit, failed or not.
#
# Cases (several may be given; "all" runs them all on the same two hosts):
#   write-demo         write_demo: every byte rank 0 wrote arrives on ranks 1-3
#   atomic-faults      courier-bench atomic --check under COURIER_FAULTS=reorder=0.3,dup=0.01
#   barrier            courier-bench barrier --check; every rank logs 2 hosts of 2 ranks
#   ep                 ep_check with COURIER_EP_TRANSPORT=proxy
#   ep-auto            ep_check with COURIER_EP_TRANSPORT=auto: the proxy path is chosen
#   ep-direct-refused  COURIER_EP_TRANSPORT=direct: every rank fails saying why
#   partition          partition_check with COURIER_TIMEOUT_S=5; the veth goes down
#                      mid-traffic; every rank must exit non-zero within 10 s, with
#                      an error naming a rank of the other host
#   partition-ep       the same with EP dispatch and combine as the traffic
#
# Options: --build DIR (programs and plugins of that build tree, default
# build), or each one: --write-demo, --bench, --ep-check, --partition-check
# PATH and --plugins DIR. --keep-going: run every case even after one failed.
#
# Needs root (network and mount namespaces, a veth pair), ip (iproute2),
# unshare and nsenter (util-linux) and timeout; without them it says why and
# exits 77, which ctest counts as skipped (SKIP_RETURN_CODE). Exit status: 0
# when every case passed, 1 when one failed, 2 for a bad command line.
set -u

readonly SKIP=77
build=build
write_demo='' bench='' ep_check='' partition_check='' plugins=''
keep_going=0
cases=()
while [ $# -gt 0 ]; do
  case $1 in
    --build) build=$2; shift 2 ;;
    --write-demo) write_demo=$2; shift 2 ;;
    --bench) bench=$2; shift 2 ;;
    --ep-check) ep_check=$2; shift 2 ;;
    --partition-check) partition_check=$2; shift 2 ;;
    --plugins) plugins=$2; shift 2 ;;
    --keep-going) keep_going=1; shift ;;
    -h | --help) sed -n '2,/^set -u/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    -*) echo "two_hosts.sh: unknown option '$1'" >&2; exit 2 ;;
    *) cases+=("$1"); shift ;;
  esac
done
all_cases=(write-demo atomic-faults barrier ep ep-auto ep-direct-refused partition partition-ep)
if [ ${#cases[@]} -eq 0 ]; then
  echo "two_hosts.sh: name a case (or all): ${all_cases[*]}" >&2
  exit 2
fi
[ "${cases[*]}" != all ] || cases=("${all_cases[@]}")
for c in "${cases[@]}"; do
  case " ${all_cases[*]} " in
    *" $c "*) ;;
    *) echo "two_hosts.sh: unknown case '$c' (cases: ${all_cases[*]})" >&2; exit 2 ;;
  esac
done
: "${write_demo:=$build/bin/write_demo}" "${bench:=$build/bin/courier-bench}"
: "${ep_check:=$build/tests/ep_check}" "${partition_check:=$build/tests/partition_check}"
: "${plugins:=$build/lib/courier}"
# Absolute: a rank starts in its host's mount namespace.
write_demo=$(realpath -m "$write_demo") bench=$(realpath -m "$bench")
ep_check=$(realpath -m "$ep_check") partition_check=$(realpath -m "$partition_check")
plugins=$(realpath -m "$plugins")

skip() {
  echo "SKIP (two-hosts): $*"
  exit $SKIP
}

# --- what the machine must offer; none of this is Courier's fault -----------
[ "$(id -u)" -eq 0 ] || skip "needs root for network and mount namespaces (running as uid $(id -u))"
for tool in ip unshare nsenter timeout tail pgrep; do
  command -v "$tool" >/dev/null 2>&1 ||
    skip "'$tool' is not installed (iproute2, util-linux, coreutils, procps)"
done
for program in "$write_demo" "$bench" "$ep_check" "$partition_check"; do
  [ -x "$program" ] || { echo "FAIL (two-hosts): $program is not built" >&2; exit 1; }
done

# --- names unique to this run --------------------------------------------------
run=$$$(printf %02x $((RANDOM % 256)))  # this script's process id, and a tag
ns=("courier-hosts-$run-0" "courier-hosts-$run-1")
veth=("cvh${run}a" "cvh${run}b")  # at most 15 characters
subnet=10.213.$(($$ % 254 + 1))
addr=("$subnet.1" "$subnet.2")
hostnames=("courier-host0-$run" "courier-host1-$run")
holder=("" "")  # per host: the process that keeps its mount and UTS namespaces
work=$(mktemp -d "${TMPDIR:-/tmp}/courier-two-hosts.XXXXXX")
rank_pids=()

# stop_rank SIGNAL R: signals rank R's timeout process group (timeout makes
# one for itself and the program it runs).
stop_rank() {
  local t
  [ -n "${rank_pids[$2]:-}" ] || return 0
  for t in $(pgrep -P "${rank_pids[$2]}"); do kill "-$1" -- "-$t" 2>/dev/null; done
}

cleanup() {
  local pid r
  for r in "${!rank_pids[@]}"; do stop_rank KILL "$r"; done
  for pid in "${holder[@]}"; do
    if [ -n "$pid" ]; then
      kill "$pid" 2>/dev/null
      wait "$pid" 2>/dev/null
    fi
  done
  ip netns del "${ns[0]}" 2>/dev/null
  ip netns del "${ns[1]}" 2>/dev/null
  ip link del "${veth[0]}" 2>/dev/null  # still here if it never moved into a namespace
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

in_host() {  # in_host H COMMAND...: runs COMMAND on host H
  local h=$1
  shift
  nsenter --target "${holder[$h]}" --net --mount --uts --wd="$PWD" -- "$@"
}

# wait_for SECONDS WHAT COMMAND...: polls COMMAND every 0.1 s until it succeeds.
wait_for() {
  local limit=$1 what=$2 deadline
  shift 2
  deadline=$(($(date +%s) + limit))
  until "$@"; do
    if [ "$(date +%s)" -ge "$deadline" ]; then
      echo "two_hosts.sh: gave up after $limit s waiting for $what" >&2
      return 1
    fi
    sleep 0.1
  done
}

link_up() { in_host "$1" cat "/sys/class/net/${veth[$1]}/operstate" 2>/dev/null | grep -qx up; }

# Network namespaces of earlier runs that were killed before they could
# remove them (their holders went with them): the process id in the name is
# gone.
remove_leftovers() {
  local name pid
  for name in $(ip netns list 2>/dev/null | grep -oE '^courier-hosts-[0-9a-f]+-[01]'); do
    pid=${name#courier-hosts-}
    pid=${pid%??-?}
    if ! kill -0 "$pid" 2>/dev/null; then
      echo "removing network namespace $name, left by process $pid"
      ip netns del "$name"
    fi
  done
}

make_hosts() {
  local h out line
  remove_leftovers
  out=$(ip netns add "${ns[0]}" 2>&1) || skip "cannot make a network namespace: $out"
  ip netns add "${ns[1]}" || skip "cannot make a second network namespace"
  out=$(ip link add "${veth[0]}" type veth peer name "${veth[1]}" 2>&1) ||
    skip "cannot make a veth pair (no veth support?): $out"
  for h in 0 1; do
    ip link set "${veth[$h]}" netns "${ns[$h]}" || skip "cannot move ${veth[$h]} into ${ns[$h]}"
    if ! { ip -n "${ns[$h]}" addr add "${addr[$h]}/24" dev "${veth[$h]}" &&
      ip -n "${ns[$h]}" link set lo up && ip -n "${ns[$h]}" link set "${veth[$h]}" up; }; then
      skip "cannot configure ${veth[$h]} in ${ns[$h]}"
    fi
    # The holder mounts a private tmpfs on /dev/shm, names its host, says
    # "ready PID" and waits until this script is gone (even if killed);
    # nsenter joins its namespaces. Its first line tells whether that
    # worked (an error message otherwise).
    # shellcheck disable=SC2016 # $1, $2 and $$ are the inner shell's
    exec {fd}< <(exec ip netns exec "${ns[$h]}" unshare --mount --uts --propagation private \
      sh -c 'mount -t tmpfs -o mode=1777,size=2g courier-shm /dev/shm && hostname "$1" &&
             echo "ready $$" && exec tail --pid="$2" -f /dev/null >/dev/null 2>&1' \
      sh "${hostnames[$h]}" $$ 2>&1)
    line=
    read -r -t 60 -u "$fd" line
    exec {fd}<&-
    case $line in
      "ready "*) holder[h]=${line#ready } ;;
      *) skip "cannot give host $h its own mount and UTS namespaces: ${line:-no answer}" ;;
    esac
    [ "$(in_host "$h" hostname)" = "${hostnames[$h]}" ] || skip "host $h did not get its hostname"
  done
  # Each /dev/shm is its own: a file made in host 0's is in neither other.
  local probe=/dev/shm/courier-test-bed-probe
  in_host 0 touch "$probe"
  if in_host 1 test -e "$probe" || [ -e "$probe" ]; then
    echo "FAIL (two-hosts): host 0's /dev/shm is not private" >&2
    exit 1
  fi
  in_host 0 rm -f "$probe"
  for h in 0 1; do
    wait_for 30 "the veth pair to come up" link_up $h || skip "the veth pair did not come up"
  done
  echo "two hosts: ${hostnames[0]} (${addr[0]}, ${veth[0]}, pid ${holder[0]}) and" \
    "${hostnames[1]} (${addr[1]}, ${veth[1]}, pid ${holder[1]})"
}

# --- jobs --------------------------------------------------------------------
job=0        # jobs started so far: each gets its own port and directory
dir=         # the current job's directory: r<R>.out, r<R>.err, r<R>.status
job_env=()   # extra NAME=VALUE for the current job's ranks
failures=0

# start_job TIMEOUT_S PROGRAM ARGS...: starts ranks 0-3 (rank r on host r / 2)
# in the background; each rank's status file gets "STATUS EPOCH_MS" when it ends.
start_job() {
  local limit=$1 r h token port
  shift
  job=$((job + 1))
  dir=$work/job$job
  mkdir -p "$dir"
  port=$((29500 + job))
  token=$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n')
  rank_pids=()
  echo "job $job: $* (ranks 0,1 on host 0, ranks 2,3 on host 1; ${job_env[*]:-})"
  for r in 0 1 2 3; do
    h=$((r / 2))
    (
      in_host "$h" env -u COURIER_RANKS_PER_HOST -u COURIER_FAULTS -u COURIER_EP_TRANSPORT \
        -u COURIER_TIMEOUT_S COURIER_RANK=$r COURIER_WORLD_SIZE=4 \
        COURIER_LOCAL_RANK=$((r % 2)) COURIER_LOCAL_SIZE=2 \
        COURIER_BOOTSTRAP="${addr[0]}:$port" COURIER_JOB_TOKEN="$token" \
        COURIER_BACKEND_PATH="$plugins" COURIER_NIC_BACKEND=ofi COURIER_GPU_BACKEND=host \
        COURIER_OFI_PROVIDER=tcp COURIER_LOG_LEVEL=info "${job_env[@]}" \
        timeout -k 10 "$limit" "$@" >"$dir/r$r.out" 2>"$dir/r$r.err" </dev/null
      echo "$? $(date +%s%3N)" >"$dir/r$r.status"
    ) &
    rank_pids[r]=$!
  done
}

finish_job() {  # waits for the ranks, shows their output, checks both /dev/shm
  local r h left
  wait "${rank_pids[@]}"
  rank_pids=()
  for r in 0 1 2 3; do
    sed "s/^/[$r] /" "$dir/r$r.out" "$dir/r$r.err"
  done
  for r in 0 1 2 3; do echo "rank $r: exit status $(status_of $r)"; done
  for h in 0 1; do
    left=$(in_host "$h" sh -c 'ls -d /dev/shm/courier-* 2>/dev/null')
    [ -z "$left" ] || check_failed "host $h's /dev/shm holds files after the job: ${left//$'\n'/ }"
    in_host "$h" sh -c 'rm -f /dev/shm/courier-*'
  done
}

status_of() { cut -d' ' -f1 "$dir/r$1.status" 2>/dev/null || echo none; }
ended_at() { cut -d' ' -f2 "$dir/r$1.status"; }

check_failed() {
  echo "FAIL (two-hosts $case): $*"
  failures=$((failures + 1))
}

all_exit_zero() {
  local r
  for r in 0 1 2 3; do
    [ "$(status_of $r)" = 0 ] || check_failed "rank $r exited with status $(status_of $r)"
  done
}

# rank_says R REGEX: some line rank R wrote (stdout or stderr) matches REGEX.
rank_says() { cat "$dir/r$1.out" "$dir/r$1.err" | grep -Eq -- "$2"; }

every_rank_says() {  # every_rank_says REGEX WHAT
  local r
  for r in 0 1 2 3; do rank_says $r "$1" || check_failed "rank $r did not say $2 (/$1/)"; done
}

# Every rank reached its peers on the other host through tcp over its own
# veth: libfabric's domain is the interface the endpoint lives on.
over_tcp_and_veth() {
  local r
  for r in 0 1 2 3; do
    rank_says $r "ofi: provider tcp;ofi_rxm \\(domain ${veth[$((r / 2))]}\\)" ||
      check_failed "rank $r did not use libfabric tcp on ${veth[$((r / 2))]}"
  done
}

case_write_demo() {
  job_env=(COURIER_PROXY_THREADS=1 COURIER_CHANNELS=2)
  start_job 300 "$write_demo" --provider tcp --commands 20000
  finish_job
  all_exit_zero
  over_tcp_and_veth
  rank_says 0 "^rank 0: 20000 WRITE commands .*; 0 failed" || check_failed "rank 0's writes failed"
  for r in 1 2 3; do
    rank_says $r "^rank $r: verified .*: 0 mismatches; ([0-9]+) of \\1 immediate-data \
notifications arrived, 0 failed" ||
      check_failed "rank $r did not verify every byte and notification"
  done
}

case_atomic_faults() {
  job_env=(COURIER_PROXY_THREADS=1 "COURIER_FAULTS=reorder=0.3,dup=0.01")
  start_job 400 "$bench" atomic --check --provider tcp --ops 100000
  finish_job
  all_exit_zero
  over_tcp_and_veth
  rank_says 0 "^violations: 0\$" || check_failed "write-then-atomic was violated (or not checked)"
  every_rank_says "faults: COURIER_FAULTS=reorder=0.3,dup=0.01" "that it injects faults"
}

case_barrier() {
  job_env=(COURIER_PROXY_THREADS=1 COURIER_CHANNELS=2)
  start_job 300 "$bench" barrier --check --iters 300 --provider tcp
  finish_job
  all_exit_zero
  over_tcp_and_veth
  rank_says 0 "^violations: 0\$" ||
    check_failed "a rank left a barrier before the last one entered it"
  # The node-local phase ran within each host, the leaders' phase across.
  local r h
  for r in 0 1 2 3; do
    h=$((r / 2))
    rank_says $r "hosts: 2 \\(by hostname and boot id\\); this host '${hostnames[$h]}' has \
ranks $((2 * h)),$((2 * h + 1)) \\(local index $((r % 2)) of 2, host leader $((2 * h))\\); \
host leaders 0,2" ||
      check_failed "rank $r did not see 2 hosts of 2 ranks, itself on ${hostnames[$h]}"
  done
}

case_ep() {  # ep_check over the proxy path, forced (ep) or chosen (ep-auto)
  job_env=(COURIER_PROXY_THREADS=1 COURIER_CHANNELS=4 "COURIER_EP_TRANSPORT=$1")
  start_job 500 "$ep_check"
  finish_job
  all_exit_zero
  over_tcp_and_veth
  every_rank_says "^ep: [0-9]+ passed, 0 failed \\(transport proxy\\)\$" \
    "that every EP case passed over the proxy path"
}

case_ep_direct_refused() {
  job_env=(COURIER_PROXY_THREADS=1 COURIER_CHANNELS=2 COURIER_EP_TRANSPORT=direct)
  start_job 120 "$ep_check"
  finish_job
  local r
  for r in 0 1 2 3; do
    case $(status_of $r) in
      0 | 124 | 137 | none)
        check_failed "rank $r exited with status $(status_of $r), not with an error" ;;
    esac
  done
  every_rank_says "^ep_check: COURIER_EP_TRANSPORT=direct cannot be honoured: " \
    "why the direct path cannot be used"
}

# The partition: the veth goes down while every rank writes to every other;
# each rank must give up on its own within COURIER_TIMEOUT_S + 5 s, naming a
# rank of the other host.
# TRAFFIC: writes (FIFO WRITEs and DRAINs) or ep (EP low-latency dispatch and
# combine over the proxy path).
case_partition() {
  local traffic=$1 timeout_s=5 bound_ms base down r h status elapsed names other
  bound_ms=$(((timeout_s + 5) * 1000))
  job_env=(COURIER_PROXY_THREADS=1 COURIER_CHANNELS=2 "COURIER_TIMEOUT_S=$timeout_s")
  [ "$traffic" = writes ] || job_env=(COURIER_PROXY_THREADS=1 COURIER_CHANNELS=4
    "COURIER_TIMEOUT_S=$timeout_s" COURIER_EP_TRANSPORT=proxy)
  start_job 600 "$partition_check" --traffic "$traffic" --give-up-s 300
  traffic_started() {
    local r
    for r in 0 1 2 3; do
      grep -q "^partition_check: rank $r traffic started" "$dir/r$r.out" 2>/dev/null || return 1
    done
  }
  tx_bytes() { in_host 0 cat "/sys/class/net/${veth[0]}/statistics/tx_bytes"; }
  enough_traffic() { [ $(($(tx_bytes) - base)) -ge 8388608 ]; }
  if wait_for 240 "every rank to start its traffic" traffic_started; then
    base=$(tx_bytes)
    wait_for 120 "8 MiB to cross the veth pair" enough_traffic ||
      check_failed "the traffic did not cross the veth pair"
  else
    check_failed "the traffic did not start"
  fi
  in_host 0 ip link set "${veth[0]}" down
  down=$(date +%s%3N)
  echo "partition: ${veth[0]} down at $down," \
    "$(($(tx_bytes) - ${base:-0})) bytes after traffic started"
  all_ended() {
    local r
    for r in 0 1 2 3; do [ -e "$dir/r$r.status" ] || return 1; done
  }
  if ! wait_for $((timeout_s + 35)) "every rank to exit" all_ended; then
    echo "partition: stopping the ranks still running"
    for r in 0 1 2 3; do [ -e "$dir/r$r.status" ] || stop_rank TERM $r; done
  fi
  finish_job
  in_host 0 ip link set "${veth[0]}" up  # for the cases after this one
  wait_for 30 "the veth pair to come up again" link_up 0 ||
    check_failed "the link did not come back"
  for r in 0 1 2 3; do
    h=$((r / 2))
    status=$(status_of $r)
    elapsed=$(($(ended_at $r) - down))
    echo "rank $r (host $h) exited with status $status ${elapsed} ms after the link went down" \
      "(bound ${bound_ms} ms)"
    case $status in
      0 | 3) check_failed "rank $r exited with status $status: its traffic did not fail" ;;
      124 | 137 | 143 | none)
        check_failed "rank $r did not exit by itself (stopped with status $status)" ;;
    esac
    [ "$elapsed" -le "$bound_ms" ] ||
      check_failed "rank $r took ${elapsed} ms, more than ${bound_ms} ms"
    # The ranks its errors name: Courier's error lines (the first line of
    # each, and a hang dump's verdict) and partition_check's report, less
    # the rank's own name in their prefixes.
    names=$(cat "$dir/r$r.out" "$dir/r$r.err" |
      grep -E -e "^courier\\[rank $r\\] error |^  most likely stuck on rank " \
        -e "^partition_check: rank $r: " |
      sed -e "s/^courier\\[rank $r\\] //" -e "s/^partition_check: rank $r: //" |
      grep -oE "ranks? [0-9]+(, [0-9]+)*" | grep -oE "[0-9]+" | sort -un | tr '\n' ' ')
    other=$((1 - h))
    case " $names " in
      *" $((2 * other)) "* | *" $((2 * other + 1)) "*)
        echo "rank $r's errors name ranks ${names:-none}" ;;
      *) check_failed "rank $r's errors name no rank of host $other (they name ${names:-none})" ;;
    esac
  done
}

make_hosts
for case in "${cases[@]}"; do
  echo "=== two-hosts $case"
  before=$failures
  case $case in
    write-demo) case_write_demo ;;
    atomic-faults) case_atomic_faults ;;
    barrier) case_barrier ;;
    ep) case_ep proxy ;;
    ep-auto) case_ep auto ;;
    ep-direct-refused) case_ep_direct_refused ;;
    partition) case_partition writes ;;
    partition-ep) case_partition ep ;;
  esac
  if [ "$failures" -eq "$before" ]; then
    echo "PASS (two-hosts $case)"
  elif [ "$keep_going" -eq 0 ]; then
    break
  fi
done
[ "$failures" -eq 0 ]
