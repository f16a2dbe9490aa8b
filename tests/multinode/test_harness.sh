#!/usr/bin/env bash
# multinode_harness: hosts.sh end to end on 2 simulated hosts x 2 ranks.
#   test_harness.sh HOSTS_SH MN_CHECK [MPIRUN]
# Passes with "skipped: needs root and network namespaces" where namespaces
# cannot be made; anywhere else every failure is "FAIL: ..." and exit 1.
set -euo pipefail
H=$1 CHECK=$2
export MNH_MPIRUN=${3:-mpirun} MNH_NAME=mnht$$ MNH_SLOTS=2 MNH_TIMEOUT=60
unset MNH_SUBNET MNH_CPUS

why=""
if ((EUID != 0)); then
    why="not root"
elif ! command -v ip > /dev/null || ! command -v tc > /dev/null; then
    why="no ip or tc: iproute2 is not installed"
elif ! command -v nsenter > /dev/null || ! unshare --net --uts --mount true 2> /dev/null; then
    why="unshare --net --uts --mount fails here"
fi
if [[ -n $why ]]; then
    echo "skipped: needs root and network namespaces ($why)"
    exit 0
fi

work=$(mktemp -d)
probe=mnh_probe.$$
# (the probe file lands in the machine's /dev/shm only if the harness is broken)
trap '"$H" down > /dev/null 2>&1 || true; rm -rf "$work" "/dev/shm/$probe"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
trap 'echo "FAIL: line $LINENO: $BASH_COMMAND exited $?" >&2' ERR
start=$EPOCHREALTIME
elapsed() { awk -v a="$1" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1f", b - a }'; }
step() { echo "== $(elapsed "$start") s: $*"; }
run_netns_before=no
[[ -d /run/netns ]] && run_netns_before=yes

step "up 2"
"$H" up 2
read -r _ state_kv subnet_kv _ <<< "$("$H" info)"
state=${state_kv#state=} subnet=${subnet_kv#subnet=}
[[ $(ip route show root "$subnet") == unreachable* ]] || fail "no unreachable route for $subnet"
[[ $("$H" exec 0 hostname) == host0 && $("$H" exec 1 hostname) == host1 ]] || fail "hostnames are not host0, host1"
holders="$("$H" pids 0) $("$H" pids 1)"

step "exec 1: a private /dev/shm"
"$H" exec 1 sh -c "echo probe > /dev/shm/$probe"
[[ $("$H" exec 1 ls /dev/shm) == *"$probe"* ]] || fail "exec 1 ls /dev/shm does not show the file made there"
[[ ! -e /dev/shm/$probe ]] || fail "a file in host1's /dev/shm shows in the machine's /dev/shm"
"$H" exec 0 test ! -e "/dev/shm/$probe" || fail "a file in host1's /dev/shm shows in host0's"

step "run -- -np 4 mn_check (2 ranks per host)"
rc=0
out=$(MN_FWD=yes MN_NOFWD=yes "$H" run -- -np 4 -x MN_FWD "$CHECK" --nodes 2 \
    --env MN_FWD=yes --remote-unset MN_NOFWD 2>&1) || rc=$?
((rc == 0)) || { echo "$out"; fail "mn_check exited $rc"; }
echo "$out"
[[ $out == *"mn_check: all checks passed (4 ranks on 2 nodes)"* ]] || fail "mn_check did not pass"
for r in 0 1 2 3; do
    h=host$((r / 2))
    [[ $out == *"rank $r/4 host=$h "* ]] || fail "rank $r is not on $h"
done

step "shape 1gbit: cross-host bandwidth at most the cap, and through host0's eth0"
"$H" shape 1gbit
out=$("$H" run -- -np 4 "$CHECK" --nodes 2 --bw 4 2>&1) || rc=$?
((rc == 0)) || { echo "$out"; fail "mn_check --bw exited $rc"; }
echo "$out" | grep '^bw:' || { echo "$out"; fail "no bandwidth line"; }
mbs=$(echo "$out" | sed -n 's/^bw: .*: \([0-9.]*\) MB\/s$/\1/p')
awk -v m="$mbs" 'BEGIN { exit !(m > 0 && m <= 160) }' || fail "$mbs MB/s across a 1gbit (125 MB/s) link"
sent=$("$H" exec 0 tc -s qdisc show dev eth0 | sed -n 's/^ *Sent \([0-9]*\) bytes.*/\1/p' | head -1)
echo "host0 tbf sent ${sent:-?} bytes"
((${sent:-0} >= 5 * 4 * 1048576)) || fail "host0's shaped eth0 sent ${sent:-0} bytes, less than the ping-pong's 20 MiB"
"$H" shape off
[[ $("$H" exec 1 tc qdisc show dev eth0) != *tbf* ]] || fail "shape off left a tbf qdisc"

step "SIGKILL a rank on host1: mpirun on host0 must end, non-zero, within 30 s"
"$H" run -- -np 4 "$CHECK" --nodes 2 --hold 50 > "$work/hold.log" 2>&1 &
mp=$!
for ((t = 0; t < 200; t++)); do
    grep -q '^hold: all ranks ready' "$work/hold.log" && break
    kill -0 $mp 2> /dev/null || { cat "$work/hold.log"; fail "mpirun ended before the ranks were ready"; }
    sleep 0.1
done
grep -q '^hold: all ranks ready' "$work/hold.log" || { cat "$work/hold.log"; fail "ranks not ready in 20 s"; }
mapfile -t ranks1 < <("$H" pids 1 mn_check)
victim=${ranks1[0]:-}
[[ -n $victim ]] || fail "no mn_check process on host1"
killed=$EPOCHREALTIME
kill -9 "$victim"
for ((t = 0; t < 300; t++)); do kill -0 $mp 2> /dev/null || break; sleep 0.1; done
kill -0 $mp 2> /dev/null && fail "mpirun still running 30 s after a rank was killed"
rc=0
wait $mp || rc=$?
cat "$work/hold.log"
echo "mpirun exited $rc, $(elapsed "$killed") s after the kill"
((rc != 0 && rc != 124)) || fail "mpirun exited $rc after a rank was killed"
for ((t = 0; t < 100; t++)); do
    left="$("$H" pids 0) $("$H" pids 1)"
    [[ $left == "$holders" ]] && break
    sleep 0.1
done
[[ $left == "$holders" ]] || fail "processes left on the hosts 10 s after mpirun ended: $left (holders: $holders)"

step "down"
"$H" down
[[ -z $(ip netns list | grep -E "^$MNH_NAME-") ]] || fail "namespaces left after down: $(ip netns list | grep "^$MNH_NAME-")"
[[ -z $(ip route show root "$subnet") ]] || fail "route for $subnet left after down"
[[ ! -e $state ]] || fail "state directory $state left after down"
# a killed process stays a zombie until its parent (init here) reaps it
alive() { [[ -e /proc/$1 && $(sed -n 's/^State:[[:space:]]*\(.\).*/\1/p' "/proc/$1/status" 2> /dev/null) != Z ]]; }
for p in $holders; do
    for ((t = 0; t < 20; t++)); do alive "$p" || break; sleep 0.1; done
    if alive "$p"; then fail "host process $p left after down"; fi
done
if [[ $run_netns_before == no && -d /run/netns && -z $(ls -A /run/netns) ]]; then
    fail "down left the empty /run/netns that up made"
fi
"$H" down || fail "a second down failed"
echo "multinode_harness: passed in $(elapsed "$start") s"
