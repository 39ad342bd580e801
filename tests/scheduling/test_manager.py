"""Rank 0's Manager, and the whole loop, in one process without mpiexec: a real strategy, a
real HDF5 file, and real results from the replay backend answering from a Kernel Tuner cache
written here.

The Manager's tests run the real rounds of rounds.py over a world of several ranks in this
process (transport.InProcessRanks): every rank has its own simulated clock, which catches up with
rank 0's at a scatter, and rank 0's with the latest rank at a gather.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Callable
from pathlib import Path
from unittest import mock

import h5py
import pytest
from conftest import heavy_imports

from mpitune import backends
from mpitune.errors import SpecError
from mpitune.exits import ExitCode
from mpitune.model.timeline import Clock, Timeline
from mpitune.scheduling import batching
from mpitune.scheduling import handouts as handouts_module
from mpitune.scheduling.faults.liveness import Watch
from mpitune.scheduling.handouts import Handouts, Recorded
from mpitune.scheduling.manager import Manager
from mpitune.scheduling.messages import Order, Placement, Report, StopReason
from mpitune.scheduling.prepare import prepare
from mpitune.scheduling.rank import measuring_timeline
from mpitune.scheduling.rounds import rounds
from mpitune.scheduling.run_record import finish, open_run
from mpitune.scheduling.transport import InProcessRanks, LocalTransport
from mpitune.spec.replay import replay_problem
from mpitune.spec.settings import Overrides
from mpitune.store import measured

X, Y = range(1, 9), range(1, 6)  # 40 configurations
Cost = Callable[[int, int], float]  # seconds of the configuration (x, y)
COMPILE_MS, BENCHMARK_MS = 400.0, 100.0  # every configuration takes 0.5 simulated seconds


def write_measured(path: Path, benchmark_s: Cost | None = None) -> Path:
    """A Kernel Tuner cache of 40 configurations, as Kernel Tuner writes it: x == 3 does not
    compile, the rest ran, the fastest at x=8, y=5; each benchmark took BENCHMARK_MS, or
    ``benchmark_s(x, y)`` seconds."""
    entries = {}
    for x in X:
        for y in Y:
            entry = {"x": x, "y": y, "compile_time": COMPILE_MS}
            if x == 3:
                entry["time"] = "CompilationFailedConfig"
                entry["compile_time"] = COMPILE_MS + BENCHMARK_MS
            else:
                t = 100.0 / (x * y)
                benchmark_ms = BENCHMARK_MS if benchmark_s is None else 1000 * benchmark_s(x, y)
                entry.update(time=t, times=[t, t, t], verification_time=0.0, benchmark_time=benchmark_ms)
            entries[f"{x},{y}"] = entry
    doc = {
        "device_name": "Test GPU",
        "kernel_name": "k",
        "problem_size": [64],
        "tune_params_keys": ["x", "y"],
        "tune_params": {"x": list(X), "y": list(Y)},
        "objective": "time",
        "cache": entries,
    }
    path.write_text(json.dumps(doc))
    return path


class Ranks:
    """A run on ``ranks`` ranks in this process, each with its own replay backend and simulated
    clock, driven by the real rounds (scheduling/rounds.py) over ``InProcessRanks``. It keeps
    every hand-out of the search as rank 0 made it (one order per rank, an empty one for a rank
    it left out), and calls ``before_record[n]`` (if any) with the Manager before the n-th
    report is recorded."""

    def __init__(self, tmp_path: Path, ranks: int, measured_cost: Cost | None = None, **overrides):
        source = write_measured(tmp_path / "measured.json", measured_cost)
        self.cache_path = str(tmp_path / "out.h5")
        overrides.setdefault("schedule", "batches")  # what these tests watch: refill's are test_refill.py's
        given = Overrides(cache_path=self.cache_path, **overrides)
        problem, settings = replay_problem(measured.load(str(source)), given, overrides.get("strategy"))
        self.setup = prepare(problem, settings)
        self.backends = [backends.create(problem.kernel, str(tmp_path), rank) for rank in range(ranks)]
        self.timelines = [Timeline(Clock(simulated=True)) for _ in range(ranks)]
        self.orders: list[list[Order]] = []  # every hand-out of the search, rank by rank
        self.before_record: dict[int, Callable[[Manager], None]] = {}
        self.reports = 0

    @property
    def batches(self) -> list[list[int]]:
        """The ids of every hand-out, in order."""
        return [[i for order in orders for i in order.ids] for orders in self.orders]

    @property
    def clock(self) -> Clock:
        return self.timelines[0].clock  # rank 0's, which the Manager reads

    def open(self) -> Manager:
        placements = [Placement("host", b.device_name, "", os.getpid(), 0) for b in self.backends]
        manager, error = open_run(self.setup, placements, self.clock, 0.0, "test")
        assert error is None and manager is not None
        return manager

    def run(self, manager: Manager) -> StopReason:
        hand_outs, record = Handouts.hand_outs, Handouts.record

        def watched_hand_outs(handouts: Handouts) -> list[dict[int, Order]]:
            made = hand_outs(handouts)
            for orders in made:
                first = next(iter(orders.values()))
                if first.stop is None and first.retime is None:
                    empty = Order(first.now_s, first.batch)
                    self.orders.append([orders.get(r, empty) for r in range(len(self.backends))])
            return made

        def watched_record(handouts: Handouts, rank: int, report: Report) -> Recorded:
            self.reports += 1
            if self.reports in self.before_record:
                self.before_record[self.reports](manager)
            return record(handouts, rank, report)

        world = InProcessRanks(self.backends, self.timelines)
        measuring = measuring_timeline(self.timelines[0]) if len(self.backends) > 1 else None
        with (
            mock.patch.object(Handouts, "hand_outs", watched_hand_outs),
            mock.patch.object(Handouts, "record", watched_record),
        ):
            stop = rounds(world, manager, self.backends[0], self.timelines[0], None, Watch(), lambda: None, measuring)
        finish(manager, self.timelines[0])
        return stop


def recorded(path: str) -> tuple[list[int], list[tuple[str, int]]]:
    """The config ids in the file, and each run's (status, measured)."""
    with h5py.File(path, "r") as f:
        return (
            [int(i) for i in f["results"]["config_id"]],
            [(r["status"].decode(), int(r["measured"])) for r in f["runs"]],
        )


