"""A replay's compile workers on its simulated clock: a pool of N taking the queue in order,
the rank waiting only for a compile not yet done."""

import pytest

from mpitune.backends.base import Compiled
from mpitune.model.timeline import Clock
from mpitune.model.work import Work
from mpitune.process.simulated_compile import SimulatedCompileAhead

COMPILE_S = {0: 0.4, 1: 0.1, 2: 0.1, 3: 0.3}
WORK = [Work(i, {"x": i}) for i in COMPILE_S]


def recorded(work: Work) -> Compiled:
    return Compiled(work.config_id, finished=COMPILE_S[work.config_id])


def pool(workers: int, recompile_s: float | None = None) -> SimulatedCompileAhead:
    clock = Clock(simulated=True)
    clock.advance(1.0)
    return SimulatedCompileAhead(workers, clock, recorded, recompile_s)


def test_workers_take_the_queue_in_order_and_the_rank_waits_only_for_what_is_not_done():
    ahead = pool(2)
    ahead.submit(WORK)
    # 0 on one worker until 1.4; 1 on the other until 1.1, then 2 until 1.2, then 3 until 1.5.
    first = ahead.take(WORK[0], None)
    assert ahead.clock.now() == pytest.approx(1.4)  # waited for it
    row = ahead.row(first, batch=3)
    assert (row.phase, row.batch, row.start_s, row.end_s) == ("compile_ahead", 3, 1.0, pytest.approx(1.4))
    ahead.take(WORK[1], None)
    ahead.take(WORK[2], None)
    assert ahead.clock.now() == pytest.approx(1.4)  # done meanwhile: no wait
    last = ahead.take(WORK[3], None)
    assert (last.started, last.finished) == (pytest.approx(1.2), pytest.approx(1.5))
    assert ahead.clock.now() == pytest.approx(1.5)


def test_one_worker_compiles_in_turn_and_what_is_dropped_still_took_its_time():
    ahead = pool(1)
    ahead.submit(WORK[:2])
    ahead.keep_only([1])  # 0 will not be measured, but the worker compiles it all the same
    assert ahead.take(WORK[1], None).finished == pytest.approx(1.5)
    assert ahead.clock.now() == pytest.approx(1.5)


def test_a_configuration_compiled_again_takes_the_runs_repeated_compile():
    ahead = pool(2, recompile_s=0.02)
    ahead.take(WORK[0], None)  # submitted when taken: 1.0 to 1.4
    again = ahead.take(WORK[0], None)
    assert again.finished - again.started == pytest.approx(0.02) and ahead.clock.now() == pytest.approx(1.42)
    without = pool(2)
    without.take(WORK[0], None)
    again = without.take(WORK[0], None)
    assert again.finished - again.started == pytest.approx(0.4)  # no cache recorded: as long as the first


def test_an_order_dealt_earlier_compiles_from_the_first_take_after_it_as_a_real_rank_queues_it():
    ahead = pool(2)
    ahead.take(WORK[1], None)  # 1.0 to 1.1: the rank takes it at 1.1
    ahead.clock.advance(0.5)  # measures it: 1.6
    ahead.take(WORK[2], None)  # 1.6 to 1.7: taken at 1.7
    ahead.clock.advance(1.0)  # the rank replays on to 2.7 before it sees the order dealt at 1.2
    ahead.submit([WORK[0]], since_s=1.2)
    early = ahead.take(WORK[0], None)
    # A real rank got it at 1.2 and queued it when it next took a configuration, at 1.7.
    assert (early.started, early.finished) == (pytest.approx(1.7), pytest.approx(2.1))
    assert ahead.clock.now() == pytest.approx(2.7)  # done long before: no wait
    # Dealt after the last take: from now, as before.
    ahead.submit([WORK[3]], since_s=2.5)
    assert ahead.take(WORK[3], None).started == pytest.approx(2.7)


def test_cold_workers_compile_nothing_before_they_are_ready():
    clock = Clock(simulated=True)
    clock.advance(1.0)
    ahead = SimulatedCompileAhead(2, clock, recorded, ready_s=1.8)
    ahead.submit(WORK[:2])
    first = ahead.take(WORK[0], None)
    assert (first.started, first.finished) == (pytest.approx(1.8), pytest.approx(2.2))
    assert clock.now() == pytest.approx(2.2)
