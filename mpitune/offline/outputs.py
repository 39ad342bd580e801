"""Text files the offline verbs write (an export, the HTML report): whole or not at all.

They go through ``mpitune.store.files``, as every file mpitune writes does. So an output is never
an input and never goes through a planted link. Its temporary name fits, whatever the output's name."""

from __future__ import annotations

import gzip
from collections.abc import Iterator
from contextlib import contextmanager
from typing import IO

from mpitune.store.files import written_whole


@contextmanager
def atomic_text(path: str) -> Iterator[IO[str]]:
    """A text file (gzipped when ``path`` ends in .gz) that appears at ``path`` only once complete."""
    with written_whole(path) as raw:
        if path.endswith(".gz"):
            with gzip.open(raw, "wt", encoding="utf-8") as fh:
                yield fh
        else:
            with open(raw.fileno(), "w", encoding="utf-8", closefd=False) as fh:
                yield fh