def test_stop_reasons_keep_their_file_values_and_exit_codes():
    assert [r.value for r in StopReason] == [
        "finished",
        "max_fevals",
        "time_limit",
        "signal",
        "device_error",
        "spec_error",
        "silent_rank",
        "file_lost",
    ]
    assert {r for r in StopReason if r.resumable} == {
        StopReason.TIME_LIMIT,
        StopReason.SIGNAL,
        StopReason.DEVICE_ERROR,
        StopReason.SILENT_RANK,
    }
    assert [r.exit_code for r in StopReason] == [
        0,
        0,
        ExitCode.RESUMABLE,
        ExitCode.RESUMABLE,
        ExitCode.RESUMABLE,
        ExitCode.USER_ERROR,
        ExitCode.RESUMABLE,
        ExitCode.CANNOT_WRITE,
    ]


@pytest.mark.parametrize("strategy", ["brute_force", "genetic_algorithm"])
def test_every_configuration_is_recorded_exactly_once(tmp_path, capsys, strategy):
    ranks = Ranks(tmp_path, 3, strategy=strategy)
    manager = ranks.open()
    assert ranks.run(manager) is StopReason.FINISHED
    ids, runs = recorded(ranks.cache_path)
    assert sorted(ids) == list(range(40))
    assert runs == [("finished", 40)]
    assert sorted(i for batch in ranks.batches for i in batch) == list(range(40))
    out = capsys.readouterr().out
    assert "mpitune: best: 2.5 ms (x=8, y=5)" in out
    assert "mpitune: 40 configurations measured in" in out and "simulated s (finished)" in out
    assert "stopped early" not in out


def test_max_fevals_stops_after_that_many_configurations(tmp_path):
    ranks = Ranks(tmp_path, 2, strategy="random_sample", max_fevals=7, seed=3)
    manager = ranks.open()
    assert manager.batch_size == 64  # random sampling knows its order: guided batches
    stop = ranks.run(manager)
    assert stop is StopReason.MAX_FEVALS and stop.exit_code == 0
    # One per rank while no cost is known (the second batch goes out before the first is
    # recorded: two are in flight), then what the budget leaves.
    assert [len(b) for b in ranks.batches] == [2, 2, 3]
    ids, runs = recorded(ranks.cache_path)
    assert len(ids) == len(set(ids)) == 7 and runs == [("max_fevals", 7)]


