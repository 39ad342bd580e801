"""The heartbeats' bookkeeping (liveness.py) and what rank 0's heartbeat thread does about a
silent worker (ending.py), as pure code: no MPI job, the abort replaced by the test's own."""

from __future__ import annotations

import logging
import threading
import time

import pytest

from mpitune.scheduling.faults import ending
from mpitune.scheduling.faults.liveness import (
    DEFAULT_TIMEOUT_S,
    MAX_INTERVAL_S,
    UNKNOWN_HOST,
    Liveness,
    Silence,
    Watch,
    interval_s,
    timeout_s,
)
from mpitune.scheduling.transport import SilentRanks


def test_a_peer_is_silent_once_it_sent_nothing_for_longer_than_the_timeout():
    live = Liveness([1, 2], timeout_s=5.0, now_s=100.0)
    assert live.silence(105.0) is None  # counted from the start: no beat yet, not yet silent
    live.heard(1, 104.0, "node1")
    silence = live.silence(105.5)
    assert silence == Silence((2,), (UNKNOWN_HOST,), (5.5,), 5.0)
    live.heard(2, 106.0, "node2")
    assert live.silence(108.0) is None
    silence = live.silence(111.5)
    assert silence is not None and silence.ranks == (1, 2) and silence.hosts == ("node1", "node2")
    assert silence.silent_s == (7.5, 5.5) and silence.longest_s == 7.5


def test_a_late_or_unknown_beat_changes_nothing():
    live = Liveness([0], timeout_s=2.0, now_s=10.0)
    live.heard(0, 9.0)  # older than what is known
    live.heard(3, 50.0, "elsewhere")  # not a peer of this rank
    assert live.heard_s == {0: 10.0} and live.hosts == {}


def test_the_start_up_exchange_names_the_hosts_a_beat_has_not():
    live = Liveness([1, 2], timeout_s=1.0, now_s=0.0)
    live.heard(1, 0.5, "from-its-beat")
    live.know_hosts(("node0", "node1", "node2"))
    silence = live.silence(3.0)
    assert silence is not None and silence.hosts == ("from-its-beat", "node2")


def test_the_longest_a_peer_went_unheard_is_kept_as_the_run_s_margin():
    live = Liveness([1, 2], timeout_s=5.0, now_s=0.0)
    live.heard(1, 1.0)
    assert live.silence(3.0) is None and live.longest_s == {1: 2.0, 2: 3.0}
    live.heard(2, 3.5)
    live.silence(4.5)
    assert live.longest_s == {1: 3.5, 2: 3.0}  # a shorter silence later leaves the longest


def test_the_timeout_is_the_run_s_else_the_default():
    """The flag and the variable are merged before MPI starts (tests/spec/test_settings_environment.py)."""
    assert timeout_s(5.0) == 5.0
    assert timeout_s(None) == DEFAULT_TIMEOUT_S == 20.0
    assert timeout_s(0.0) == 0.0  # off


def test_beats_come_five_times_per_timeout_and_at_least_every_two_seconds():
    assert interval_s(20.0) == MAX_INTERVAL_S == 2.0
    assert interval_s(3.0) == pytest.approx(0.6)


def test_heartbeats_are_refused_below_thread_multiple(caplog):
    from mpi4py import MPI

    from mpitune.scheduling.faults.heartbeat import Heartbeat

    class World:  # what start looks at before it duplicates the communicator
        size, rank = 3, 0

    with caplog.at_level(logging.WARNING):
        assert Heartbeat.start(World(), 20.0, print, thread_level=MPI.THREAD_SERIALIZED) is None
    assert "less than MPI_THREAD_MULTIPLE" in caplog.text and "no heartbeats" in caplog.text
    assert Heartbeat.start(World(), 0.0, print, thread_level=MPI.THREAD_MULTIPLE) is None


SILENCE = Silence((2,), ("node2",), (21.3,), 20.0)


def _watch(closes: list[str]) -> Watch:
    watch = Watch()
    watch.path = "/scratch/out.h5"
    watch.close = lambda: closes.append("closed")
    return watch


def test_the_heartbeat_thread_closes_the_file_when_the_main_thread_is_not_writing(monkeypatch):
    monkeypatch.setattr(ending, "NOTICE_S", 0.05)
    closes: list[str] = []
    lines: list[str] = []
    watch = _watch(closes)
    ending.on_rank0(watch, lines.append)(SILENCE)
    assert closes == ["closed"] and watch.closed and watch.silence is SILENCE
    assert lines == [
        "mpitune: error: rank 2 on node2 sent no heartbeat for 21 s (the liveness timeout is 20 s): it is stopped "
        "or its node is lost; results so far are saved in /scratch/out.h5 (the batch in flight is measured again); "
        "rerun the same command to resume (exit code 75)"
    ]


def test_a_file_the_main_thread_holds_is_left_to_the_next_run(monkeypatch):
    monkeypatch.setattr(ending, "NOTICE_S", 0.05)
    monkeypatch.setattr(ending, "WRITE_WAIT_S", 0.05)
    closes: list[str] = []
    lines: list[str] = []
    watch = _watch(closes)
    watch.writing.acquire()  # a write that does not end
    ending.on_rank0(watch, lines.append)(SILENCE)
    assert closes == [] and not watch.closed
    assert "every batch before the one in flight is saved in /scratch/out.h5, which the next run repairs" in lines[0]


def test_a_silent_rank_during_start_up_ends_the_job_with_nothing_to_close(monkeypatch):
    monkeypatch.setattr(ending, "NOTICE_S", 0.05)
    lines: list[str] = []
    ending.on_rank0(Watch(), lines.append)(SILENCE)
    assert lines == [
        "mpitune: error: rank 2 on node2 sent no heartbeat for 21 s (the liveness timeout is 20 s) during start-up, "
        "before anything was recorded; rerun the same command to resume (exit code 75)"
    ]


def test_a_main_thread_in_a_gather_takes_the_alarm_and_ends_the_run_itself(monkeypatch):
    """The main thread, polling, sees the silence and ends the run; the heartbeat thread only
    waits for the abort, and ends the job itself should it not come."""
    monkeypatch.setattr(ending, "HANDOVER_S", 0.3)
    closes: list[str] = []
    lines: list[str] = []
    watch = _watch(closes)
    watch.polling = True

    def main_thread() -> None:
        while watch.silence is None:
            time.sleep(0.001)
        watch.ending = True
        with watch.writing:  # records what arrived, then closes the file
            watch.closed = True

    main = threading.Thread(target=main_thread)
    main.start()
    started = time.monotonic()
    ending.on_rank0(watch, lines.append)(SILENCE)
    main.join()
    assert time.monotonic() - started >= 0.3  # it gave the main thread its time
    assert closes == []  # the main thread closed it
    assert len(lines) == 1  # the last resort: the abort of the main thread never came


def test_rank_0s_line_for_a_silence_the_heartbeats_found():
    silent = SilentRanks([2], ["node2"], 21.3, {}, heartbeat=SILENCE)
    assert ending.rank0_line(silent, "/scratch/out.h5") == (
        "mpitune: error: rank 2 on node2 sent no heartbeat for 21 s (the liveness timeout is 20 s): it is stopped "
        "or its node is lost; results so far are saved in /scratch/out.h5; rerun the same command to resume "
        "(exit code 75)"
    )
    late = SilentRanks([1], ["node1"], 3.9, {}, expected_s=0.2)
    assert "rank 1 on node1 did not answer within 3.9 s (its batch was expected to take 0.2 s)" in ending.rank0_line(
        late, "/x.h5"
    )
