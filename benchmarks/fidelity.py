"""How faithful the replay's simulated clock is: every real run file given is replayed with the
run's own ranks, strategy, seed, budget and time limit (its compile workers and racing as the
file records them: the replay's defaults), and its wall time and each rank's phase sums are
printed beside the real ones, with their ratio.

    PYTHONPATH=. python benchmarks/fidelity.py FILE [FILE ...] [--check] [--tolerance 0.1]

With ``--check`` it exits 1 when a replay's wall time is off by more than the tolerance (10 %),
or a rank's wall time is, or one of its phase sums is (but its wait, what is left of its wall
time once it has worked, held with it: the messages' latency on a busy machine, which the clock
does not model, shows there): a phase is held to the tolerance of its real sum, or, when it is
shorter than a fifth of the rank's wall time, to the tolerance of that fifth (a phase of a few
milliseconds, or a wait that a busy machine's noise lengthens, is not the clock's error), and never
closer than ``PHASE_FLOOR_S``: the clock charges a confirmation or calibration its launches, not
the few milliseconds per candidate of asking the measuring worker for them, which a busy machine
stretches to tens (a one-rank C run of six configurations: 0.001 s simulated, 0.02 to 0.03 s
real, its wall 1.3 s). In a
refilled run (the default on several ranks) which rank measured which configuration depends on
when each rank ran short, which a replay's ranks need not repeat: there each phase is held as its
sum over the ranks (against a fifth of the ranks' summed wall time where that is more), each
rank's wall time as in batches.
Calibration and confirmation are replayed only where the run made them (``--no-calibrate``,
``--confirm 0`` otherwise). A file of several runs (resumed) is skipped: its runs had
different settings.

Each replay is a real ``mpiexec -n RANKS python -m mpitune replay`` (``MPITUNE_MPIEXEC`` names
the launcher, else the one beside this Python, else mpiexec on the path). Run it from the
repository root with ``PYTHONPATH=.``, so that ``import mpitune`` finds this checkout.
"""

from __future__ import annotations

import argparse
import math
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from mpitune.offline.rank_time import RankTime, per_rank
from mpitune.store.reader import CacheData, read

# The phases compared, in the order a run goes through them (report's columns, less the rare ones).
# A phase shorter than this share of its rank's wall time is held to the tolerance of that share.
SMALL = 5
# ... and never to less than this, in seconds (see the module's doc).
PHASE_FLOOR_S = 0.05
PHASES = ("spec", "startup", "strategy", "compile", "verify", "benchmark", "calibrate", "confirm", "write", "wait")


@dataclass(frozen=True)
class Fidelity:
    """One file's real run and its replay: walls, and each rank's phase sums."""

    name: str
    ranks: int
    workers: int
    racing: str
    real_s: float
    simulated_s: float
    real: list[RankTime]
    simulated: list[RankTime]
    refilled: bool = False  # the run's ranks were refilled: phases are held summed over them

    @property
    def ratio(self) -> float:
        return self.simulated_s / self.real_s if self.real_s > 0 else math.nan

    def off(self, tolerance: float) -> list[str]:
        """What is further from the real run than ``tolerance`` allows (see the module's doc)."""
        found = []
        if not abs(self.ratio - 1) <= tolerance:
            found.append(f"{self.name}: wall {self.simulated_s:.2f} s simulated, {self.real_s:.2f} s real")
        for real, sim in zip(self.real, self.simulated):
            if not abs(sim.wall_s - real.wall_s) <= tolerance * real.wall_s:
                found.append(
                    f"{self.name}: rank {real.rank} wall {sim.wall_s:.3f} s simulated, {real.wall_s:.3f} s real"
                )
        groups = (
            [(self.real, self.simulated)]
            if self.refilled
            else list(zip(([r] for r in self.real), ([s] for s in self.simulated)))
        )
        for reals, sims in groups:
            who = "all ranks" if self.refilled else f"rank {reals[0].rank}"
            wall_s = sum(r.wall_s for r in reals)
            for phase in PHASES[:-1]:  # not the wait: what is left of the rank's wall, held with it
                r_s = sum(r.phases.get(phase, 0.0) for r in reals)
                s_s = sum(s.phases.get(phase, 0.0) for s in sims)
                if abs(s_s - r_s) > max(tolerance * max(r_s, wall_s / SMALL), PHASE_FLOOR_S):
                    found.append(f"{self.name}: {who} {phase} {s_s:.3f} s simulated, {r_s:.3f} s real")
        return found