def test_time_limit_hands_out_no_batch_that_would_end_after_it(tmp_path, capsys):
    # Two ranks, one configuration each per batch: every batch takes 0.5 simulated seconds.
    # The search's time alone: no reference timed between batches (devices/calibrating.py), and
    # every configuration timed in full (racing would stop the slower ones sooner).
    ranks = Ranks(tmp_path, 2, strategy="brute_force", batch_size=2, time_limit_s=5.2, calibrate=False, racing=False)
    manager = ranks.open()
    stop = ranks.run(manager)
    assert stop is StopReason.TIME_LIMIT and stop.exit_code == ExitCode.RESUMABLE
    # Two batches go out at 0, then one as each is recorded: at 0.5, ... 4.0. At 4.5 the next
    # would start after the one in flight, at 5.0, and end at 5.5, after the limit.
    assert [orders[0].now_s for orders in ranks.orders] == pytest.approx([0.0] + [0.5 * b for b in range(9)])
    assert ranks.clock.now() == pytest.approx(5.0)
    ids, runs = recorded(ranks.cache_path)
    assert sorted(ids) == list(range(20)) and runs == [("time_limit", 20)]
    assert "stopped early (time_limit); run the same command again to resume (exit code 75)" in capsys.readouterr().out


def test_a_batch_dealt_by_cost_shrinks_to_end_within_the_time_limit(tmp_path):
    # Every configuration takes 0.5 simulated s. The first two batches (one per rank, no cost
    # known yet) go out at 0; the first ends at 0.5 s, the second at 1.0 s. A full batch (36
    # left, 18 per rank) would end at 10 s, so the next holds what fits in the 1.6 s left on two
    # ranks after the 0.5 s of the batch in flight: 4, ending at 2.0 s; then nothing fits.
    # The search's time alone: no reference timed between batches (devices/calibrating.py).
    ranks = Ranks(tmp_path, 2, strategy="brute_force", time_limit_s=2.1, calibrate=False)
    manager = ranks.open()
    stop = ranks.run(manager)
    assert stop is StopReason.TIME_LIMIT
    assert [len(b) for b in ranks.batches] == [2, 2, 4]
    assert ranks.clock.now() == pytest.approx(2.0)


def test_guided_batches_start_with_one_per_rank_then_take_the_batch_size(tmp_path):
    ranks = Ranks(tmp_path, 2)  # brute force, batch size by default: 64, guided
    manager = ranks.open()
    assert manager.batch_size == 64
    ranks.run(manager)
    # Two batches in flight: the second goes out before any cost is known.
    assert [len(b) for b in ranks.batches] == [2, 2, 36]
    assert manager.costs is not None and manager.costs.learned == 40


def test_a_strategy_that_learns_from_every_result_gets_one_per_rank_the_costliest_to_the_ranks_free_first(tmp_path):
    # Configurations of 0.4 s to 2.4 s (compile + benchmark). With two batches in flight, a batch
    # is dealt while the one before it still runs: dealt by predicted cost and by when each rank
    # will be free, the search ends no later than dealt blind (interleaved), with the same
    # configurations asked. (Before rank 0 measured beside its hand-outs, it was always free
    # last, and by cost saved 5 %; now 1 %.)
    walls, asked = {}, {}
    for blind in (False, True):
        (tmp_path / str(blind)).mkdir()
        ranks = Ranks(tmp_path / str(blind), 4, lambda x, y: 0.05 * x * y, strategy="genetic_algorithm", max_fevals=32)
        manager = ranks.open()
        assert manager.costs is not None
        if blind:
            manager.costs = None
        ranks.run(manager)
        assert [len(b) for b in ranks.batches] == [4] * 8
        walls[blind], asked[blind] = ranks.clock.now(), [sorted(b) for b in ranks.batches]
    assert asked[False] == asked[True]
    assert walls[False] < walls[True]


def test_dealing_by_cost_records_every_configuration_once(tmp_path, monkeypatch):
    dealt = []

    def spy(ids, cost_s, ranks, busy_s):
        dealt.append(list(ids))
        return batching.deal_by_cost(ids, cost_s, ranks, busy_s)

    monkeypatch.setattr(handouts_module, "deal_by_cost", spy)
    ranks = Ranks(tmp_path, 3, strategy="brute_force", batch_size=6, measured_cost=lambda x, y: 0.1 * x * y)
    manager = ranks.open()
    ranks.run(manager)
    ids, _ = recorded(ranks.cache_path)
    assert sorted(ids) == list(range(40))
    # Batches 0 and 1 go out before any cost is known and are dealt blind; from then on each
    # batch is dealt by cost.
    assert [sorted(d) for d in dealt] == [sorted(b) for b in ranks.batches[2:]]
    # What was measured last is dealt evenly: the predicted costs differ up to 40 times.
    last = ranks.orders[-2]
    work_s = [sum(0.1 * manager.space.config(i)["x"] * manager.space.config(i)["y"] for i in o.ids) for o in last]
    assert max(work_s) - min(work_s) <= 0.1 * 8 * 5


