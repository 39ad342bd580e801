"""A job of several device models (scheduling/devices/models.py): the groups, the file names, and what the
leaders share. The sharing runs over an in-process link here; test_models_mpi.py runs real jobs."""

from __future__ import annotations

import math
from collections import defaultdict
from typing import Any

import numpy as np
import pytest

from mpitune.model.problem import Devices, RunSettings
from mpitune.model.result import Scored, Status
from mpitune.model.searchspace import SearchSpace
from mpitune.scheduling.devices import models
from mpitune.scheduling.messages import Placement

A100, A4000 = "NVIDIA A100-PCIE-40GB", "NVIDIA RTX A4000"


def placements(*devices: str) -> list[Placement]:
    return [Placement(f"node{r}", d, f"GPU 0, PCI {r}", 100 + r, 4) for r, d in enumerate(devices)]


def test_groups_follow_the_device_models_in_the_order_their_first_rank_comes():
    each = RunSettings(devices=Devices.EACH)
    groups = models.Groups.of(each, placements(A4000, A100, A4000, A100, A100))
    assert groups is not None
    assert groups.models == (A4000, A100)
    assert groups.of_rank == (0, 1, 0, 1, 1)
    assert [p.host for p in groups.placements_of(1)] == ["node1", "node3", "node4"]
    assert groups.describe() == f"{A4000}: rank(s) 0, 2; {A100}: rank(s) 1, 3, 4"


def test_one_model_or_devices_one_is_one_run():
    assert models.Groups.of(RunSettings(devices=Devices.EACH), placements(A100, A100)) is None
    assert models.Groups.of(RunSettings(), placements(A100, A4000)) is None  # refused later, as before


def test_each_model_has_its_own_file_named_after_it():
    assert models.model_path("/runs/conv.h5", A100) == "/runs/conv.NVIDIA_A100-PCIE-40GB.h5"
    assert models.model_path("conv.h5", "NVIDIA RTX A4000 (replayed)") == "conv.NVIDIA_RTX_A4000.h5"
    assert models.model_path("conv", "AMD Instinct MI50/MI60") == "conv.AMD_Instinct_MI50_MI60.h5"
    assert models.model_path("a.h5", "///") == "a.device.h5"


class Wires:
    """The leaders' messages in one process: what each sent, in order, until taken."""

    def __init__(self) -> None:
        self.queues: dict[int, list[tuple[int, Any]]] = defaultdict(list)
        self.left: set[int] = set()

    def end(self, me: int) -> _End:
        return _End(self, me)


class _End:
    def __init__(self, wires: Wires, me: int):
        self.wires, self.me = wires, me

    def send(self, peer: int, message: Any) -> None:
        self.wires.queues[peer].append((self.me, message))

    def arrived(self) -> list[tuple[int, Any]]:
        taken, self.wires.queues[self.me] = self.wires.queues[self.me], []
        return taken

    def leave(self) -> None:
        self.wires.left.add(self.me)


def space() -> SearchSpace:
    return SearchSpace.build({"x": [1, 2, 4, 8, 16, 32], "y": [1, 2, 3, 4, 5, 6]})


def scored(space: SearchSpace, i: int, time_ms: float, status: Status = Status.OK) -> Scored:
    return Scored(config_id=i, status=status, time_ms=time_ms, config=space.config(i), scores=(time_ms,))


def test_a_leader_learns_the_others_results_once_it_has_enough_of_its_own():
    s = space()
    groups = models.Groups((A100, A4000), (0, 1), tuple(placements(A100, A4000)))
    wires = Wires()
    paths = groups.paths("conv.h5")
    a100 = models.Peers(wires.end(0), 0, groups, paths, s, "conv")
    a4000 = models.Peers(wires.end(1), 1, groups, paths, s, "conv")
    a100.share([scored(s, i, 1.0 + i) for i in range(20)] + [scored(s, 20, math.nan, Status.COMPILE_ERROR)])
    assert a100.trade() is None  # it has heard nothing yet
    a4000.share([scored(s, i, 2.0) for i in range(models.OWN_RESULTS_FIRST - 1)])
    assert a4000.trade() is None  # 15 of its own: not yet
    a4000.share([scored(s, 30, 3.0)])
    prior = a4000.trade()
    assert prior is not None
    (source,) = prior.sources
    assert (source.device_name, source.path, source.matched) == (A100, paths[0], 20)
    assert prior.time_ms[0][5] == 6.0 and math.isnan(prior.time_ms[0][20]) and math.isnan(prior.time_ms[0][30])
    assert a4000.trade() is None  # nothing new since
    learned = a100.trade()
    assert learned is not None and learned.sources[0].device_name == A4000
    assert learned.sources[0].matched == 16 and learned.time_ms[0][30] == 3.0


