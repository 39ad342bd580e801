"""A throttled timing is timed once more, and says why. The watch here is a script of what NVML
would say (observers/throttle.py reads NVML itself; tests/observers/test_throttle.py runs it on a
GPU, which cannot be made to throttle on purpose without changing its settings)."""

from __future__ import annotations

from mpitune.backends.base import Draft
from mpitune.backends.gpu.throttling import watched


class Scripted:
    """A watch that answers each window with the next causes of ``said``."""

    def __init__(self, *said: frozenset[str]):
        self.said, self.windows = list(said), 0

    def start(self) -> int:
        self.windows += 1
        return self.windows

    def stop(self, window: int) -> frozenset[str]:
        return self.said.pop(0)


def timings():
    made = []

    def time_once() -> tuple[list[float], bool]:
        made.append(len(made) + 1)
        return [float(len(made))] * 3, False

    return made, time_once


def test_an_unthrottled_timing_is_kept_and_one_without_nvml_is_not_watched():
    made, once = timings()
    draft = Draft(0)
    assert watched(Scripted(frozenset()), once, draft) == ([1.0] * 3, False) and draft.throttled == ""
    assert watched(None, once, draft) == ([2.0] * 3, False) and made == [1, 2]


def test_a_throttled_timing_is_timed_again_once_and_says_why():
    made, once = timings()
    draft = Draft(0)
    assert watched(Scripted(frozenset({"thermal", "power"}), frozenset()), once, draft) == ([2.0] * 3, False)
    assert draft.throttled == "power, thermal" and made == [1, 2]
    again = Draft(1)
    assert watched(Scripted(frozenset({"power"}), frozenset({"power"})), once, again) == ([4.0] * 3, False)
    assert again.throttled == "power; again: power" and made == [1, 2, 3, 4]  # not a third time
