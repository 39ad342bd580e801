#!/usr/bin/env bash
# A single-node Slurm cluster on localhost, for the tests: no systemd, run as root.
#
#   tests/slurm/cluster.sh start DIR    # writes DIR/slurm.conf, starts munged, slurmctld, slurmd
#   tests/slurm/cluster.sh stop DIR     # stops them by PID
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

    install -d -m 755 -o munge -g munge /run/munge /var/lib/munge /var/log/munge
    if [ ! -s /etc/munge/munge.key ]; then
        dd if=/dev/urandom of=/etc/munge/munge.key bs=1024 count=1 status=none
        chown munge:munge /etc/munge/munge.key && chmod 400 /etc/munge/munge.key
    fi
    if ! munge -n >/dev/null 2>&1; then
        runuser -u munge -- munged --force
    fi

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
    slurmctld -f "$dir/slurm.conf"
    slurmd -f "$dir/slurm.conf"
    for _ in $(seq 60); do
        if sinfo -h -o %t 2>/dev/null | grep -q idle; then
            return 0
        fi
        sleep 0.5
    done
    echo "the local Slurm did not come up; logs in $dir/log" >&2
    return 1
}

stop() {
    for pidfile in "$dir/slurmd.pid" "$dir/slurmctld.pid"; do
        if [ -s "$pidfile" ]; then
            kill "$(cat "$pidfile")" 2>/dev/null || true
        fi
    done
}

"$cmd"
