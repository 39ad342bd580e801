"""How long rank 0 waits for a batch (faults/deadlines.py), and the one-rank transport's side of it."""

from __future__ import annotations

import socket

import pytest

from mpitune.model.result import Result, Status
from mpitune.model.work import Work
from mpitune.process.deadline import TIMEOUT_FACTOR, TIMEOUT_FLOOR_S, config_limit_s
from mpitune.scheduling.faults.deadlines import (
    DEFAULT_FLOOR_S,
    SAFETY_FACTOR,
    Deadlines,
    allowance,
    floor_s,
)
from mpitune.scheduling.messages import Order, Report, StopReason
from mpitune.scheduling.transport import LocalTransport, SilentRanks


def test_the_first_batch_may_spend_each_configurations_whole_limit():
    first = allowance(longest_chunk=4, seconds_per_config=None, limit_s=30.0, floor_s=10.0)
    assert first.expected_s is None
    assert first.deadline_s == 120.0  # 4 configurations of up to 30 s each
    assert first.next_order_within_s == 120.0 + 10.0


def test_history_gives_a_deadline_of_the_expected_time_a_factor_and_one_hang():
    later = allowance(longest_chunk=3, seconds_per_config=2.0, limit_s=5.0, floor_s=1.0, turnaround_s=0.5)
    assert later.expected_s == 6.0
    assert later.deadline_s == SAFETY_FACTOR * 6.0 + 5.0
    assert later.next_order_within_s == later.deadline_s + 10 * 0.5  # rank 0's turnaround, ten times


def test_the_floor_holds_for_quick_batches():
    quick = allowance(longest_chunk=1, seconds_per_config=0.001, limit_s=2.0, floor_s=60.0)
    assert quick.deadline_s == 60.0 and quick.next_order_within_s == 120.0


def test_a_batch_without_history_allows_each_configuration_the_supervisors_limit():
    orders = [Order(0.0, 0, work(1, 2)), Order(0.0, 0, work(3))]
    deadlines = Deadlines(floor_s=1.0, timeout_s=None)
    assert [o.deadline_s for o in deadlines.stamp(orders, 1)] == [2 * TIMEOUT_FLOOR_S] * 2
    deadlines.config_s = [10.0, 20.0, 30.0]
    assert deadlines.stamp(orders, 1)[0].deadline_s == 2 * TIMEOUT_FACTOR * 20.0
    assert Deadlines(floor_s=1.0, timeout_s=7.0).stamp(orders, 1)[0].deadline_s == 2 * 7.0  # the spec's timeout_s
    # As the supervisor's limit, rank 0's grows with the launches a configuration is asked for.
    many = Deadlines(floor_s=1.0, timeout_s=None, iterations=100_000).stamp(orders, 1)
    assert many[0].deadline_s == 2 * config_limit_s(None, [], 100_000) > 2 * TIMEOUT_FLOOR_S


def test_the_floor_is_the_run_s_else_the_default():
    """The flag and the variable are merged into the run's settings (tests/spec/test_settings_environment.py)."""
    assert floor_s(5.0) == 5.0
    assert floor_s(None) == DEFAULT_FLOOR_S


def work(*ids: int) -> tuple[Work, ...]:
    return tuple(Work(i, {"x": i}) for i in ids)


def _result(config_id: int, started_s: float, finished_s: float) -> Result:
    return Result(config_id, Status.OK, started_s=started_s, finished_s=finished_s)


def test_rank_0_learns_the_slowest_ranks_time_per_configuration():
    deadlines = Deadlines(floor_s=1.0, timeout_s=2.0, ranks=2)
    orders = deadlines.stamp([Order(10.0, 0, work(0, 1)), Order(10.0, 0, work(2, 3))], 1)
    assert orders[0].expected_s is None and orders[0].deadline_s == 2 * 2.0  # no history: 2 x timeout_s
    # rank 0 took 1 s for its two, rank 1 took 3 s: 1.5 s per configuration
    deadlines.observe(0, orders[0], Report((_result(0, 10.0, 10.5), _result(1, 10.5, 11.0)), (), 11.0))
    deadlines.observe(1, orders[1], Report((_result(2, 10.0, 11.5), _result(3, 11.5, 13.0)), (), 13.0))
    deadlines.note_turnaround(0.2)
    nxt = deadlines.stamp([Order(13.0, 1, work(4, 5, 6)), Order(13.0, 1, work(7))], 1)
    assert nxt[0].expected_s == pytest.approx(4.5)  # the longest chunk, three configurations
    assert nxt[0].deadline_s == pytest.approx(SAFETY_FACTOR * 4.5 + 2.0)
    assert nxt[0].next_order_within_s == pytest.approx(nxt[0].deadline_s + 2.0)
    assert nxt[1].deadline_s == nxt[0].deadline_s  # every rank's order says the hand-out's allowance
    stop = deadlines.stamp([Order(14.0, stop=StopReason.FINISHED)] * 2, 1)
    assert stop[0].deadline_s == 1.0 and stop[0].stop is StopReason.FINISHED  # the last rows: the floor


def test_a_deadline_rests_on_five_rounds_of_every_ranks_reports():
    """One report per rank and order: the slowest of the last ``window`` reports counts, and a
    worker that reported all it held waits for rank 0 as long as two of the longest deadlines."""
    deadlines = Deadlines(floor_s=1.0, timeout_s=2.0, ranks=4)
    assert deadlines.window == 5 * 4  # HISTORY_ROUNDS rounds of 4 ranks
    slow = Order(0.0, 0, work(0))
    deadlines.observe(3, slow, Report((_result(0, 0.0, 10.0),), (), 10.0))  # 10 s for one
    for i in range(1, 19):  # then 18 quick ones, 0.1 s each, on the other ranks
        t = 10.0 + 0.2 * i
        deadlines.observe(i % 3, Order(t, i, work(i)), Report((_result(i, t, t + 0.1),), (), t + 0.1))
    (order,) = deadlines.stamp([Order(14.0, 19, work(19))], 2)
    assert order.expected_s == pytest.approx(10.0)  # the slow report is still in the window
    assert order.deadline_s == pytest.approx(SAFETY_FACTOR * 10.0 + 2.0)
    assert order.next_order_within_s == pytest.approx(2 * order.deadline_s + 1.0)
    one_rank = Deadlines(floor_s=1.0, timeout_s=2.0)  # five reports: the slow one would be forgotten
    for i in range(19):
        t, took_s = 20.0 * i, 10.0 if i == 0 else 0.1
        one_rank.observe(0, Order(t, i, work(i)), Report((_result(i, t, t + took_s),), (), t + took_s))
    (quick,) = one_rank.stamp([Order(14.0, 19, work(19))], 1)
    assert quick.expected_s == pytest.approx(0.1)


def test_a_world_of_one_rank_has_no_one_to_wait_for():
    local = LocalTransport()
    assert local.hosts == (socket.gethostname(),)
    assert local.scatter(["order"], deadline_s=0.0) == "order"
    assert local.gather("report", deadline_s=0.0) == ["report"]


def test_silent_ranks_say_who_and_how_long():
    one = SilentRanks([2], ["node2"], 41.2, {0: "r0"}, expected_s=9.0)
    assert str(one) == "rank 2 on node2 did not answer within 41.2 s"
    two = SilentRanks([1, 2], ["node1", "node2"], 3.0, {})
    assert str(two) == "ranks 1 (on node1), 2 (on node2) did not answer within 3.0 s"