def test_sources_stay_the_same_before_any_result_arrives_from_a_third_model():
    s = space()
    groups = models.Groups(("a", "b", "c"), (0, 1, 2), tuple(placements("a", "b", "c")))
    wires = Wires()
    paths = groups.paths("k.h5")
    first, second = (models.Peers(wires.end(g), g, groups, paths, s, "k") for g in (0, 1))
    second.share([scored(s, i, 1.0) for i in range(3)])
    second.trade()
    first.share([scored(s, i, 1.0) for i in range(models.OWN_RESULTS_FIRST)])
    prior = first.trade()
    assert prior is not None
    assert [x.device_name for x in prior.sources] == ["b", "c"]
    assert [x.matched for x in prior.sources] == [3, 0]
    assert np.isnan(prior.time_ms[1]).all()


@pytest.mark.parametrize("rank,index", [(0, 0), (1, 1), (2, 0), (5, 1)])
def test_a_leader_searches_the_file_its_ranks_replay(rank, index, shared_caches, tmp_path):
    from mpitune.cli.loading import replay_of_args
    from mpitune.cli.parsers import replay_parser

    files = [str(shared_caches / "convolution_A100.json.gz"), str(shared_caches / "convolution_A4000.json.gz")]
    problem, _ = replay_of_args(replay_parser().parse_args([*files, "--output", str(tmp_path / "x.h5")]))
    own = models.own_problem(problem, rank)
    assert own.kernel.replay is not None and own.kernel.replay.path == files[index]


def test_a_peer_keeps_each_configuration_s_best_time_and_ignores_values_outside_the_space():
    s = space()
    groups = models.Groups(("a", "b"), (0, 1), tuple(placements("a", "b")))
    wires = Wires()
    paths = groups.paths("k.h5")
    first, second = (models.Peers(wires.end(g), g, groups, paths, s, "k") for g in (0, 1))
    first.share([scored(s, 3, 5.0), scored(s, 4, 2.0)])
    first.trade()
    first.share([scored(s, 3, 4.0), scored(s, 4, 9.0)])  # measured again (a resumed run shares its file)
    first.trade()
    wires.end(0).send(1, models._Measured(((64, 1),), (1.0,)))  # x = 64 is no value of this space
    second.share([scored(s, i, 1.0) for i in range(10, 10 + models.OWN_RESULTS_FIRST)])
    prior = second.trade()
    assert prior is not None
    assert (prior.time_ms[0][3], prior.time_ms[0][4]) == (4.0, 2.0)
    assert prior.sources[0].matched == 2


def test_the_portable_candidates_wait_for_every_search_and_every_leader_ranks_the_same():
    s = space()
    groups = models.Groups(("a", "b", "c"), (0, 1, 2), tuple(placements("a", "b", "c")))
    wires = Wires()
    paths = groups.paths("k.h5")
    a, b, c = (models.Peers(wires.end(g), g, groups, paths, s, "k") for g in (0, 1, 2))
    a.share([scored(s, 0, 1.0), scored(s, 1, 1.2), scored(s, 2, 5.0), scored(s, 3, 0.9)])
    b.share([scored(s, 0, 2.0), scored(s, 1, 2.0), scored(s, 2, 2.0), scored(s, 7, 1.5)])
    c.share([scored(s, 0, 3.0), scored(s, 1, 3.3), scored(s, 2, math.nan, Status.RUNTIME_ERROR)])
    a.searched()
    assert a.portable(2) is None  # b and c still search
    b.searched()
    assert a.portable(2) is None and b.portable(2) is None
    c.searched()
    # Measured on every model: ids 0 and 1, both at a worst ratio of 4/3 (id 2 failed on c). Then
    # each model's own best not among them: a's id 3, b's id 7 (c's is id 0).
    ranked = a.portable(2)
    assert ranked is not None and ranked[2:] == [3, 7]
    assert set(ranked[:2]) == {0, 1}
    assert b.portable(2) == ranked and c.portable(2) == ranked
    assert c.own_seen[2] and not c.own_seen[3] and math.isnan(c.own_ms[2])


def test_a_model_that_ended_without_a_search_counts_as_searched():
    s = space()
    groups = models.Groups(("a", "b"), (0, 1), tuple(placements("a", "b")))
    wires = Wires()
    paths = groups.paths("k.h5")
    a = models.Peers(wires.end(0), 0, groups, paths, s, "k")
    a.share([scored(s, 4, 1.0), scored(s, 5, 2.0)])
    a.searched()
    assert a.portable(3) is None
    wires.end(1).send(0, models._Done())  # its file was refused: its leader left at once
    assert a.portable(3) == [4, 5]


