"""The confirmation's tables: written by rank 0's Cache, read back with the reader and plain h5py,
and the search's rows left as they were."""

import h5py
import numpy as np
from conftest import IDENTITY, PARAMS, info
from records import append

from mpitune.model.confirmation import judge
from mpitune.model.result import Result
from mpitune.model.work import Launch
from mpitune.offline.confirmation import latest
from mpitune.store.cache import Cache
from mpitune.store.reader import read

CONFIG = {"bs": 32, "kind": "b", "f": 0.5}


def launches(ranks: int, rounds: int, times_ms: dict[int, float], bias: list[float]) -> list[tuple[int, Launch]]:
    rng = np.random.default_rng(4)
    return [
        (rank, Launch(config_id, r, t * bias[rank] * (1 + 0.002 * rng.standard_normal())))
        for rank in range(ranks)
        for r in range(rounds)
        for config_id, t in times_ms.items()
    ]


def verdict_of(rows: list[tuple[int, Launch]]):
    columns = list(zip(*[(rank, x.config_id, x.round, x.time_ms) for rank, x in rows]))
    return judge(*(np.array(c) for c in columns))


def test_a_confirmation_is_kept_beside_the_search_and_read_back(tmp_path):
    path = tmp_path / "c.h5"
    cache = Cache(str(path), IDENTITY, PARAMS, iterations=3)
    cache.start_run(info(), ["h0", "h1"], ["d0", "d1"], [10, 11])
    results = [Result(i, "ok", time_ms=1.0 + i, times_ms=(1.0 + i,) * 3, rank=0, batch=0) for i in range(3)]
    append(cache, results, [CONFIG] * 3)
    with h5py.File(path, "r", swmr=True) as f:
        before = f["results"][...]
    assert cache.confirmations().verdict is None
    rows = launches(2, 6, {0: 1.0, 1: 1.0005, 2: 1.5}, [1.0, 1.06])
    verdict = verdict_of(rows)
    assert verdict is not None and verdict.winner in (0, 1)
    cache.append_confirmation(4, rows, verdict, 10.0, 12.5)
    assert {c.config_id for c in cache.confirmations().verdict.candidates} == {0, 1, 2}
    cache.finish_run(25.0, "finished", 3)
    cache.close()

    with h5py.File(path, "r") as f:
        assert f["results"][...].tobytes() == before.tobytes()  # the search's rows are untouched
        retimed = f["retimed"][...]
        assert len(retimed) == 2 * 6 * 3 and set(retimed["purpose"]) == {b"confirm"} and set(retimed["batch"]) == {4}
        confirmed = f["confirmed"][...]
        assert confirmed["winner"].tolist().count(1) == 1 and confirmed["run"].tolist() == [0, 0, 0]
        assert sorted(confirmed["config_id"][confirmed["tied"] == 1].tolist() + [verdict.winner]) == [0, 1]
        factors = f["device_factors"][...]
        assert abs(factors["factor"][1] / factors["factor"][0] - 1.06) < 0.005

    confirmation, cost, calibration = latest(read(str(path)))
    assert confirmation is not None and cost is not None
    assert confirmation.winner == {"bs": 32, "kind": "b", "f": 0.5}
    assert confirmation.ci_ms[0] <= confirmation.winner_ms <= confirmation.ci_ms[1]
    assert len(confirmation.tied) == 1
    assert (cost.candidates, cost.launches, cost.seconds, cost.share_of_run) == (3, 36, 2.5, 0.1)
    assert [(d.rank, d.host, d.device) for d in calibration] == [(0, "h0", "d0"), (1, "h1", "d1")]
    assert [d.flagged for d in calibration] == [False, True]  # 6 % apart, far beyond their noise


def test_launches_without_a_verdict_are_kept_and_judge_nothing(tmp_path):
    path = tmp_path / "c.h5"
    cache = Cache(str(path), IDENTITY, PARAMS, iterations=3)
    cache.start_run(info(), ["h0"], ["d0"], [10])
    cache.append_confirmation(0, launches(1, 2, {0: 1.0}, [1.0]), None, 1.0, 2.0)
    assert cache.confirmations().verdict is None
    cache.close()
    data = read(str(path))
    assert len(data.retimed) == 2 and not len(data.confirmed)
    assert latest(data) == (None, None, [])
