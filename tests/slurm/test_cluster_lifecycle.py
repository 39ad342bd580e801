"""jobscripts/local-cluster.sh removes what it starts, and only that: after `stop`, and after a
`start` that is interrupted half-way, no process, network namespace or link of the cluster is
left, and a munged the machine already ran (a site's own) still runs and still answers.

Needs root, Slurm (slurmctld, slurmd, slurm-client, munge) and `ip netns`; skipped without.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

from test_multinode import SCRIPT, pytestmark  # noqa: F401  (the same needs, the same skips)

# A network and names of their own, apart from test_multinode's cluster.
NET = "10.214.0"


def cluster_env(tag: str, nodes: int) -> dict[str, str]:
    return dict(
        os.environ, MPITUNE_CLUSTER_NET=NET, MPITUNE_CLUSTER_TAG=tag, MPITUNE_CLUSTER_GPUS=" ".join(["1"] * nodes)
    )


def remains(state: Path, tag: str) -> list[str]:
    """What of the cluster in STATE is still there: processes whose command names it, its
    network namespace, its links."""
    found = []
    for pid in (p for p in os.listdir("/proc") if p.isdigit()):
        try:
            command = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue  # ended meanwhile
        if f"{state}/" in command and "local-cluster.sh" not in command:
            found.append(f"process {pid}: {command}")
    found += [f"namespace {n}" for n in os.listdir("/run/netns") if tag in n] if os.path.isdir("/run/netns") else []
    found += [f"link {n}" for n in os.listdir("/sys/class/net") if n.startswith(f"mt{tag}")]
    return found


def site_munged(folder: Path) -> int:
    """A munged as a site runs one (its own key and socket, not the cluster's); its pid."""
    folder.mkdir(mode=0o755)
    key = folder / "munge.key"
    key.write_bytes(os.urandom(1024))
    key.chmod(0o400)
    subprocess.run(
        ["munged", "--force", f"--socket={folder}/socket", f"--key-file={key}", f"--pid-file={folder}/pid"]
        + [f"--log-file={folder}/log", f"--seed-file={folder}/seed"],
        check=True,
        timeout=30,
    )
    return int((folder / "pid").read_text())


def answers(folder: Path) -> bool:
    proc = subprocess.run(["munge", "-n", "-S", f"{folder}/socket"], capture_output=True, timeout=30)
    return proc.returncode == 0


def test_stop_removes_the_cluster_and_leaves_a_sites_munged_alone(tmp_path):
    site = tmp_path / "site"
    pid = site_munged(site)
    state = tmp_path / "cluster"
    env = cluster_env("lc1", 1)
    try:
        subprocess.run(["bash", str(SCRIPT), "start", str(state), "1"], env=env, check=True, timeout=120)
        assert any("munged" in r for r in remains(state, "lc1"))  # the cluster's own
        stopped = subprocess.run(["bash", str(SCRIPT), "stop", str(state)], env=env, capture_output=True, timeout=90)
        assert stopped.returncode == 0, stopped.stderr
        assert remains(state, "lc1") == []
        assert Path(f"/proc/{pid}").exists() and answers(site)
    finally:
        subprocess.run(["bash", str(SCRIPT), "stop", str(state)], env=env, capture_output=True, timeout=90)
        os.kill(pid, signal.SIGTERM)


def test_an_interrupted_start_stops_what_it_had_started(tmp_path):
    """Ctrl-C once munged runs: the start exits non-zero and nothing of the cluster is left."""
    state = tmp_path / "cluster"
    env = cluster_env("lc2", 2)
    start = subprocess.Popen(
        ["bash", str(SCRIPT), "start", str(state), "2"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 60
        while not (state / "munge" / "munged.pid").exists():
            assert start.poll() is None and time.monotonic() < deadline, start.communicate()
            time.sleep(0.05)
        os.killpg(start.pid, signal.SIGINT)
        _, err = start.communicate(timeout=90)
        assert start.returncode != 0 and "start failed; stopping what it started" in err, err
        assert remains(state, "lc2") == []
    finally:
        if start.poll() is None:
            os.killpg(start.pid, signal.SIGKILL)
            start.wait(timeout=30)
        subprocess.run(["bash", str(SCRIPT), "stop", str(state)], env=env, capture_output=True, timeout=90)
