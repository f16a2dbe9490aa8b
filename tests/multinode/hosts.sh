#!/usr/bin/env bash
# hosts.sh: a few simulated hosts on this one Linux machine, so that a test can
# run an Open MPI job across "machines" (needs root).
#
#   hosts.sh up N              make hosts host0 .. host(N-1)
#   hosts.sh run -- ARGS...    mpirun ARGS across them, started on host0
#   hosts.sh exec I CMD...     run CMD on host I
#   hosts.sh pids I [NAME]     PIDs of the processes on host I (named NAME)
#   hosts.sh shape RATE|off    cap every host's outgoing link (tbf), or uncap
#   hosts.sh info              name, state directory, subnet, hosts
#   hosts.sh down              remove all of it; safe to repeat
#
# A host is a network namespace (lo, and eth0 = a veth into a bridge that has
# a namespace of its own), a UTS namespace (its hostname) and a mount
# namespace (a tmpfs /dev/shm of its own, an /etc/hosts that lists every
# host). The filesystem is otherwise shared, so paths are the same everywhere.
#
# Settings:
#   MNH_NAME     cluster name: prefix of its namespaces and of its state
#                directory /run/mnh/NAME; default mnh<PID of the calling
#                shell>. Every subcommand of one cluster needs the same.
#   MNH_SUBNET   up: first three octets of the hosts' /24 (host I is .I+1);
#                default: the first free one of 198.18.X / 198.19.X
#   MNH_SLOTS    up: MPI slots per host (default: nproc)
#   MNH_CPUS     up: one CPU list per host, ';' between hosts (e.g. "0;1"):
#                each host gets a cgroup-v1 cpuset, which hwloc then reports
#   MNH_TIMEOUT  run: seconds before mpirun is stopped (default 600; then
#                the status is 124)
#   MNH_MPIRUN   run: the mpirun to start (default: mpirun)
set -euo pipefail

SELF=$(readlink -f "$0")
NAME=${MNH_NAME:-mnh$PPID}
ST=/run/mnh/$NAME
CPUSETS=/sys/fs/cgroup/cpuset

die() { echo "hosts.sh: $*" >&2; exit 2; }
[[ $NAME =~ ^[A-Za-z0-9_.][A-Za-z0-9_.-]{0,39}$ ]] || die "MNH_NAME '$NAME': letters, digits, _ . - only, 40 at most"

# Everything inside a host is started through here (run, exec, the MPI
# launch agent): into the host's cpuset if it has one (nsenter leaves the
# cgroup alone), then into its namespaces, in the current directory.
enter() {
    local i=$1 pid
    shift
    pid=$(cat "$ST/host$i.pid" 2> /dev/null) || die "no host $i in cluster $NAME (is it up?)"
    if [[ -d $CPUSETS/$NAME-h$i ]]; then echo $$ > "$CPUSETS/$NAME-h$i/tasks"; fi
    exec nsenter -t "$pid" -n -u -m --wd="$PWD" -- "$@"
}

# mpirun calls this as it would call ssh: [OPTIONS] HOST COMMAND-LINE. The
# command line gets what an ssh login would give it: /bin/sh, a bare
# environment (so, as on real hosts, only what mpirun forwards arrives), /.
agent() {
    while [[ ${1:-} == -* ]]; do shift; done
    local host=${1:-}
    shift || true
    [[ $host =~ ^host([0-9]+)$ ]] || die "agent: unknown host '$host'"
    cd /
    enter "${BASH_REMATCH[1]}" env -i PATH=/usr/local/bin:/usr/bin:/bin HOME=/root /bin/sh -c "$*"
}

# The first process of host I (runs in its new namespaces and stays, as a
# sleep, to keep the UTS and mount namespaces alive). Arguments: hostname,
# state directory, cpuset directory or "".
HOLDER='set -e
hostname "$1"
mount -t tmpfs -o mode=1777 shm /dev/shm
mount --bind "$2/hosts" /etc/hosts
if [ -n "$3" ]; then
  # ip netns exec mounted a new /sys without cgroups: hwloc needs to find
  # the cpuset, and the launch agent needs to move processes into one
  mount -t tmpfs -o mode=755 cgroup /sys/fs/cgroup
  mkdir /sys/fs/cgroup/cpuset
  mount -t cgroup -o cpuset cpuset /sys/fs/cgroup/cpuset
  echo $$ > "$3/tasks"
fi
echo $$ > "$2/$1.pid.new"
mv "$2/$1.pid.new" "$2/$1.pid"
exec sleep infinity'

host_count() { cat "$ST/n" 2> /dev/null || die "cluster $NAME is not up"; }
namespaces() { ip netns list 2> /dev/null | awk '{print $1}' | grep -E "^$NAME-(sw|h[0-9]+)\$" || true; }

