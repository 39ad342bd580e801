"""Rebuilding a resumed run's strategy from the search the file records.

Strategies are deterministic for a seed and a sequence of asks and tells. The file keeps every ask
and the results in the order they were told. Asked and told the same again, a fresh strategy is in
the state the stopped run left. Each ask records how many results rows had been told before it
(``Ask.told``), so a run replays by those counts, one tell per report. A run of whole batches told
each in one call, in the order asked, and replays so. Older files replay by their batches' rule
(``batching.pipeline_depth``). Nothing executable is stored, so no file can make a resume run code.
A strategy that asks otherwise than the file says is not trusted: the run starts afresh, knowing
everything the file holds.

A run that ended cleanly (``SearchEnd``) with the same key passes its search to the next run. A
killed run passes nothing; one whose handed-out ids came back unmeasured is not continuable. So the
runs to replay are the longest tail of ended, continuable runs with this run's key.
"""

from __future__ import annotations

import json
import logging
from collections import defaultdict, deque
from collections.abc import Callable, Sequence
from typing import Any

from mpitune.model.prior import Prior
from mpitune.model.problem import RunSettings, Schedule
from mpitune.model.result import Scored, in_ask_order
from mpitune.scheduling.batching import pipeline_depth
from mpitune.store.history import Ask, History, search_digest
from mpitune.strategies.base import Strategy

log = logging.getLogger(__name__)


def strategy_key(settings: RunSettings, objective_key: Sequence[Any], prior: Prior | None) -> str:
    """What a recorded search is continued only with the same of: the strategy, its seed and
    options, the objective, and the digests of its priors. Without priors the key is as before they
    existed, so that a file written then still resumes its search."""
    key: list[Any] = [settings.strategy, settings.seed, settings.strategy_options, *objective_key]
    if prior is not None:
        key.append(prior.digests())
    return json.dumps(key, sort_keys=True, default=str)


def priors_changed(history: History, prior: Prior | None) -> str | None:
    """Why the last run's search is not continued: this run's priors differ from those it started
    from (a file changed, added or dropped). None when they are the same."""
    if not history.ranks:
        return None
    last = max(history.ranks)
    now = tuple(prior.digests()) if prior is not None else ()
    if history.priors.get(last, ()) == now:
        return None
    return (
        f"the priors differ from those run {last} started from (a prior changed, was added or dropped): "
        "its search is not continued; the strategy starts afresh from this run's priors and the file's results"
    )


def runs_to_replay(history: History, key: str) -> list[int]:
    """The runs whose searches this run continues, oldest first; [] to start afresh."""
    digest = search_digest(key)
    chain: list[int] = []
    for end in reversed(history.ends):
        if end.digest != digest or not end.continuable:
            break
        chain.insert(0, end.run)
    return chain


# What a stopped run told after its last ask, which a resumed run tells as its own hand-outs go
# out (``Manager.tell_held``): by hand-out, each as its reports, one tell each.
Held = list[list[list[Scored]]]


def rebuild(
    fresh: Callable[[], Strategy], history: History, known: Sequence[Scored], key: str, name: str
) -> tuple[Strategy, Held]:
    """This run's strategy, told everything in ``known`` but what is held, and the held hand-outs. A
    stopped run told its hand-outs in flight before asking again, where an uninterrupted run in
    batches would have asked first: held back until this run's hand-outs go out, they keep the
    search the one an uninterrupted run makes."""
    chain = runs_to_replay(history, key)
    strategy = fresh()
    held: Held = []
    if chain:
        replayed = _replay(strategy, chain, history, known)
        if replayed is None:
            strategy = fresh()
        else:
            count, held = replayed
            log.info("resuming the saved state of strategy %s (%d recorded asks replayed)", name, count)
    held_ids = {r.config_id for hand_out in held for report in hand_out for r in report}
    strategy.tell([r for r in known if r.config_id not in strategy.seen and r.config_id not in held_ids])
    return strategy, held


