#!/usr/bin/env bash
# A Slurm cluster of several nodes on one Linux machine, to try multi-node mpitune on a laptop
# (and what the tests run on). Run as root; needs Debian's slurmctld, slurmd, slurm-client,
# munge and iproute2 (ip, nsenter and unshare from util-linux).
#
#   jobscripts/local-cluster.sh start DIR [NODES]   # NODES=3: node1..nodeN, partition defq
#   export SLURM_CONF=DIR/slurm.conf; source DIR/mpi.env   # then sbatch as on DAS-6:
#   sbatch -N 3 --ntasks-per-node=1 jobscripts/das6.sh spec.py
#   jobscripts/local-cluster.sh node-down DIR K    # lose nodeK: kill its slurmd and processes
#   jobscripts/local-cluster.sh link-down DIR K    # or cut its network, processes alive
#   jobscripts/local-cluster.sh node-up DIR K      # bring it back (ReturnToService=2)
#   jobscripts/local-cluster.sh stop DIR           # stop what `start DIR` started, and check it is gone
#
# Everything it starts is its own and found again under DIR: a munged with its own key and
# socket (DIR/munge), slurmctld and every slurmd by the pid files they write there, and the
# processes of each node's network namespace (jobs included). stop removes exactly those, never
# a munged or slurmd of the machine's own, and says what it could not remove; a start that
# fails stops what it had started.
# Each node is a network namespace with a veth into a bridge this script creates, and a UTS
# namespace of its own (its hostname is nodeK); slurmctld runs on the host on the bridge's
# address. The filesystem is the host's (only /sys is private to a node), so it is the
# "shared filesystem" of the cluster. Each node has one fake GPU (a character device: Slurm
# only needs a file to hand out) and the feature A4000, like DAS-6; the last node has two.
# MPITUNE_CLUSTER_GPUS="1 2 2" gives one count per node instead.
#
# Knobs: MPITUNE_CLUSTER_NET (default 10.213.0: a /24 that must be unused on this machine),
# MPITUNE_CLUSTER_TAG (a few letters or digits naming the bridge and namespaces; default from
# DIR), MPITUNE_CLUSTER_PORT (slurmctld's port; default a free one from 7000 up, so that it
# does not clash with another Slurm on this machine), MPITUNE_SLURMD_TIMEOUT_S (default 300,
# Slurm's own default: how long until a silent node is declared down).
set -euo pipefail

usage() { sed -n '2,19p' "$0" >&2; exit 2; }
[ $# -ge 2 ] || usage
cmd=$1
dir=$(realpath -m "$2")

# Names and addresses of this cluster: saved at start so that stop removes exactly those.
load_state() {
    # shellcheck disable=SC1091
    source "$dir/cluster.env"
}
netns() { echo "mt-$tag-node$1"; }
veth() { echo "mt${tag}v$1"; }      # host side of nodeK's veth; at most 15 characters
bridge() { echo "mt${tag}br"; }

start_slurmd() {  # slurmd of nodeK in its network namespace, a UTS one (hostname nodeK), /sys fresh
    local k=$1
    # `ip netns exec` would remount /sys as well, but loses /sys/fs/cgroup, and slurmd dies
    # with "No filesystem mounted on /sys/fs/cgroup"; so: a fresh sysfs (showing this node's
    # network devices), then the host's cgroup mounts bound back under it. A session of its
    # own, as a daemon: a Ctrl-C meant for whatever started it does not reach it. stop finds
    # it, and everything it started, by the namespace.
    setsid nsenter --net="/run/netns/$(netns "$k")" unshare --uts --mount --propagation private sh -c '
        hostname "$4" && mkdir -p "$1" && mount --rbind /sys/fs/cgroup "$1"
        mount -t sysfs sysfs /sys && mount --rbind "$1" /sys/fs/cgroup
        exec slurmd -D -f "$2" -N "$3"' sh "$dir/run/cgroup-node$k" "$dir/slurm.conf" "node$k" "node$k" \
        >>"$dir/log/slurmd-node$k.out" 2>&1 </dev/null &
}

kill_node_processes() {  # everything running in nodeK's network namespace: slurmd, steps, ranks
    local k=$1 pids
    for _ in $(seq 50); do   # until none is left: a process may fork while its siblings die
        pids=$(ip netns pids "$(netns "$k")" 2>/dev/null || true)
        [ -n "$pids" ] || return 0
        # shellcheck disable=SC2086
        kill -KILL $pids 2>/dev/null || true
        sleep 0.1
    done
}

start_munge() {  # a munged of this cluster's own: its key, socket and pid file under DIR/munge
    install -d -m 755 "$dir/munge"   # munged wants its socket's folder open to all
    if [ ! -s "$dir/munge/munge.key" ]; then
        (umask 077 && dd if=/dev/urandom of="$dir/munge/munge.key" bs=1024 count=1 status=none)
    fi
    # --force: DIR's parents need not be open to all (pytest's temporary folders are not).
    munged --force --socket="$dir/munge/socket" --key-file="$dir/munge/munge.key" \
        --pid-file="$dir/munge/munged.pid" --log-file="$dir/log/munged.log" --seed-file="$dir/munge/seed"
}

mine() {  # mine PIDFILE: the pid it names, if that process is one of this cluster's (its command names DIR)
    local pid
    pid=$(cat "$1" 2>/dev/null) || return 1
    [[ "$pid" =~ ^[0-9]+$ ]] && tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -qF "$dir/" && echo "$pid"
}

stop_daemon() {  # stop_daemon PIDFILE: TERM, up to 10 s to exit (slurmctld saves its state), then KILL
    local pid
    pid=$(mine "$1") || return 0
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 40); do
        kill -0 "$pid" 2>/dev/null && [ "$(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null)" != Z ] || return 0
        sleep 0.25
    done
    kill -KILL "$pid" 2>/dev/null || true
}

