#!/usr/bin/env bash
# A single-node Slurm cluster on localhost, for the tests: no systemd, run as root.
#
#   tests/slurm/cluster.sh start DIR    # writes DIR/slurm.conf, starts munged, slurmctld, slurmd
#   tests/slurm/cluster.sh stop DIR     # stops them and their jobs, and checks they are gone
#
# Everything it starts is its own and found again under DIR: a munged with its own key and
# socket (DIR/munge), slurmctld and slurmd by the pid files they write there, and the jobs'
# processes by SLURM_CONF=DIR/slurm.conf in their environment. stop removes exactly those, never
# a munged or slurmd of the machine's own, and fails naming what it could not remove; a start
# that fails stops what it had started.
#
# The node claims 8 CPUs whatever the machine has (config_overrides), so multi-task jobs run
# on small machines; it has two fake GPUs (gres on character devices) and the feature A4000,
# so jobscripts written for DAS-6 (-C A4000 --gres=gpu:1) run unchanged. Jobs see
# SLURM_CONF=DIR/slurm.conf.
set -euo pipefail
cmd=$1
dir=$(realpath -m "$2")
host=$(hostname -s)

start() {
    mkdir -p "$dir"/{state,spool,log,dev}
    rm -rf "${dir:?}"/state/*   # a stale state would resurrect old jobs

    trap 'code=$?; [ "$code" = 0 ] || { echo "cluster.sh: start failed; stopping what it started" >&2; stop; }' EXIT
    trap 'exit 130' INT TERM
    install -d -m 755 "$dir/munge"   # munged wants its socket's folder open to all
    if [ ! -s "$dir/munge/munge.key" ]; then
        (umask 077 && dd if=/dev/urandom of="$dir/munge/munge.key" bs=1024 count=1 status=none)
    fi
    # --force: DIR's parents need not be open to all (pytest's temporary folders are not).
    munged --force --socket="$dir/munge/socket" --key-file="$dir/munge/munge.key" \
        --pid-file="$dir/munge/munged.pid" --log-file="$dir/log/munged.log" --seed-file="$dir/munge/seed"

    for i in 0 1; do  # fake GPUs: Slurm only needs device files to hand out
        [ -e "$dir/dev/gpu$i" ] || mknod "$dir/dev/gpu$i" c 195 "$i"
    done
    cat > "$dir/gres.conf" <<CONF
NodeName=$host Name=gpu File=$dir/dev/gpu[0-1]
CONF
    cat > "$dir/slurm.conf" <<CONF
ClusterName=mpitune-test
# Job ids new to this machine: MPICH names its shared memory after the job and step, and a
# segment a killed job left under the same name makes MPI_Init fail ("Out of memory").
FirstJobId=$(( $(date +%s) % 50000000 + 1000 ))
SlurmctldHost=$host
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$dir/munge/socket
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerType=sched/backfill
MpiDefault=none
ReturnToService=2
SlurmdParameters=config_overrides
GresTypes=gpu
KillWait=10
MinJobAge=300
InactiveLimit=0
NodeName=$host CPUs=8 RealMemory=1000 Gres=gpu:2 Features=A4000 State=UNKNOWN
PartitionName=debug Nodes=$host Default=YES MaxTime=INFINITE State=UP
CONF
    export SLURM_CONF="$dir/slurm.conf"
    slurmctld -f "$dir/slurm.conf" </dev/null
    slurmd -f "$dir/slurm.conf" </dev/null
    for _ in $(seq 60); do
        if sinfo -h -o %t 2>/dev/null | grep -q idle; then
            trap - EXIT INT TERM
            return 0
        fi
        sleep 0.5
    done
    echo "the local Slurm did not come up; logs in $dir/log" >&2
    return 1
}

alive() {  # alive PID: running, not a zombie waiting to be reaped
    [ -e "/proc/$1" ] && [ "$(awk '{print $3}' "/proc/$1/stat" 2>/dev/null)" != Z ]
}

mine() {  # mine PIDFILE: the pid it names, if that process is one of this cluster's (its command names DIR)
    local pid
    pid=$(cat "$1" 2>/dev/null) || return 1
    [[ "$pid" =~ ^[0-9]+$ ]] && tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -qF "$dir/" && echo "$pid"
}

jobs_of_this_cluster() {  # slurmstepd and the jobs' tasks: SLURM_CONF=DIR/slurm.conf, in a job or a step
    local f p
    for f in $(grep -lzxF "SLURM_CONF=$dir/slurm.conf" /proc/[0-9]*/environ 2>/dev/null); do
        p=${f#/proc/} && p=${p%/environ}
        [ "$p" != $$ ] && alive "$p" &&
            { [ "$(cat "/proc/$p/comm" 2>/dev/null)" = slurmstepd ] || grep -qz '^SLURM_JOB_ID=' "$f"; } &&
            echo "$p"
    done
    return 0
}

ours() {  # every process of this cluster still running: its daemons and its jobs
    local f pid
    for f in "$dir/slurmd.pid" "$dir/slurmctld.pid" "$dir/munge/munged.pid"; do
        if pid=$(mine "$f") && alive "$pid"; then echo "$pid"; fi
    done
    jobs_of_this_cluster
}

stop() {
    local pids
    # TERM to every one (slurmctld saves its state first: up to 10 s), then KILL to what is left.
    for sig in TERM TERM TERM TERM KILL; do
        pids=$(ours)
        [ -n "$pids" ] || return 0
        # shellcheck disable=SC2086
        kill -"$sig" $pids 2>/dev/null || true
        for _ in $(seq 10); do
            [ -n "$(ours)" ] || return 0
            sleep 0.25
        done
    done
    pids=$(ours)
    [ -z "$pids" ] && return 0
    echo "cluster.sh: stop left these of $dir behind:" >&2
    # shellcheck disable=SC2086
    ps -o pid,args -p "$(echo $pids | tr ' ' ,)" >&2
    return 1
}

"$cmd"
