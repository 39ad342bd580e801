"""The confirmation's tables: written by rank 0's Cache, read back with the reader and plain h5py,
and the search's rows left as they were."""

import h5py
import numpy as np
from conftest import IDENTITY, PARAMS, info
from records import append

from mpitune.model.judging.confirmation import judge
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


def test_a_confirmation_cut_short_is_pending_with_what_it_owes_across_runs(tmp_path):
    """A stop left launches owed (``unmade`` rows): the file says what was made, what is owed,
    and from which round a resumed part goes on; the part that resumes it is chained to it, and
    one that owes nothing ends it."""
    path = tmp_path / "c.h5"
    cache = Cache(str(path), IDENTITY, PARAMS, iterations=3)
    cache.start_run(info(), ["h0", "h1"], ["d0", "d0"], [10, 11])
    append(
        cache,
        [Result(i, "ok", time_ms=1.0 + i, times_ms=(1.0 + i,) * 3, rank=0, batch=0) for i in range(3)],
        [CONFIG] * 3,
    )
    every = launches(2, 5, {0: 1.0, 1: 1.5, 2: 2.0}, [1.0, 1.0])  # 2 ranks x 5 rounds x 3 candidates
    made = [(rank, x) for rank, x in every if x.round < 2]  # a stop after two rounds
    owed = [(rank, Launch(x.config_id, x.round, float("nan"))) for rank, x in every if x.round >= 2]
    cache.append_confirmation(4, made, None, 1.0, 2.0, owed)
    pending = cache.confirmations().pending
    assert pending is not None and cache.confirmations().verdict is None
    assert (pending.run, pending.batch, pending.candidates) == (0, 4, (0, 1, 2))
    assert pending.made == 12 and pending.owed == {0: 6, 1: 6, 2: 6} and pending.next_round == 5
    assert not pending.searched_since
    cache.finish_run(3.0, "signal", 0)
    cache.start_run(info(), ["h0"], ["d0"], [12])  # resumed on one rank: it makes 4 of the 6 owed
    again = [(0, Launch(c, 5 + r, 1.0 + c / 2)) for r in range(4) for c in range(3)]
    cache.append_confirmation(
        0, again, None, 0.0, 1.0, [(0, Launch(c, 9, float("nan"))) for c in range(3) for _ in range(2)]
    )
    pending = cache.confirmations().pending
    assert pending is not None and pending.run == 1 and pending.made == 12 + 12 and pending.owed == {0: 2, 1: 2, 2: 2}
    assert pending.next_round == 10
    cache.close()
    summary = latest(read(str(path)))
    assert summary[0] is None and summary[1] is not None
    assert (summary[1].run, summary[1].candidates, summary[1].launches, summary[1].owed) == (1, 3, 24, 6)


def test_a_fresh_confirmation_is_not_chained_to_one_cut_short_before(tmp_path):
    """A confirmation that starts afresh (its rounds from 0) after one a stop cut short owes
    only what it planned itself."""
    path = tmp_path / "c.h5"
    cache = Cache(str(path), IDENTITY, PARAMS, iterations=3)
    cache.start_run(info(), ["h0"], ["d0"], [10])
    nan = float("nan")
    cache.append_confirmation(1, [(0, Launch(0, 0, 1.0))], None, 0.0, 1.0, [(0, Launch(1, 0, nan))])
    cache.append_confirmation(2, [(0, Launch(2, 0, 1.0))], None, 0.0, 1.0, [(0, Launch(3, 0, nan))])
    pending = cache.confirmations().pending
    assert pending is not None and pending.candidates == (2, 3) and pending.made == 1
    cache.close()


def test_rows_a_full_disk_left_as_zeros_are_no_confirmation(tmp_path):
    """A write cut short by a full disk can leave the tables' last rows as zeros: the report
    then shows the confirmation before it (or none), never a mix of both."""
    path = tmp_path / "c.h5"
    cache = Cache(str(path), IDENTITY, PARAMS, iterations=3)
    cache.start_run(info(), ["h0", "h1"], ["d0", "d1"], [10, 11])
    append(
        cache,
        [Result(i, "ok", time_ms=1.0 + i, times_ms=(1.0 + i,) * 3, rank=0, batch=0) for i in range(3)],
        [CONFIG] * 3,
    )
    rows = launches(2, 6, {0: 1.0, 1: 1.0005, 2: 1.5}, [1.0, 1.0])
    cache.append_confirmation(4, rows, verdict_of(rows), 10.0, 12.5)
    cache.finish_run(1.0, "killed", 3)  # a killed run's wall: its last timeline row, before the confirmation's
    cache.close()
    before = latest(read(str(path)))
    with h5py.File(path, "a") as f:
        for name in ("retimed", "confirmed", "device_factors"):
            f[name].resize((len(f[name]) + 5,))  # zeros, as a flush that failed leaves them
    confirmation, cost, calibration = latest(read(str(path)))
    assert (confirmation, cost, calibration) == before
    # The run lasted until the confirmation was recorded (12.5 s): not 250 % of its 1 s.
    assert cost is not None and cost.launches == 36 and cost.share_of_run == 0.2
    with h5py.File(path, "a") as f:
        for name in ("retimed", "confirmed", "device_factors"):
            f[name].resize((0,))
        f["confirmed"].resize((3,))  # rows of zeros only: no verdict at all
    assert latest(read(str(path)))[:2] == (None, None)