def test_a_stop_file_stops_after_the_batches_in_flight(tmp_path, caplog, capsys):
    stop_file = tmp_path / "stop"
    ranks = Ranks(tmp_path, 2, batch_size=4, stop_file=str(stop_file))
    manager = ranks.open()
    # Made as batch 1's first report is recorded: batch 2 went out once batch 0 was complete,
    # and the next hand-out finds the file.
    ranks.before_record[3] = lambda _: stop_file.touch()
    with caplog.at_level(logging.WARNING):
        stop = ranks.run(manager)
    assert stop is StopReason.SIGNAL and stop.exit_code == ExitCode.RESUMABLE
    assert f"found {stop_file}: finishing, then stopping" in caplog.text
    # Nothing more is handed out; what the ranks held is measured and recorded.
    ids, runs = recorded(ranks.cache_path)
    assert len(ranks.orders) == 3
    assert sorted(ids) == sorted(i for b in ranks.batches for i in b) and runs == [("signal", 12)]
    assert "(signal); results in" in capsys.readouterr().out


def test_a_resumed_manager_reads_the_file_and_hands_out_only_what_is_not_recorded(tmp_path, caplog):
    first = Ranks(tmp_path, 2, strategy="genetic_algorithm", max_fevals=9, seed=5)
    assert first.run(first.open()) is StopReason.MAX_FEVALS
    before, _ = recorded(first.cache_path)
    second = Ranks(tmp_path, 3, strategy="genetic_algorithm", seed=5)
    with caplog.at_level(logging.INFO):
        manager = second.open()
    assert manager.known == 9
    assert "resuming the saved state of strategy genetic_algorithm" in caplog.text
    assert second.run(manager) is StopReason.FINISHED
    handed_out = [i for batch in second.batches for i in batch]
    assert not set(handed_out) & set(before)
    ids, runs = recorded(first.cache_path)
    assert sorted(ids) == list(range(40)) and runs == [("max_fevals", 9), ("finished", 31)]


def test_a_lost_device_stops_the_run_and_a_rerun_measures_what_it_lost(tmp_path, caplog):
    ranks = Ranks(tmp_path, 2, batch_size=8)
    manager = ranks.open()
    # Rank 1's device is lost during its first configuration of batch 1 (its fifth): it stops its
    # chunk there.
    backend = ranks.backends[1]
    measure, calls = backend.run, []

    def run_and_lose(*args, **kwargs):
        result = measure(*args, **kwargs)
        calls.append(result.config_id)
        if len(calls) == 5:
            backend.fatal_error = "the CUDA context is lost"
        return result

    backend.run = run_and_lose
    with caplog.at_level(logging.ERROR):
        assert ranks.run(manager) is StopReason.DEVICE_ERROR
    assert "rank 1 (host): the CUDA context is lost" in caplog.text
    # Rank 1 measured nothing after the lost configuration, of batch 1 or of what it held next.
    lost = set(ranks.orders[1][1].ids[1:]) | {i for orders in ranks.orders[2:] for i in orders[1].ids}
    assert len(lost) >= 3 and lost <= manager.unmeasured
    ids, runs = recorded(ranks.cache_path)
    handed_out = {i for b in ranks.batches for i in b}
    assert not manager.unmeasured & set(ids) and set(ids) | manager.unmeasured == handed_out
    assert runs == [("device_error", len(ids))] and len(ids) == len(handed_out) - len(manager.unmeasured)
    with h5py.File(ranks.cache_path, "r") as f:
        assert not f["searches"]["continuable"].any()  # the strategy counts the lost ones as seen: not kept

    rerun = Ranks(tmp_path, 2, batch_size=8)
    assert rerun.run(rerun.open()) is StopReason.FINISHED
    ids, _ = recorded(rerun.cache_path)
    assert sorted(ids) == list(range(40))


def test_a_cache_path_that_is_not_hdf5_is_refused_before_the_space_is_built(tmp_path):
    (tmp_path / "out.h5").write_text("not a cache")
    with pytest.raises(SpecError) as refused:
        Ranks(tmp_path, 1)
    assert refused.value.field == "cache"
    assert (tmp_path / "out.h5").read_text() == "not a cache"