# Claims SUBNET.0/24 with an unreachable route in this (the machine's)
# namespace: nothing here can then send the hosts' addresses to the real
# network, and the route doubles as a lock against another cluster taking
# the same subnet. Refuses a subnet that overlaps any route already here.
claim_subnet() {
    local cidr=$1.0/24
    [[ -z $(ip -4 route show table all root "$cidr") ]] || return 1
    [[ -z $(ip -4 route show table all match "$cidr" | grep -v '^default') ]] || return 1
    ip route add unreachable "$cidr" 2> /dev/null || return 1
    echo "$1" > "$ST/subnet"
}

cmd_up() {
    local n=${1:-} i
    [[ $n =~ ^[0-9]+$ ]] && ((n >= 1 && n <= 250)) || die "up N: N from 1 to 250"
    ((EUID == 0)) || die "up: needs root"
    for i in ip nsenter unshare timeout; do
        command -v $i > /dev/null || die "up: needs $i (iproute2, util-linux, coreutils)"
    done
    mkdir -p /run/mnh
    mkdir -m 700 "$ST" 2> /dev/null || die "cluster $NAME is up already (or left over: run down)"
    [[ -z $(namespaces) ]] || { rmdir "$ST"; die "namespaces $NAME-* are left over: run down"; }
    trap 'if (($? != 0)); then echo "hosts.sh: up failed, removing what it made" >&2; cmd_down > /dev/null 2>&1; fi' EXIT
    [[ -d /run/netns ]] || touch "$ST/made-run-netns"
    echo "$n" > "$ST/n"

    if [[ -n ${MNH_SUBNET:-} ]]; then
        [[ $MNH_SUBNET =~ ^[0-9]{1,3}\.[0-9]{1,3}\.[0-9]{1,3}$ ]] || die "MNH_SUBNET: three octets, e.g. 10.213.7"
        claim_subnet "$MNH_SUBNET" || die "subnet $MNH_SUBNET.0/24 is in use here (a route overlaps it)"
    else
        local h=$(($(cksum <<< "$NAME" | cut -d' ' -f1) % 512)) k s
        for ((k = 0; k < 512; k++)); do
            s=$(((h + k) % 512))
            claim_subnet "198.$((18 + s / 256)).$((s % 256))" && break
        done
        [[ -s $ST/subnet ]] || die "no free subnet in 198.18.0.0/15: set MNH_SUBNET"
    fi
    local net
    net=$(cat "$ST/subnet")

    local cpus=()
    if [[ -n ${MNH_CPUS:-} ]]; then
        IFS=';' read -r -a cpus <<< "$MNH_CPUS"
        ((${#cpus[@]} == n)) || die "MNH_CPUS has ${#cpus[@]} CPU lists for $n hosts"
        [[ -f $CPUSETS/tasks ]] || die "MNH_CPUS needs the cgroup-v1 cpuset hierarchy at $CPUSETS"
        for ((i = 0; i < n; i++)); do
            mkdir "$CPUSETS/$NAME-h$i"
            cat "$CPUSETS/cpuset.mems" > "$CPUSETS/$NAME-h$i/cpuset.mems"
            echo "${cpus[i]}" > "$CPUSETS/$NAME-h$i/cpuset.cpus" || die "MNH_CPUS: bad CPU list '${cpus[i]}'"
        done
    fi

    {
        printf '127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n'
        for ((i = 0; i < n; i++)); do printf '%s\thost%d\n' "$net.$((i + 1))" $i; done
    } > "$ST/hosts"
    for ((i = 0; i < n; i++)); do echo "host$i slots=${MNH_SLOTS:-$(nproc)}"; done > "$ST/hostfile"
    mkdir "$ST/tmp"

    ip netns add "$NAME-sw"
    ip -n "$NAME-sw" link add br0 type bridge
    ip -n "$NAME-sw" link set br0 up
    for ((i = 0; i < n; i++)); do
        local ns=$NAME-h$i cg=""
        ip netns add "$ns"
        # both ends are made directly in their namespaces: no name clash
        # with anything in the machine's namespace
        ip link add eth0 netns "$ns" type veth peer name "h$i" netns "$NAME-sw"
        ip -n "$NAME-sw" link set "h$i" master br0 up
        # a host without loopback is no real host (hwloc's X11 probe was
        # seen to hang connecting to 127.0.0.1 without it)
        ip -n "$ns" link set lo up
        ip -n "$ns" addr add "$net.$((i + 1))/24" dev eth0
        ip -n "$ns" link set eth0 up
        ((${#cpus[@]})) && cg=$CPUSETS/$NAME-h$i
        setsid ip netns exec "$ns" unshare --uts --mount --propagation private \
            /bin/sh -c "$HOLDER" holder "host$i" "$ST" "$cg" < /dev/null > "$ST/host$i.log" 2>&1 &
    done
    for ((i = 0; i < n; i++)); do
        local t
        for ((t = 0; t < 100; t++)); do [[ -s $ST/host$i.pid ]] && break; sleep 0.05; done
        [[ -s $ST/host$i.pid ]] || { cat "$ST/host$i.log" >&2; die "host$i did not start"; }
    done
    trap - EXIT
    echo "up: $n hosts host0..host$((n - 1)) on $net.0/24, cluster $NAME (MNH_NAME=$NAME)"
}

cmd_run() {
    [[ ${1:-} == -- ]] && shift
    local net
    host_count > /dev/null
    net=$(cat "$ST/subnet").0/24
    # root needs the two ALLOW variables; binding defaults to none, as every
    # host's hwloc sees all the machine's cores (each host would bind its
    # first rank to core 0); an explicit --bind-to still wins
    enter 0 env OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
        OMPI_MCA_hwloc_base_binding_policy="${OMPI_MCA_hwloc_base_binding_policy:-none}" \
        timeout --foreground -k 10 "${MNH_TIMEOUT:-600}" "${MNH_MPIRUN:-mpirun}" \
        --hostfile "$ST/hostfile" --mca plm_rsh_agent "$SELF _agent $NAME" \
        --mca oob_tcp_if_include "$net" --mca btl_tcp_if_include "$net" \
        --mca orte_tmpdir_base "$ST/tmp" "$@"
}

cmd_exec() {
    local i=${1:-}
    [[ $i =~ ^[0-9]+$ ]] || die "exec I CMD..."
    shift
    [[ ${1:-} == -- ]] && shift
    (($#)) || die "exec I CMD..."
    enter "$i" "$@"
}

cmd_pids() {
    [[ ${1:-} =~ ^[0-9]+$ ]] || die "pids I [NAME]"
    local p
    [[ -n $(namespaces | grep -x "$NAME-h$1") ]] || die "no host $1 in cluster $NAME"
    for p in $(ip netns pids "$NAME-h$1"); do
        if [[ -z ${2:-} ]] || [[ $(cat "/proc/$p/comm" 2> /dev/null) == "$2" ]]; then echo "$p"; fi
    done
}

cmd_shape() {
    local rate=${1:-} n i
    [[ -n $rate ]] || die "shape RATE | shape off"
    n=$(host_count)
    for ((i = 0; i < n; i++)); do
        if [[ $rate == off ]]; then
            tc -n "$NAME-h$i" qdisc del dev eth0 root 2> /dev/null || true
        else
            # burst: at least one GSO packet; latency: bounds the queue
            tc -n "$NAME-h$i" qdisc replace dev eth0 root tbf rate "$rate" burst 256kb latency 100ms
        fi
    done
}

cmd_info() {
    local n
    n=$(host_count)
    echo "name=$NAME state=$ST subnet=$(cat "$ST/subnet").0/24 hosts=$n"
}

cmd_down() {
    local nss pids t p
    nss=$(namespaces)
    # every process on a host (the holder, orted, ranks, a killed mpirun's
    # orphans, a shell from exec) is in the host's network namespace
    for ((t = 0; t < 100; t++)); do
        pids=""
        for p in $nss; do pids+=" $(ip netns pids "$p" 2> /dev/null || true)"; done
        [[ -z ${pids// /} ]] && break
        # shellcheck disable=SC2086 # a list of PIDs
        kill -9 $pids 2> /dev/null || true
        sleep 0.05
    done
    [[ -z ${pids// /} ]] || echo "hosts.sh: down: processes$pids do not die" >&2
    for p in $nss; do ip netns delete "$p" || true; done
    for p in "$CPUSETS/$NAME"-h*; do
        [[ -d $p ]] || continue
        for ((t = 0; t < 40; t++)); do rmdir "$p" 2> /dev/null && break; sleep 0.05; done
    done
    if [[ -s $ST/subnet ]]; then ip route del unreachable "$(cat "$ST/subnet").0/24" 2> /dev/null || true; fi
    # ip netns add made /run/netns (a mount): remove it if we did and it is
    # unused (umount fails while another cluster's namespace is in it)
    if [[ -e $ST/made-run-netns && -d /run/netns && -z $(ls -A /run/netns) ]]; then
        umount /run/netns 2> /dev/null || true
        rmdir /run/netns 2> /dev/null || true
    fi
    rm -rf "$ST"
    rmdir /run/mnh 2> /dev/null || true
}

case ${1:-} in
    up | run | exec | pids | shape | info | down) c=$1; shift; "cmd_$c" "$@" ;;
    _agent) shift; NAME=$1 ST=/run/mnh/$1; shift; agent "$@" ;;
    *) sed -n '2,11s/^# \{0,1\}//p' "$0" >&2; exit 2 ;;
esac
