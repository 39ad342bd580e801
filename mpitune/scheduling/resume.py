"""Rebuilding a resumed run's strategy from the search the file records.

The file keeps every ask (its size and the ids answered, in order) and the results in the
order they were told, so a fresh strategy with the same seed and options, asked and told the
same again, is in the state the stopped run left: strategies are deterministic for a seed and
a sequence of asks and tells. Every run records with each ask how many of its results rows had
been told (``Ask.told``), whichever policy handed out its work (handouts.py): rows are written
in the order they are told, one report at a time, so a run is replayed by those counts, one
tell per report. A file written before that record existed is replayed by its batches' rule
(batch b asked once batch b - depth was told, ``batching.pipeline_depth``). Nothing
executable is stored, so no file can make a resume run code. A rebuilt strategy that asks
otherwise than the file says (another version of mpitune, a changed metric) is not trusted:
the run starts afresh, knowing everything the file holds.

Which runs to replay follows how a stopped run hands its search on: a run that ended cleanly
(``SearchEnd``) with the same key passes its search to the next run; a killed run passes
nothing (the next one continues from the last run that ended); a run whose handed-out ids
came back unmeasured is not continuable. So the runs to replay are the longest tail of ended,
continuable runs with this run's key; the first of them started fresh.
"""

from __future__ import annotations

import json
import logging
from collections import defaultdict, deque
from collections.abc import Callable, Sequence
from typing import Any

from mpitune.model.prior import Prior
from mpitune.model.problem import RunSettings
from mpitune.model.result import Scored
from mpitune.scheduling.batching import pipeline_depth
from mpitune.store.history import Ask, History, search_digest
from mpitune.strategies.base import Strategy

log = logging.getLogger(__name__)


def strategy_key(settings: RunSettings, objective_key: Sequence[Any], prior: Prior | None) -> str:
    """What a recorded search is continued only with the same of: the strategy, its seed and
    options, the objective, and the digests of the priors it started from (which the strategy's
    state depends on). Without priors the key is as it was before they existed, so that a file
    written then still resumes its search."""
    key: list[Any] = [settings.strategy, settings.seed, settings.strategy_options, *objective_key]
    if prior is not None:
        key.append(prior.digests())
    return json.dumps(key, sort_keys=True, default=str)


def priors_changed(history: History, prior: Prior | None) -> str | None:
    """Why the last run's search is not continued when this run's priors differ from those it
    started from (a file changed, added or dropped), or None when they are the same."""
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


def rebuild(fresh: Callable[[], Strategy], history: History, known: Sequence[Scored], key: str, name: str) -> Strategy:
    """The strategy of this run, told everything in ``known`` (the results rows, in row order):
    the recorded search replayed, or else a fresh one."""
    chain = runs_to_replay(history, key)
    strategy = fresh()
    if chain:
        replayed = _replay(strategy, chain, history, known)
        if replayed is None:
            strategy = fresh()
        else:
            log.info("resuming the saved state of strategy %s (%d recorded asks replayed)", name, replayed)
    strategy.tell([r for r in known if r.config_id not in strategy.seen])
    return strategy


def _replay(strategy: Strategy, chain: list[int], history: History, known: Sequence[Scored]) -> int | None:
    """Ask and tell ``strategy`` what the runs in ``chain`` did; the number of asks, or None
    (with a warning) as soon as it answers an ask otherwise than recorded."""
    replayed = 0
    for run in chain:
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
            count = _replay_told(strategy, run, asks, mine)
        else:
            count = _replay_batches(strategy, asks, mine, history.ranks.get(run, 1))
        if count is None:
            return None
        replayed += count
    return replayed


def _replay_batches(strategy: Strategy, asks: list[Ask], mine: list[tuple[int, int, Scored]], ranks: int) -> int | None:
    """The asks of a run written before files recorded what was told before each (schema 4 and
    older), by the rule of its batches: batch b asked once batch b - depth was told (whole);
    what is left told after them."""
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
    while untold:
        strategy.tell(rows[untold.popleft()])
    return len(asks)


def _replay_told(strategy: Strategy, run: int, asks: list[Ask], mine: list[tuple[int, int, Scored]]) -> int | None:
    """The asks of run ``run`` as their ``told`` counts say: before each, the run's rows up to that count,
    one tell per report; after the last, the rest (a run that handed out work as ranks wanted it
    has no batches to hold back)."""
    if any(a.told is None for a in asks):
        log.warning(
            "the recorded search does not replay (run %d records what was told before some of its asks only); "
            "starting the strategy afresh from the cache",
            run,
        )
        return None
    at = 0
    for ask in asks:
        at = _tell_reports(strategy, mine, at, ask.told or 0)
        if not _asks_as_recorded(strategy, ask):
            return None
    _tell_reports(strategy, mine, at, len(mine))
    return len(asks)


def _tell_reports(strategy: Strategy, mine: list[tuple[int, int, Scored]], start: int, end: int) -> int:
    """Tell rows ``start`` to ``end`` of ``mine``, one call per report (consecutive rows of one
    batch and rank), as rank 0 told them; where it has got to."""
    end = min(end, len(mine))
    while start < end:
        stop = start + 1
        while stop < end and mine[stop][:2] == mine[start][:2]:
            stop += 1
        strategy.tell([result for _, _, result in mine[start:stop]])
        start = stop
    return start


def _asks_as_recorded(strategy: Strategy, ask: Ask) -> bool:
    """Whether ``strategy`` answers ``ask`` as recorded; if not, a warning says the search is
    started afresh."""
    if tuple(strategy.ask(ask.requested)) == ask.ids:
        return True
    log.warning(
        "the recorded search does not replay (batch %d of run %d asked otherwise); "
        "starting the strategy afresh from the cache",
        ask.batch,
        ask.run,
    )
    return False