def test_the_whole_loop_runs_in_one_process_on_a_world_of_one(tmp_path, capsys):
    from mpitune.scheduling.run import tune

    source, out = write_measured(tmp_path / "measured.json"), tmp_path / "out.h5"

    def load(cache_path: Path = out, **overrides):  # full timing: every configuration costs 0.5 s
        # The search's time alone: tests/scheduling/test_confirming.py times the confirmation.
        given = Overrides(cache_path=str(cache_path), racing=False, confirm=0, **overrides)
        return lambda: replay_problem(measured.load(str(source)), given, "brute_force")

    assert tune(load(max_fevals=10), "cmd", transport=LocalTransport()) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == (
        f"mpitune: tuning k (replay) on 1 rank(s): 40 configurations, 0 already in {out}, "
        f"strategy brute_force, batches of 32, compiling in turn"
    )
    assert lines[1].startswith("mpitune: simulated clock from a Kernel Tuner cache; assumed: ")
    # One rank has nothing to deal by cost: its first batch is whole.
    assert [line.split(",")[0] for line in lines[2:3]] == ["mpitune: batch 1: 10/10 configs"]
    assert lines[-1] == f"mpitune: 10 configurations measured in 5.0 simulated s (max_fevals); results in {out}"

    assert tune(load(time_limit_s=3.0), "cmd", transport=LocalTransport()) == ExitCode.RESUMABLE
    assert "(time_limit); results in" in capsys.readouterr().out
    ids, runs = recorded(str(out))
    assert len(ids) == len(set(ids)) and [status for status, _ in runs] == ["max_fevals", "time_limit"]

    (tmp_path / "other.h5").write_text("not a cache")
    refused = tune(load(tmp_path / "other.h5"), "cmd", transport=LocalTransport())
    assert refused == ExitCode.USER_ERROR
    assert capsys.readouterr().err.startswith(f"mpitune: error: {source}: cache: ")


def test_rank_zero_and_a_rank_need_no_mpi():
    modules = (
        "mpitune.scheduling.manager, mpitune.scheduling.prepare, mpitune.scheduling.run_record, "
        "mpitune.scheduling.rank, mpitune.scheduling.transport"
    )
    assert "mpi4py" not in heavy_imports(f"import {modules}")


def test_orders_carry_the_race_with_the_best_median_and_none_when_racing_is_off(tmp_path):
    ranks = Ranks(tmp_path, 2)
    manager = ranks.open()
    ranks.run(manager)
    # Batches 0 and 1 go out before anything is measured; batch 2 once batch 0 is recorded.
    assert all(o.race is not None and o.race.best_ms == float("inf") for o in ranks.orders[0] + ranks.orders[1])
    with h5py.File(ranks.cache_path, "r") as f:
        rows = f["results"][...]
    first = rows[(rows["batch"] == 0) & (rows["status"] == b"ok") & (rows["raced"] == 0)]
    best = float(first["time_ms"].min())
    assert all(o.race is not None and o.race.best_ms == best for o in ranks.orders[2])
    (tmp_path / "off").mkdir()
    off = Ranks(tmp_path / "off", 2, racing=False)
    off.run(off.open())
    assert all(o.race is None for orders in off.orders for o in orders)


@pytest.mark.parametrize("count, depth", [(1, 1), (3, 2)])
def test_in_batches_several_ranks_keep_two_batches_in_flight_one_rank_one(tmp_path, count, depth):
    ranks = Ranks(tmp_path, count, strategy="genetic_algorithm", max_fevals=12)
    manager = ranks.open()
    seen: list[tuple[list[int], list[int], int]] = []

    def in_flight(m: Manager) -> None:
        """What the Manager and the file hold in flight, and how many hand-outs are complete."""
        m.cache.write_pending()  # what waits in memory (store/cache.py) is in the file
        with h5py.File(ranks.cache_path, "r") as f:
            seen.append((sorted(m.in_flight), sorted({int(b) for b in f["in_flight"]["batch"]}), m.completed))

    # Before the first report of the first batch, and of the second.
    ranks.before_record.update({1: in_flight, count + 1: in_flight})
    assert ranks.run(manager) is StopReason.MAX_FEVALS
    # ``depth`` batches are in flight, the next one out once the oldest was recorded.
    assert seen == [
        (list(range(depth)), list(range(depth)), 0),
        (list(range(1, 1 + depth)), list(range(1, 1 + depth)), 1),
    ]
    assert not manager.in_flight and sum(len(b) for b in ranks.batches) == 12
