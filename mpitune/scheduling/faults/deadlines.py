"""How long rank 0 waits for a round's reports, and a worker for its next order.

Besides the heartbeats (liveness.py), rank 0 notices a silent rank by a deadline per batch. It is
the slowest rank's seconds per configuration over the last ``HISTORY_ROUNDS`` rounds, times the
batch's longest chunk and ``SAFETY_FACTOR``. Added is one configuration's own limit (the spec's
``timeout_s``, else process/deadline.py), so a configuration hanging until its timeout is no lost
rank. It is at least the floor (the run setting ``rank_deadline_floor_s``: its flag's, else its
variable's, spec/settings_table.py; else ``DEFAULT_FLOOR_S``): a slow first compile is no dead
rank. The first batch has no history: each configuration may take its whole limit.

A worker waits for its next order at most the batch's deadline plus rank 0's turnaround (writing,
asking the strategy): ``TURNAROUND_FACTOR`` times the longest seen, at least the floor. Pure
arithmetic on what rank 0 observed: no MPI, no clock.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from mpitune.process.deadline import Durations, config_limit_s
from mpitune.scheduling.messages import Order, Report

DEFAULT_FLOOR_S = 45.0  # see docs/reliability.md, "A rank that stops answering"
SAFETY_FACTOR = 4.0
HISTORY_ROUNDS = 5
TURNAROUND_FACTOR = 10.0


@dataclass(frozen=True)
class Allowance:
    """What one batch may take. Rank 0 gives up on a report ``deadline_s`` after sending the orders;
    a worker gives up on rank 0 ``next_order_within_s`` after sending its report."""

    expected_s: float | None  # what the batch should take; None: no history yet
    deadline_s: float
    next_order_within_s: float


def floor_s(setting: float | None) -> float:
    """The floor the run's settings give (the flag's, else the variable's), else the default."""
    return DEFAULT_FLOOR_S if setting is None else setting


def allowance(
    longest_chunk: int,
    seconds_per_config: float | None,
    limit_s: float,
    floor_s: float,
    turnaround_s: float = 0.0,
) -> Allowance:
    """The allowance of a batch whose longest chunk holds ``longest_chunk`` configurations.
    ``seconds_per_config``: the most a configuration took so far (None: nothing measured yet).
    ``limit_s``: what one may take before its rank gives up on it."""
    if seconds_per_config is None:
        expected_s = None
        deadline_s = max(floor_s, longest_chunk * limit_s)
    else:
        expected_s = seconds_per_config * longest_chunk
        deadline_s = max(floor_s, SAFETY_FACTOR * expected_s + limit_s)
    return Allowance(expected_s, deadline_s, deadline_s + max(floor_s, TURNAROUND_FACTOR * turnaround_s))


class Deadlines:
    """Rank 0's record of what the rounds took, from which each batch's allowance comes."""

    def __init__(self, floor_s: float, timeout_s: float | None, ranks: int = 1, iterations: int = 1):
        self.floor_s, self.timeout_s, self.iterations = floor_s, timeout_s, iterations
        self.rates: list[float] = []  # per report: its rank's seconds per configuration
        self.window = HISTORY_ROUNDS * ranks  # the last rates a deadline rests on: five rounds of every rank
        self.config_s = Durations()  # every configuration measured in this run
        self.turnaround_s = 0.0  # the longest rank 0 took from the last report to the next orders
        self._reported_s: dict[int, float] = {}  # by rank: its clock at its last report
        self.longest_s = 0.0  # the longest deadline stamped on a hand-out

    def stamp(self, orders: list[Order], depth: int) -> list[Order]:
        """The orders of one hand-out, each with its allowance (a stop's: the floor, for the last
        rows). A worker waits for rank 0 ``depth`` times the longest deadline stamped in this run:
        rank 0 may first wait, within their deadlines, for a slow or silent rank's orders."""
        rates = self.rates[-self.window :]
        if orders[0].hold:  # the heartbeats alone watch a held rank (liveness.py)
            return orders
        if orders[0].stop is not None:
            limit = allowance(0, 0.0, 0.0, self.floor_s, self.turnaround_s)
            within_s = limit.next_order_within_s
        else:
            limit = allowance(
                max(o.size for o in orders),
                max(rates) if rates else None,
                config_limit_s(self.timeout_s, self.config_s, self.iterations),
                self.floor_s,
                self.turnaround_s,
            )
            self.longest_s = max(self.longest_s, limit.deadline_s)
            within_s = depth * self.longest_s + max(self.floor_s, TURNAROUND_FACTOR * self.turnaround_s)
            within_s = max(limit.next_order_within_s, within_s)
        return [
            replace(o, expected_s=limit.expected_s, deadline_s=limit.deadline_s, next_order_within_s=within_s)
            for o in orders
        ]

    def observe(self, rank: int, order: Order, report: Report) -> None:
        """Learn one rank's time per configuration from its report. It counts from when the rank
        could start the order (sent, and the order before reported), as a round's slowest would. A
        deadline rests on the last ``window`` reports: ``HISTORY_ROUNDS`` rounds of every rank."""
        started_s = max(order.now_s, self._reported_s.get(rank, order.now_s))
        self._reported_s[rank] = report.now_s
        if order.ids:
            self.rates.append(max(0.0, (report.now_s - started_s) / len(order.ids)))
        self.config_s.extend(r.finished_s - r.started_s for r in report.results)

    def note_turnaround(self, seconds: float) -> None:
        """Rank 0 took ``seconds`` from the last report of a round to the next orders."""
        self.turnaround_s = max(self.turnaround_s, seconds)
