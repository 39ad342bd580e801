"""A configuration's timed launches, once more when the GPU was throttled while they ran.

A throttled GPU times every kernel slow for a while: too hot, at its power cap, or slowed down
by the board. A configuration timed then looks slower than it is. The backend's throttle watch
(observers/throttle.py) says whether the clocks were held down during the timed launches. If
they were, the launches are timed once more. The result records why (``Result.throttled``), and
``report`` lists it. A second throttled timing is kept, and says so. Timing a GPU that stays
throttled again and again would not make it faster.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from mpitune.backends.base import Draft


def watched(watch: Any, time_once: Callable[[], tuple[list[float], bool]], draft: Draft) -> tuple[list[float], bool]:
    """``time_once()``'s launches and whether they were raced.

    They are timed again once if ``watch`` saw the GPU throttled (None: no NVML).
    ``draft.throttled`` says why.
    """
    if watch is None:
        return time_once()
    window = watch.start()
    timed = time_once()
    causes = watch.stop(window)
    if not causes:
        return timed
    window = watch.start()
    timed = time_once()
    again = watch.stop(window)
    draft.throttled = ", ".join(sorted(causes)) + (f"; again: {', '.join(sorted(again))}" if again else "")
    return timed
