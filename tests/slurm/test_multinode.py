"""mpitune across several Slurm nodes: a real Slurm 22.05 of three nodes on this one machine.

Each node is a network and UTS namespace (jobscripts/local-cluster.sh); the ranks talk MPI
over TCP on a bridge, as between real nodes, and the file is on the host's filesystem, as on
a shared one. jobscripts/das6.sh is submitted unchanged, with the shape on sbatch's command
line. Every fault test ends as a user would: `mpitune check FILE`, then the same job again,
which must finish with every configuration recorded exactly once.

The figures (seconds from a fault to the job's end, what was lost, start-up per rank) are
printed on lines starting with "measured:" (pytest -s shows them); docs/slurm.md quotes them.

Needs root, Slurm (slurmctld, slurmd, slurm-client, munge) and `ip netns`; skipped without.
The cluster is the tests' own (its own munged too) and is stopped, jobs, namespaces and bridge
included, however the tests end.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import h5py
import pytest
from conftest import REPO, mpi_env, report_json, spin_c
from leftovers import uninterrupted

SCRIPT = REPO / "jobscripts" / "local-cluster.sh"
DAS6 = REPO / "jobscripts" / "das6.sh"
NODES = 3
# One GPU on node1, two on node2 and node3: `-N 3 --gres=gpu:1` runs on all three, and
# `-N 2 --ntasks-per-node=2 --gres=gpu:2` has two nodes to run on.
GPUS = "1 2 2"
# Rank 0 calls a rank silent after this many seconds past what its batch should take
# (the `deadline` branch; its default, 60 s, is for real clusters).
DEADLINE_FLOOR_S = 8
# Configurations of the runs that are stopped or broken at batch 4 or 5 (3 per batch): enough
# to be mid-search then, few enough that the resumed job is short.
STOPPED_CONFIGS = 45


def _netns_works() -> bool:
    """`ip netns` needs root and a kernel that allows network namespaces (not every container)."""
    if os.geteuid() != 0 or not all(shutil.which(t) for t in ("ip", "nsenter", "unshare")):
        return False
    name = f"mtprobe{os.getpid()}"
    made = subprocess.run(["ip", "netns", "add", name], capture_output=True).returncode == 0
    if made:
        subprocess.run(["ip", "netns", "del", name], capture_output=True)
    return made


pytestmark = [
    pytest.mark.skipif(
        not all(shutil.which(t) for t in ("slurmctld", "slurmd", "sbatch", "munged")),
        reason="needs a Slurm installation (slurmctld, slurmd, slurm-client, munge)",
    ),
    pytest.mark.skipif(not _netns_works(), reason="needs root and `ip netns` (network namespaces)"),
]

# About 20 ms per call: a configuration (compile, warm-up, 3 timed calls) takes about 0.2 s.
SPIN_C = spin_c(20)
SPEC = """
import numpy as np
lang = "C"
kernel_name = "spin"
kernel_source = "spin.c"
arguments = [np.zeros(16, np.float32), np.int32(16)]
answer = [np.ones(16, np.float32), None]
tune_params = {{"VARIANT": list(range({configs}))}}
iterations = 3
timeout_s = 3  # a configuration takes about 0.2 s; rank 0's deadline for a batch counts on this
"""


@dataclass
class Cluster:
    state: Path
    env: dict

    def node(self, action: str, k: int) -> None:
        """node-down / link-down / node-up K, through the user script."""
        subprocess.run(["bash", str(SCRIPT), action, str(self.state), str(k)], check=True, timeout=90)

    def ranks_on(self, k: int) -> list[int]:
        """The pids of mpitune ranks on nodeK: children of a slurmstepd running `-m mpitune`."""
        out = subprocess.run(
            ["ip", "netns", "pids", f"mt-{self.tag}-node{k}"], capture_output=True, text=True
        ).stdout.split()
        found = []
        for pid in out:
            try:
                cmd = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
                parent = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1]
                parent_name = Path(f"/proc/{parent}/comm").read_text().strip()
            except (OSError, IndexError):
                continue  # gone meanwhile
            if b"mpitune" in cmd and b"job" not in cmd and parent_name == "slurmstepd":
                found.append(int(pid))
        return found

    @property
    def tag(self) -> str:
        return re.search(r"^tag=(\S+)$", (self.state / "cluster.env").read_text(), re.M).group(1)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory) -> Iterator[Cluster]:
    state = tmp_path_factory.mktemp("cluster")
    env = mpi_env()
    env.update(
        SLURM_CONF=str(state / "slurm.conf"),
        MPITUNE_ENV=str(Path(sys.executable).parent.parent),
        MPITUNE_REQUEUE="0",
        # The plugin for the mpich wheel, given: probing the MPI library costs every job about
        # a second (tests/test_slurm.py covers the probe).
        MPITUNE_SRUN_MPI="pmi2",
        MPITUNE_RANK_DEADLINE_FLOOR_S=str(DEADLINE_FLOOR_S),
        MPITUNE_CLUSTER_TAG=f"t{os.getpid() % 100000}",
        MPITUNE_CLUSTER_GPUS=GPUS,
    )
    try:
        subprocess.run(["bash", str(SCRIPT), "start", str(state), str(NODES)], env=env, check=True, timeout=120)
        for line in (state / "mpi.env").read_text().splitlines():  # what jobs need for MPI over TCP
            for assignment in line.removeprefix("export ").split():
                key, _, value = assignment.partition("=")
                env[key] = value
        yield Cluster(state, env)
    finally:  # also when start failed half-way, or a test was interrupted
        with uninterrupted():
            # A session of their own: a Ctrl-C to the terminal's process group cannot stop them half-way.
            subprocess.run(
                ["scancel", "--user", "root"], env=env, timeout=30, capture_output=True, start_new_session=True
            )
            stopped = subprocess.run(
                ["bash", str(SCRIPT), "stop", str(state)],
                env=env,
                capture_output=True,
                text=True,
                timeout=90,
                start_new_session=True,
            )
        assert stopped.returncode == 0, stopped.stderr  # it names what it could not stop


@pytest.fixture
def work(tmp_path) -> Path:
    (tmp_path / "spin.c").write_text(SPIN_C)
    return tmp_path


def write_spec(directory: Path, configs: int) -> None:
    (directory / "spec.py").write_text(SPEC.format(configs=configs))


@dataclass
class Job:
    id: str
    log: Path
    submitted_s: float


def submit(
    cluster: Cluster, cwd: Path, shape: list[str], flags: tuple[str, ...] | list[str] = (), env: dict | None = None
) -> Job:
    """sbatch das6.sh spec.py, unchanged, the shape on sbatch's command line; appends to one log
    per test, so that a requeued job's output follows its first."""
    log = cwd / "job.out"
    out = subprocess.run(
        [
            "sbatch",
            "--parsable",
            "--open-mode=append",
            "--output",
            str(log),
            "--cpus-per-task=2",
            *shape,
            str(DAS6),
            "spec.py",
            "--cache",
            str(cwd / "spin.h5"),
            *flags,
        ],
        cwd=cwd,
        env=env or cluster.env,
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    return Job(out.stdout.strip().split(";")[0], log, time.monotonic())


def job_state(cluster: Cluster, job: Job) -> tuple[str, int | None]:
    """(JobState, exit code) from scontrol; the exit code once it has ended."""
    out = subprocess.run(
        ["scontrol", "show", "job", "-o", job.id], env=cluster.env, capture_output=True, text=True, timeout=30
    ).stdout
    state = re.search(r"JobState=(\S+)", out)
    code = re.search(r"ExitCode=(\d+):(\d+)", out)
    return (state.group(1) if state else "GONE"), (int(code.group(1)) if code else None)


ENDED = {"COMPLETED", "FAILED", "CANCELLED", "NODE_FAIL", "TIMEOUT", "OUT_OF_MEMORY", "BOOT_FAIL", "PREEMPTED"}


def wait_end(cluster: Cluster, job: Job, timeout_s: float, states: set[str] = ENDED) -> tuple[str, int | None, float]:
    """Poll until the job is in one of STATES (by default: it has ended): (state, exit code,
    monotonic time it was seen so)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        state, code = job_state(cluster, job)
        if state in states:
            return state, code, time.monotonic()
        time.sleep(0.2)
    pytest.fail(f"job {job.id} still {state} after {timeout_s} s:\n{read(job.log)}")


def read(path: Path) -> str:
    return path.read_text() if path.exists() else ""


def wait_for_batch(job: Job, batch: int, timeout_s: float = 60) -> int:
    """Wait for the progress line of BATCH in the job's log; the configurations done by then."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = re.findall(rf"^mpitune: batch {batch}: (\d+)/", read(job.log), re.M)
        if found:
            return int(found[-1])
        time.sleep(0.1)
    pytest.fail(f"no batch {batch} within {timeout_s} s:\n{read(job.log)}")


def holders(path: Path) -> set[int]:
    """The processes that have PATH open, from /proc/*/fd."""
    found = set()
    for pid in (p for p in os.listdir("/proc") if p.isdigit()):
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue  # the process ended, or is not ours to read
        for fd in fds:
            try:
                if os.readlink(f"/proc/{pid}/fd/{fd}") == str(path):
                    found.add(int(pid))
            except OSError:
                continue  # closed meanwhile
    return found


def recorded_ids(cache: Path) -> list[int]:
    with h5py.File(cache, "r") as f:
        return sorted(int(i) for i in f["results"]["config_id"])


def check(cache: Path) -> str:
    """`mpitune check FILE`: repairs what a killed run left; the file must be sound after."""
    proc = subprocess.run(
        [sys.executable, "-m", "mpitune", "check", str(cache)],
        env=mpi_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode in (0, 1), proc.stdout + proc.stderr  # 1: repaired what a killed run left
    again = subprocess.run(
        [sys.executable, "-m", "mpitune", "check", "--no-repair", str(cache)],
        env=mpi_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert again.returncode == 0 and "sound" in again.stdout, again.stdout + again.stderr
    return proc.stdout


def resume_to_the_end(cluster: Cluster, cwd: Path, shape: list[str], configs: int) -> None:
    """The same job again finishes the space: every configuration recorded exactly once."""
    job = submit(cluster, cwd, shape)
    state, code, _ = wait_end(cluster, job, 120)
    assert (state, code) == ("COMPLETED", 0), read(job.log)
    assert recorded_ids(cwd / "spin.h5") == list(range(configs))


def measured(what: str, **figures: object) -> None:
    """One line of figures for docs/slurm.md (seen with pytest -s)."""
    flat = {k: v if isinstance(v, float) else " | ".join(str(v).splitlines()) for k, v in figures.items()}
    shown = (f"{k}={v:.2f}" if isinstance(v, float) else f"{k}={v}" for k, v in flat.items())
    print(f"measured: {what}: " + ", ".join(shown), flush=True)


ONE_PER_NODE = ["-N", "3", "--ntasks-per-node=1", "--gres=gpu:1"]


def test_three_nodes_one_rank_each(cluster, work):
    """The DAS-6 shape: one rank per node and GPU; the report names every node and device."""
    write_spec(work, 24)
    job = submit(cluster, work, ONE_PER_NODE)
    state, code, _ = wait_end(cluster, job, 90)
    log = read(job.log)
    assert (state, code) == ("COMPLETED", 0), log
    assert "3 rank(s) on node[1-3]" in log
    assert recorded_ids(work / "spin.h5") == list(range(24))
    assert [p.name for p in work.glob("*.h5*")] == ["spin.h5"]  # one file (its writer: the warning test)
    summary = report_json(work / "spin.h5")
    ranks = {r["rank"]: r for r in summary["per_rank"]}
    assert {r["host"] for r in ranks.values()} == {"node1", "node2", "node3"}
    assert ranks[0]["host"] == "node1"  # rank 0 (the writer) runs where the batch script runs
    for r in ranks.values():
        assert r["device_detail"] == "local rank 0, GPU 0 of CUDA_VISIBLE_DEVICES=0", r
        assert r["configs"] > 0 and r["startup_s"] > 0
    text = subprocess.run(
        [sys.executable, "-m", "mpitune", "report", str(work / "spin.h5")],
        env=mpi_env(),
        capture_output=True,
        text=True,
        timeout=60,
    ).stdout
    assert "placement: rank 0 node1 (local rank 0, GPU 0" in text and "rank 2 node3" in text
    measured("start-up on 3 nodes", **{f"rank{k}_s": ranks[k]["startup_s"] for k in sorted(ranks)})


def test_a_heterogeneous_job_is_one_run_over_its_components(cluster, work):
    """sbatch A : B (docs/slurm.md, "Several GPU types in one job"): both components' ranks are one
    MPI job; with one device model (the nodes' CPUs), --devices each is today's run, in one file."""
    write_spec(work, 12)
    one = ["-N", "1", "--ntasks-per-node=1", "--gres=gpu:1"]
    job = submit(cluster, work, [*one, "-w", "node1", ":", *one, "-w", "node3"], ["--devices", "each"])
    state, code, _ = wait_end(cluster, job, 90)
    log = read(job.log)
    assert (state, code) == ("COMPLETED", 0), log
    assert "2 rank(s) on node1 + node3: srun " in log and "--het-group=0-1" in log
    assert "tuning spin (C) on 2 rank(s)" in log and "each device model" not in log
    assert recorded_ids(work / "spin.h5") == list(range(12))
    assert {r["host"] for r in report_json(work / "spin.h5")["per_rank"]} == {"node1", "node3"}


@pytest.mark.parametrize("nodes", [1, 2])
def test_start_up_per_rank_on_fewer_nodes(cluster, work, nodes):
    """Start-up per rank on 1 and 2 nodes, beside the 3 above: the report shows it per rank."""
    write_spec(work, 3)
    job = submit(cluster, work, ["-N", str(nodes), "--ntasks-per-node=1", "--gres=gpu:1"])
    state, code, _ = wait_end(cluster, job, 90)
    assert (state, code) == ("COMPLETED", 0), read(job.log)
    ranks = report_json(work / "spin.h5")["per_rank"]
    assert len({r["host"] for r in ranks}) == nodes
    assert all(r["startup_s"] > 0 for r in ranks)
    measured(f"start-up on {nodes} node(s)", **{f"rank{r['rank']}_s": r["startup_s"] for r in ranks})


@pytest.mark.parametrize(
    "bind,visible",
    [
        ([], ("0,1", "0,1")),  # both GPUs visible to both tasks: the local rank chooses
        (["--gpu-bind=single:1"], ("0", "1")),  # one GPU per task, set by Slurm: it is honoured
    ],
)
def test_two_ranks_of_a_node_take_distinct_gpus(cluster, work, bind, visible):
    write_spec(work, 12)
    job = submit(cluster, work, ["-N", "2", "--ntasks-per-node=2", "--gres=gpu:2", *bind])
    state, code, _ = wait_end(cluster, job, 90)
    assert (state, code) == ("COMPLETED", 0), read(job.log)
    with h5py.File(work / "spin.h5", "r") as f:
        ranks = f["ranks"][...]
    placed = sorted((r["host"].decode(), r["device_detail"].decode()) for r in ranks)
    expected = [
        (host, f"local rank {k}, GPU {k} of CUDA_VISIBLE_DEVICES={visible[k]}")
        for host in ("node2", "node3")
        for k in (0, 1)
    ]
    assert placed == expected


def test_the_time_limit_warning_stops_every_rank_and_the_requeued_job_resumes(cluster, work):
    """`scancel --signal=USR1 --batch` is what `--signal=B:USR1@T` sends: every rank on every
    node exits 75, the job requeues itself, and the requeued job finishes the space."""
    write_spec(work, STOPPED_CONFIGS)
    env = dict(cluster.env, MPITUNE_REQUEUE="1")
    job = submit(cluster, work, [*ONE_PER_NODE, "--time=10"], ["--batch-size", "3"], env=env)
    done = wait_for_batch(job, 4)
    # Rank 0 alone writes the file: mid-run, only its process (on node1) has it open.
    assert holders(work / "spin.h5") == set(cluster.ranks_on(1)) != set()
    subprocess.run(["scancel", "--signal=USR1", "--batch", job.id], env=cluster.env, check=True, timeout=30)
    warned_s = time.monotonic()
    deadline = warned_s + 60
    while job_state(cluster, job)[0] != "PENDING":  # requeued: held back by a begin time
        assert time.monotonic() < deadline, read(job.log)
        time.sleep(0.2)
    log = read(job.log)
    measured("time-limit warning to requeued", seconds=time.monotonic() - warned_s)
    assert "USR1: the time limit is near" in log and f"requeued job {job.id}" in log
    exits = set(re.findall(r"srun: error: (node\d): task (\d): Exited with exit code 75", log))
    assert exits == {("node1", "0"), ("node2", "1"), ("node3", "2")}, log
    first = recorded_ids(work / "spin.h5")
    assert done <= len(first) < STOPPED_CONFIGS
    # Slurm holds a requeued job back about two minutes; let it start now, but in a later
    # second than its first run was killed in: slurmd refuses a job credential as revoked
    # if it is not newer (to the second) than the kill ("Job credential revoked").
    time.sleep(2)
    subprocess.run(["scontrol", "update", f"jobid={job.id}", "starttime=now"], env=cluster.env, check=True)
    state, code, _ = wait_end(cluster, job, 120)
    assert (state, code) == ("COMPLETED", 0), read(job.log)
    assert recorded_ids(work / "spin.h5") == list(range(STOPPED_CONFIGS))
    with h5py.File(work / "spin.h5", "r") as f:
        assert [s.decode() for s in f["runs"]["status"]] == ["signal", "finished"]


def test_scancel_is_not_the_time_limit(cluster, work):
    """A plain scancel: the job says it was cancelled, drains, every rank exits 75, and it is
    not requeued (it was meant to end); submitting again resumes."""
    write_spec(work, STOPPED_CONFIGS)
    env = dict(cluster.env, MPITUNE_REQUEUE="1")
    job = submit(cluster, work, [*ONE_PER_NODE, "--time=10"], ["--batch-size", "3"], env=env)
    wait_for_batch(job, 4)
    subprocess.run(["scancel", job.id], env=cluster.env, check=True, timeout=30)
    cancelled_s = time.monotonic()
    state, _, ended_s = wait_end(cluster, job, 60)
    time.sleep(1)  # the job's last lines, after slurmctld saw it end
    log = read(job.log)
    measured("scancel to the job's end", seconds=ended_s - cancelled_s)
    assert state == "CANCELLED"
    assert "the job was cancelled (not its time limit)" in log and "so not requeued" in log, log
    assert "the time limit is near" not in log and "requeued job" not in log
    assert len(set(re.findall(r"(node\d): task \d: Exited with exit code 75", log))) == 3, log
    assert job_state(cluster, job)[0] == "CANCELLED"  # still: not pending again
    assert "sound" in check(work / "spin.h5")
    resume_to_the_end(cluster, work, ONE_PER_NODE, STOPPED_CONFIGS)


def _fault_run(cluster: Cluster, work: Path, configs: int = STOPPED_CONFIGS) -> tuple[Job, int]:
    write_spec(work, configs)
    job = submit(cluster, work, ONE_PER_NODE, ["--batch-size", "3"])
    return job, wait_for_batch(job, 5)


def _recorded_after(work: Path, fault: str, took_s: float, done: int) -> int:
    """After a fault: ``check`` the file first (a killed writer leaves it marked open), print
    the measured line, and return how many configurations the file holds."""
    report = check(work / "spin.h5")
    recorded = len(recorded_ids(work / "spin.h5"))
    measured(fault, seconds=took_s, done_before=done, recorded=recorded, check=report)
    return recorded


def test_a_killed_rank_ends_the_job_within_10_s(cluster, work):
    """(a) Rank 1's process dies while its node lives: srun ends the step (--wait)."""
    job, done = _fault_run(cluster, work)
    [rank1] = cluster.ranks_on(2)
    os.kill(rank1, signal.SIGKILL)
    killed_s = time.monotonic()
    _, code, ended_s = wait_end(cluster, job, 60)
    took_s = ended_s - killed_s
    recorded = _recorded_after(work, "killed rank 1 to the job's end", took_s, done)
    assert took_s < 10, read(job.log)
    assert code != 0 and recorded >= done
    resume_to_the_end(cluster, work, ONE_PER_NODE, STOPPED_CONFIGS)


def test_b_a_lost_node_ends_the_job_within_60_s(cluster, work):
    """(b) node2's slurmd and processes are killed (SlurmdTimeout is Slurm's default, 300 s):
    the job ends well before Slurm would notice, and the file keeps every completed batch."""
    job, done = _fault_run(cluster, work)
    try:
        cluster.node("node-down", 2)
        lost_s = time.monotonic()
        # COMPLETING: the batch script has ended; Slurm waits for node2 to confirm its part
        # until the node is back or SlurmdTimeout declares it down.
        _, _, ended_s = wait_end(cluster, job, 75, ENDED | {"COMPLETING"})
    finally:
        cluster.node("node-up", 2)
    _, code, _ = wait_end(cluster, job, 60)
    took_s = ended_s - lost_s
    recorded = _recorded_after(work, "node2 lost to the job's end", took_s, done)
    assert took_s < 60, read(job.log)
    assert code != 0 and recorded >= done
    resume_to_the_end(cluster, work, ONE_PER_NODE, STOPPED_CONFIGS)


def test_b_a_node_whose_link_went_down_ends_the_job_within_60_s(cluster, work):
    """(b) node2's link goes down, its processes alive but unreachable, as when a node hangs
    or its network fails: rank 0 calls rank 1 silent after the batch's deadline, and the
    job ends long before Slurm's SlurmdTimeout (300 s) would declare the node down."""
    job, done = _fault_run(cluster, work)
    try:
        cluster.node("link-down", 2)
        lost_s = time.monotonic()
        _, _, ended_s = wait_end(cluster, job, 75, ENDED | {"COMPLETING"})
    finally:
        cluster.node("node-up", 2)
    _, code, _ = wait_end(cluster, job, 60)
    took_s = ended_s - lost_s
    time.sleep(1)
    log = read(job.log)
    recorded = _recorded_after(work, "node2's link down to the job's end", took_s, done)
    assert took_s < 60, log
    assert "rank 1 on node2 did not answer" in log, log
    assert code != 0 and recorded >= done
    resume_to_the_end(cluster, work, ONE_PER_NODE, STOPPED_CONFIGS)


def test_c_rank_0s_node_lost_leaves_a_readable_file_that_resumes(cluster, work):
    """(c) node1 (batch script, srun, rank 0) is lost: the other ranks must not be left running,
    the file is readable and `check` names what was in flight; the next job resumes."""
    job, done = _fault_run(cluster, work)
    try:
        cluster.node("node-down", 1)
        lost_s = time.monotonic()
        deadline = lost_s + 60
        while cluster.ranks_on(2) or cluster.ranks_on(3):
            assert time.monotonic() < deadline, "the ranks on node2 and node3 outlived rank 0 by 60 s"
            time.sleep(0.2)
        orphans_s = time.monotonic() - lost_s
        report = check(work / "spin.h5")  # first: a killed writer leaves the file marked open
        recorded = len(recorded_ids(work / "spin.h5"))
    finally:
        cluster.node("node-up", 1)
        subprocess.run(["scancel", job.id], env=cluster.env, timeout=30)
    wait_end(cluster, job, 60)
    measured("node1 lost to the last rank's exit", seconds=orphans_s, done_before=done, recorded=recorded, check=report)
    assert recorded >= done
    assert "in flight" in report or "lost:" in report or "repaired" in report, report
    resume_to_the_end(cluster, work, ONE_PER_NODE, STOPPED_CONFIGS)


def test_d_a_stopped_rank_is_named_and_the_run_ends_resumable(cluster, work):
    """(d) Rank 2 stops answering while alive (SIGSTOP): rank 0 gives up on it after its batch's
    deadline with one line naming the rank and its host, and exits 75."""
    job, done = _fault_run(cluster, work)
    [rank2] = cluster.ranks_on(3)
    os.kill(rank2, signal.SIGSTOP)
    stopped_s = time.monotonic()
    try:
        _, _, ended_s = wait_end(cluster, job, 90)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(rank2, signal.SIGCONT)
    took_s = ended_s - stopped_s
    time.sleep(1)
    log = read(job.log)
    recorded = _recorded_after(work, "stopped rank 2 to the job's end", took_s, done)
    named = [line for line in log.splitlines() if "rank 2" in line and "node3" in line]
    assert len(named) == 1, log
    assert "mpitune: stopped early" in log or "exit code 75" in log, log
    assert recorded >= done
    resume_to_the_end(cluster, work, ONE_PER_NODE, STOPPED_CONFIGS)


def _seconds(slurm_time: str) -> int:
    """Seconds of Slurm's [D-]HH:MM:SS (or MM:SS)."""
    days, _, clock = slurm_time.rpartition("-")
    parts = [int(p) for p in clock.split(":")]
    return int(days or 0) * 86400 + sum(p * 60**i for i, p in enumerate(reversed(parts)))


def test_plans_sbatch_line_runs_the_spec_to_its_end_within_the_time_it_asks(cluster, work):
    """`python -m mpitune plan SPEC.py` from a pilot on this machine: its sbatch line, submitted as
    it stands (beside it only the log and the cores each rank takes here), runs the whole space
    on the nodes it names and ends well within its --time."""
    write_spec(work, 12)
    planning = [sys.executable, "-m", "mpitune", "plan", "spec.py", "--ranks", "3", "--pilot", "4", "--json"]
    proc = subprocess.run(planning, cwd=work, env=mpi_env(), capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    planned = json.loads(proc.stdout)["ranks"][0]
    line = shlex.split(planned["sbatch"])
    assert line[:4] == ["sbatch", "-N", "3", "--ntasks-per-node=1"] and line[-2:] == ["jobscripts/das6.sh", "spec.py"]
    asked_s = _seconds(next(a for a in line if a.startswith("--time=")).removeprefix("--time="))
    log = work / "job.out"
    out = subprocess.run(
        ["sbatch", "--parsable", "--output", str(log), "--cpus-per-task=2", *line[1:-2], str(DAS6), "spec.py"],
        cwd=work,
        env=cluster.env,
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    job = Job(out.stdout.strip().split(";")[0], log, time.monotonic())
    state, code, _ = wait_end(cluster, job, asked_s)
    assert (state, code) == ("COMPLETED", 0), read(log)
    shown = subprocess.run(
        ["scontrol", "show", "job", "-o", job.id], env=cluster.env, capture_output=True, text=True, timeout=30
    ).stdout
    limit = re.search(r"TimeLimit=(\S+)", shown).group(1)
    elapsed_s = _seconds(re.search(r"RunTime=(\S+)", shown).group(1))
    assert _seconds(limit) == asked_s and elapsed_s < asked_s
    assert "3 rank(s) on node[1-3]" in read(log)
    assert recorded_ids(work / "spec.h5") == list(range(12))
    measured("plan's sbatch line", predicted_s=planned["wall_s"], elapsed_s=float(elapsed_s), asked_s=float(asked_s))