def _replay(strategy: Strategy, chain: list[int], history: History, known: Sequence[Scored]) -> tuple[int, Held] | None:
    """Ask and tell ``strategy`` what the runs in ``chain`` did. Returns the number of asks and what
    the last run told after its last ask, held back (``rebuild``). None, with a warning, as soon as
    it answers an ask otherwise than recorded."""
    replayed = 0
    held: Held = []
    for run in chain:
        for report in [report for hand_out in held for report in hand_out]:  # the run before told them by now
            strategy.tell(report)
        strategy.tell(
            [r for r, row_run in zip(known, history.row_runs) if row_run < run and r.config_id not in strategy.seen]
        )
        asks = [a for a in history.asks if a.run == run]
        mine = [  # this run's rows: (batch, rank, result)
            (int(batch), int(rank), result)
            for result, row_run, batch, rank in zip(known, history.row_runs, history.row_batches, history.row_ranks)
            if row_run == run
        ]
        if any(a.told is not None for a in asks):
            whole = history.schedules.get(run) == Schedule.BATCHES.value
            count = _replay_told(strategy, run, asks, mine, whole)
        else:
            count = _replay_batches(strategy, asks, mine, history.ranks.get(run, 1))
        if count is None:
            return None
        replayed, held = replayed + count[0], count[1]
    return replayed, held


def _replay_batches(
    strategy: Strategy, asks: list[Ask], mine: list[tuple[int, int, Scored]], ranks: int
) -> tuple[int, Held] | None:
    """The asks of a run from before files recorded what each ask knew (schema 4 and older), by its
    batches' rule. What is left is held, a batch told in one call."""
    rows: dict[int, list[Scored]] = defaultdict(list)
    for batch, _, result in mine:
        rows[batch].append(result)
    depth = pipeline_depth(ranks)
    untold = deque(a.batch for a in asks)  # asked, not yet told
    for ask in asks:
        while untold and untold[0] <= ask.batch - depth:
            strategy.tell(rows[untold.popleft()])
        if not _asks_as_recorded(strategy, ask):
            return None
    return len(asks), [[rows[batch]] for batch in untold]


def _replay_told(
    strategy: Strategy, run: int, asks: list[Ask], mine: list[tuple[int, int, Scored]], whole: bool
) -> tuple[int, Held] | None:
    """The asks of run ``run`` as their ``told`` counts say. Before each, the run's rows up to that
    count, one tell per report (``whole``: per batch). What it told after the last is held."""
    if any(a.told is None for a in asks):
        log.warning(
            "the recorded search does not replay (run %d records what was told before some of its asks only); "
            "starting the strategy afresh from the cache",
            run,
        )
        return None
    reports = _reports(mine)
    if whole:
        reports = _whole_batches(reports, {a.batch: a.ids for a in asks})
    at, told = 0, 0  # reports told, and their rows
    for ask in asks:
        while at < len(reports) and told + len(reports[at][2]) <= (ask.told or 0):
            strategy.tell(reports[at][2])
            told += len(reports[at][2])
            at += 1
        if not _asks_as_recorded(strategy, ask):
            return None
    held: Held = []
    for k, (batch, _, report) in enumerate(reports[at:], at):
        if k == at or reports[k - 1][0] != batch:
            held.append([])
        held[-1].append(report)
    return len(asks), held


def _reports(mine: list[tuple[int, int, Scored]]) -> list[tuple[int, int, list[Scored]]]:
    """``mine`` cut into reports (consecutive rows of one batch and rank), as rank 0 told them."""
    reports: list[tuple[int, int, list[Scored]]] = []
    for batch, rank, result in mine:
        if not reports or reports[-1][:2] != (batch, rank):
            reports.append((batch, rank, []))
        reports[-1][2].append(result)
    return reports


def _whole_batches(
    reports: list[tuple[int, int, list[Scored]]], asked: dict[int, tuple[int, ...]]
) -> list[tuple[int, int, list[Scored]]]:
    """The reports of each batch as one, its results in the order the batch was asked."""
    merged: dict[int, list[Scored]] = {}
    for batch, _, results in reports:
        merged.setdefault(batch, []).extend(results)
    return [(batch, -1, in_ask_order(results, asked.get(batch, ()))) for batch, results in merged.items()]


def _asks_as_recorded(strategy: Strategy, ask: Ask) -> bool:
    """Whether ``strategy`` answers ``ask`` as recorded; if not, a warning says the search starts
    afresh."""
    if tuple(strategy.ask(ask.requested)) == ask.ids:
        return True
    log.warning(
        "the recorded search does not replay (batch %d of run %d asked otherwise); "
        "starting the strategy afresh from the cache",
        ask.batch,
        ask.run,
    )
    return False