@pytest.mark.parametrize("schedule", ["refill", "batches"])
def test_a_model_whose_search_ends_first_holds_its_ranks_then_measures_the_candidates_it_lacks(schedule, tmp_path):
    """Two ranks of one model, in this process, beside another model's leader played by the test:
    the search ends first, so rank 1 is told to hold; once the other model's search ends, the
    portable candidates this model never measured are measured (not told to its search) and
    timed again with the confirmation."""
    from unittest import mock

    import h5py

    from mpitune.scheduling.handouts import Handouts
    from mpitune.scheduling.messages import Order
    from mpitune.scheduling.run_record import open_run
    from tests.scheduling.test_manager import Ranks

    ranks = Ranks(tmp_path, 2, strategy="random_sample", max_fevals=10, devices="each", portable=2, schedule=schedule)
    s = ranks.setup.space
    groups = models.Groups(("Test GPU", "other"), (0, 1), tuple(placements("Test GPU", "other")))
    wires = Wires()
    paths = groups.paths(ranks.cache_path)
    other = models.Peers(wires.end(1), 1, groups, paths, s, "k")
    # The other model: fastest where this one is slowest (x small), so the portable candidates
    # are configurations this model's search is unlikely to have measured.
    other.share([scored(s, i, float(s.config(i)["x"] * s.config(i)["y"])) for i in range(len(s))])
    peers = models.Peers(wires.end(0), 0, groups, paths, s, "k")
    placed = [Placement("host", b.device_name, "", 1, 0) for b in ranks.backends]
    manager, error = open_run(ranks.setup, placed, ranks.clock, 0.0, "test", peers)
    assert error is None and manager is not None
    sent: list[dict[int, Order]] = []
    hand_outs = Handouts.hand_outs

    def watched(handouts: Handouts) -> list[dict[int, Order]]:
        made = hand_outs(handouts)
        sent.extend(made)
        if any(o.hold for orders in made for o in orders.values()):
            other.searched()  # the other model's search ends while this one holds
        return made

    with mock.patch.object(Handouts, "hand_outs", watched):
        assert ranks.run(manager).name == "MAX_FEVALS"
    holds = [i for i, orders in enumerate(sent) if any(o.hold for o in orders.values())]
    assert len(holds) == 1 and list(sent[holds[0]]) == [1]  # rank 1 alone: rank 0 leads
    assert manager.portable is not None and len(manager.portable) >= 2
    searched = {i for orders in sent[: holds[0]] for o in orders.values() for i in o.ids}
    lacking = [i for i in manager.portable if i not in searched]
    assert lacking, "the other model's candidates were all measured here already"
    measured_after = [i for orders in sent[holds[0] + 1 :] for o in orders.values() for i in o.ids]
    assert sorted(measured_after) == sorted(lacking)
    assert not set(lacking) & set(manager.strategy.values)  # measured, never told to the search
    with h5py.File(ranks.cache_path, "r") as f:
        in_file = {int(i) for i in f["results"]["config_id"]}
        confirmed = {int(i) for i in f["confirmed"]["config_id"]}
    assert set(lacking) <= in_file
    passed = {i for i in manager.portable if math.isfinite(peers.own_ms[i])}
    assert passed and passed <= confirmed


def test_a_signal_ends_the_hold(tmp_path):
    """A stop asked for while the ranks hold (Slurm's warning, say) goes out at once: the run ends
    as ``signal``, resumable, without waiting for the other model's search."""
    from unittest import mock

    from mpitune.scheduling.handouts import Handouts
    from mpitune.scheduling.messages import Order, StopReason
    from mpitune.scheduling.run_record import open_run
    from tests.scheduling.test_manager import Ranks

    ranks = Ranks(tmp_path, 2, strategy="random_sample", max_fevals=6, devices="each", portable=2, schedule="refill")
    s = ranks.setup.space
    groups = models.Groups(("Test GPU", "other"), (0, 1), tuple(placements("Test GPU", "other")))
    peers = models.Peers(Wires().end(0), 0, groups, groups.paths(ranks.cache_path), s, "k")
    placed = [Placement("host", b.device_name, "", 1, 0) for b in ranks.backends]
    manager, error = open_run(ranks.setup, placed, ranks.clock, 0.0, "test", peers)
    assert error is None and manager is not None
    hand_outs = Handouts.hand_outs
    held = []

    def watched(handouts: Handouts) -> list[dict[int, Order]]:
        made = hand_outs(handouts)
        if any(o.hold for orders in made for o in orders.values()):
            held.append(True)
            manager.request_stop(StopReason.SIGNAL)  # the other model never ends its search
        return made

    with mock.patch.object(Handouts, "hand_outs", watched):
        assert ranks.run(manager) is StopReason.SIGNAL
    assert held == [True] and manager.portable is None