survivors() {  # what of this cluster is still there: processes whose command names DIR, namespaces, links
    local f p
    for f in $(grep -laF "$dir/" /proc/[0-9]*/cmdline 2>/dev/null); do
        p=${f#/proc/} && p=${p%/cmdline}
        [ "$p" = $$ ] || [ "$p" = "$BASHPID" ] && continue
        tr '\0' ' ' <"$f" 2>/dev/null | grep -vF local-cluster.sh | sed "s/^/process $p: /" || true
    done
    for k in $(seq "$nodes"); do
        [ ! -e "/run/netns/$(netns "$k")" ] || echo "network namespace $(netns "$k")"
        [ ! -e "/sys/class/net/$(veth "$k")" ] || echo "link $(veth "$k")"
    done
    [ ! -e "/sys/class/net/$(bridge)" ] || echo "bridge $(bridge)"
}

wait_idle() {  # wait until COUNT nodes answer
    local count=$1
    for _ in $(seq 120); do
        if [ "$(SLURM_CONF="$dir/slurm.conf" sinfo -h -N -t idle,mix,alloc -o %N 2>/dev/null | sort -u | wc -l)" -ge "$count" ] 2>/dev/null; then
            return 0
        fi
        sleep 0.5
    done
    echo "local-cluster: fewer than $count nodes came up; logs in $dir/log" >&2
    return 1
}

free_port() {
    local port=7000
    while ss -ltnH "sport = :$port" | grep -q . || ss -ltnH "sport = :$((port + 1))" | grep -q .; do
        port=$((port + 2))
    done
    echo "$port"
}

start() {
    local nodes=${3:-3}
    [ "$(id -u)" = 0 ] || { echo "local-cluster: run as root" >&2; exit 1; }
    [ -e "$dir/cluster.env" ] && { echo "local-cluster: $dir holds a cluster; stop it first" >&2; exit 1; }
    net=${MPITUNE_CLUSTER_NET:-10.213.0}
    tag=${MPITUNE_CLUSTER_TAG:-$(echo "$dir" | md5sum | cut -c1-6)}
    port=${MPITUNE_CLUSTER_PORT:-$(free_port)}
    if ip route show | grep -q "^$net\.0/24"; then
        echo "local-cluster: $net.0/24 is already in use on this machine; set MPITUNE_CLUSTER_NET" >&2
        exit 1
    fi
    read -r -a gpus <<<"${MPITUNE_CLUSTER_GPUS:-$(printf '1 %.0s' $(seq $((nodes - 1)))) 2}"
    [ "${#gpus[@]}" = "$nodes" ] || { echo "local-cluster: MPITUNE_CLUSTER_GPUS needs $nodes counts" >&2; exit 1; }

    mkdir -p "$dir"/{state,spool,log,run,dev}
    rm -rf "${dir:?}"/state/*   # a stale state would resurrect old jobs
    cat >"$dir/cluster.env" <<ENV
tag=$tag
net=$net
port=$port
nodes=$nodes
ENV

    # From here on, a start that fails (or is interrupted) removes what it had made.
    trap 'code=$?; [ "$code" = 0 ] || { echo "local-cluster: start failed; stopping what it started" >&2; stop; }' EXIT
    trap 'exit 130' INT TERM
    start_munge   # one munged on the host serves every namespace (its socket is a file)

    ip link add "$(bridge)" type bridge
    ip addr add "$net.1/24" dev "$(bridge)"
    ip link set "$(bridge)" up
    : >"$dir/gres.conf"
    local node_lines=""
    for k in $(seq "$nodes"); do
        ip netns add "$(netns "$k")"
        ip link add "$(veth "$k")" type veth peer name eth0 netns "$(netns "$k")"
        ip link set "$(veth "$k")" master "$(bridge)" up
        ip -n "$(netns "$k")" addr add "$net.$((10 + k))/24" dev eth0
        ip -n "$(netns "$k")" link set eth0 up
        ip -n "$(netns "$k")" link set lo up
        mkdir -p "$dir/dev/node$k" "$dir/spool/node$k"
        local n=${gpus[$((k - 1))]}
        for i in $(seq 0 $((n - 1))); do
            [ -e "$dir/dev/node$k/gpu$i" ] || mknod "$dir/dev/node$k/gpu$i" c 195 "$i"
        done
        echo "NodeName=node$k Name=gpu File=$dir/dev/node$k/gpu[0-$((n - 1))]" >>"$dir/gres.conf"
        node_lines+="NodeName=node$k NodeAddr=$net.$((10 + k)) CPUs=8 RealMemory=1000 Gres=gpu:$n Features=A4000 State=UNKNOWN"$'\n'
    done
    cat >"$dir/slurm.conf" <<CONF
ClusterName=mpitune-local
# Job ids new to this machine: MPICH names its shared memory after the job and step, and a
# segment a killed job left under the same name makes MPI_Init fail ("Out of memory").
FirstJobId=$(( $(date +%s) % 50000000 + 1000 ))
SlurmctldHost=$(hostname -s)($net.1)
SlurmctldPort=$port
SlurmdPort=$((port + 1))
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$dir/munge/socket
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool/%n
SlurmctldPidFile=$dir/run/slurmctld.pid
SlurmdPidFile=$dir/run/slurmd-%n.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd-%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerType=sched/backfill
MpiDefault=none
ReturnToService=2
SlurmdParameters=config_overrides
GresTypes=gpu
SlurmdTimeout=${MPITUNE_SLURMD_TIMEOUT_S:-300}
KillWait=10
MinJobAge=300
InactiveLimit=0
${node_lines}PartitionName=defq Nodes=node[1-$nodes] Default=YES MaxTime=INFINITE State=UP
CONF
    # What a job's MPI needs here: MPICH would use shared memory between the "nodes" (one
    # kernel); over TCP on the bridge, as between real nodes.
    cat >"$dir/mpi.env" <<ENV
export MPIR_CVAR_CH4_NETMOD=ofi FI_PROVIDER=tcp FI_TCP_IFACE=eth0 UCX_TLS=tcp,self
ENV
    slurmctld -f "$dir/slurm.conf" </dev/null
    for k in $(seq "$nodes"); do
        start_slurmd "$k"
    done
    wait_idle "$nodes"
    trap - EXIT INT TERM
}

stop() {
    [ -e "$dir/cluster.env" ] || return 0
    load_state
    for k in $(seq "$nodes"); do
        kill_node_processes "$k"
    done
    stop_daemon "$dir/run/slurmctld.pid"
    stop_daemon "$dir/munge/munged.pid"
    for k in $(seq "$nodes"); do
        kill_node_processes "$k"   # a slurmd that node-up started while this stop ran
        ip link del "$(veth "$k")" 2>/dev/null || true
        ip netns del "$(netns "$k")" 2>/dev/null || true
    done
    ip link del "$(bridge)" 2>/dev/null || true
    local left
    left=$(survivors)
    if [ -n "$left" ]; then
        echo "local-cluster: stop left these of $dir behind:" >&2
        echo "$left" >&2
        return 1
    fi
    rm -f "$dir/cluster.env"
}

node_down() { load_state; kill_node_processes "$3"; }
link_down() { load_state; ip link set "$(veth "$3")" down; }
node_up() {
    load_state
    local k=$3
    ip link set "$(veth "$k")" up
    # Not `kill -0 PID`: a killed slurmd whose parent has not reaped it yet still answers that.
    if [ -z "$(ip netns pids "$(netns "$k")" 2>/dev/null)" ]; then
        start_slurmd "$k"
    fi
    SLURM_CONF="$dir/slurm.conf" scontrol update nodename="node$k" state=resume 2>/dev/null || true
    wait_idle "$nodes"
}

case $cmd in
start) start "$@" ;;
stop) stop ;;
node-down) node_down "$@" ;;
link-down) link_down "$@" ;;
node-up) node_up "$@" ;;
*) usage ;;
esac
