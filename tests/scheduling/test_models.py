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