def replay_args(data: CacheData, path: str, out: str) -> list[str]:
    """``python -m mpitune replay``'s arguments that repeat the run the file records."""
    run = data.runs[0]
    args = ["replay", path, "--out", out, "--strategy", str(run["strategy"]), "--seed", str(int(run["seed"]))]
    if int(run["max_fevals"]) >= 0:
        args += ["--max-fevals", str(int(run["max_fevals"]))]
    if math.isfinite(float(run["time_limit_s"])):
        args += ["--time-limit", repr(float(run["time_limit_s"]))]
    command = shlex.split(str(run["command"]))
    if "--batch-size" in command:
        args += ["--batch-size", command[command.index("--batch-size") + 1]]
    if not len(data.confirmed):
        args += ["--confirm", "0"]
    if int(run["ranks"]) > 1 and not (data.retimed["purpose"] == "calibrate").any():
        args += ["--no-calibrate"]
    return args


def mpiexec() -> list[str]:
    local = Path(sys.executable).parent / "mpiexec"
    found = os.environ.get("MPITUNE_MPIEXEC") or (str(local) if local.exists() else shutil.which("mpiexec"))
    if not found:
        raise SystemExit("fidelity.py: no mpiexec found (MPITUNE_MPIEXEC names one)")
    return shlex.split(found)


def fidelity(path: str, out: str) -> Fidelity | str:
    """The file's run and its replay into ``out``; or why it was skipped. A replay that fails
    raises RuntimeError."""
    from mpitune.store import measured

    data = read(path)
    if len(data.runs) != 1:
        return f"{path}: skipped, {len(data.runs)} runs (a resumed file's runs had different settings)"
    recorded = measured.load(path).recorded
    ranks = int(data.runs[0]["ranks"])
    command = [*mpiexec(), "-n", str(ranks), sys.executable, "-m", "mpitune", *replay_args(data, path, out)]
    proc = subprocess.run(command, capture_output=True, text=True, timeout=600)
    if proc.returncode != 0:
        raise RuntimeError(f"{path}: the replay failed ({proc.returncode}): {proc.stderr.strip()[-400:]}")
    replayed = read(out)
    return Fidelity(
        Path(path).name,
        ranks,
        recorded.compile_workers,
        "as recorded" if recorded.raced else "off",
        float(data.runs["wall_s"][0]),
        float(replayed.runs["wall_s"][0]),
        per_rank(data),
        per_rank(replayed),
        ranks > 1 and data.schedule_of(int(data.runs[0]["run"])) == "refill",
    )


def print_tables(results: list[Fidelity]) -> None:
    print("| file | ranks | compile workers | racing | real wall s | simulated wall s | simulated / real |")
    print("|---|---|---|---|---|---|---|")
    for f in results:
        cells = (f.name, f.ranks, f.workers, f.racing, f"{f.real_s:.2f}", f"{f.simulated_s:.2f}", f"{f.ratio:.3f}")
        print("| " + " | ".join(map(str, cells)) + " |")
    print()
    print("per rank, seconds real / simulated:")
    print()
    print("| file | rank | wall | " + " | ".join(PHASES) + " |")
    print("|---|---|---|" + "---|" * len(PHASES))
    for f in results:
        for real, sim in zip(f.real, f.simulated):
            cells = [f"{real.wall_s:.2f} / {sim.wall_s:.2f}"]
            cells += [f"{real.phases.get(p, 0.0):.2f} / {sim.phases.get(p, 0.0):.2f}" for p in PHASES]
            print(f"| {f.name} | {real.rank} | " + " | ".join(cells) + " |")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("files", nargs="+", help="mpitune results files of real runs")
    parser.add_argument("--check", action="store_true", help="exit 1 when a replay is off by more than the tolerance")
    parser.add_argument("--tolerance", type=float, default=0.1, help="relative tolerance (default 0.1)")
    args = parser.parse_args(argv)
    print("command: python " + " ".join(shlex.quote(a) for a in ["benchmarks/fidelity.py", *(argv or sys.argv[1:])]))
    results, off = [], []
    with tempfile.TemporaryDirectory(prefix="mpitune-fidelity-") as workdir:
        for number, path in enumerate(args.files):
            try:
                found = fidelity(path, os.path.join(workdir, f"{number}.replay.h5"))
            except RuntimeError as exc:
                print(exc)
                off.append(str(exc))
                continue
            if isinstance(found, str):
                print(found)
                continue
            results.append(found)
            off += found.off(args.tolerance)
    print_tables(results)
    if args.check and off:
        print("\noff by more than the tolerance:\n" + "\n".join(off))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
