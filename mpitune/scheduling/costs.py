"""What a configuration will cost a rank, predicted from the configurations measured so far.

Rank 0 deals a batch so that every chunk takes about as long (batching.deal_by_cost): the batch
waits for its slowest rank. A cost is its rank's compile + verify + benchmark seconds. The model is
a ridge regression of log seconds on indicators of each varying parameter's values, and of pairs of
values, up to ``MAX_FEATURES``. Costs are products of factors, so logs add; the pairs catch what two
parameters do together. Its sufficient statistics (FᵀF, Fᵀy) are summed as results come, and the
weights solved once per batch. No MPI, clock or randomness: the same results give the same
predictions.
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Iterable, Sequence

import numpy as np

from mpitune.model.result import Result
from mpitune.model.searchspace import SearchSpace

MAX_FEATURES = 512  # indicators in all: FᵀF is MAX_FEATURES² doubles (2 MiB), solved per batch
RIDGE = 1.0  # shrinks the weight of a value seen in few configurations towards none
_MOST_CODES = 1 << 20  # pairs listed before they are counted (8 MB)
FLOOR_S = 1e-3  # a configuration answered without running (invalid) costs about nothing
REFIT_GROWTH, REFIT_EVERY = 1 / 16, 32  # weights solved again after this growth: refill predicts per hand-out


def result_cost_s(result: Result) -> float:
    """What measuring ``result`` cost its rank: compile + verify + benchmark seconds."""
    return result.compile_s + result.verify_s + result.benchmark_s


class CostModel:
    """Predicted seconds per configuration of one search space, learned from its results."""

    def __init__(self, space: SearchSpace):
        self.space = space
        sizes = [int(size) for size in space.sizes]
        varying = [j for j, size in enumerate(sizes) if size > 1]
        # A configuration has one indicator set per varying parameter whose value is not its
        # first (value 0 is the intercept's share), and one per pair of such parameters: each
        # parameter and each pair owns a block of indicators, numbered from its offset.
        width = 1
        self._singles: list[tuple[int, int]] = []  # (parameter, offset)
        for j in varying:
            if width + sizes[j] - 1 > MAX_FEATURES:  # a space of hundreds of parameters
                break
            self._singles.append((j, width))
            width += sizes[j] - 1
        self._pairs: list[tuple[int, int, int]] = []  # (parameter a, parameter b, offset)
        for a, b in itertools.combinations([j for j, _ in self._singles], 2):
            block = (sizes[a] - 1) * (sizes[b] - 1)
            if width + block > MAX_FEATURES:
                break
            self._pairs.append((a, b, width))
            width += block
        self._counted = np.zeros((width, width))  # FᵀF's upper triangle and diagonal, but for ``_codes``
        self._codes: list[np.ndarray] = []  # the pairs set in results learned since (``_pair_codes``)
        self._moment = np.zeros(width)
        self._weights: np.ndarray | None = None
        self._solved_at = 0  # results learned when the weights were last solved
        self._columns: np.ndarray | None = None  # (parameter a, b, offset, b's size) per column, for _active
        self.learned = 0  # results learned from

    @property
    def features(self) -> int:
        return len(self._moment)

    @property
    def _upper(self) -> np.ndarray:
        """FᵀF's upper triangle and diagonal."""
        self._count_codes()
        return self._counted

    def _count_codes(self) -> None:
        """Count the pairs of the results learned since the last count into ``_counted``, in one go.
        A table of (features + 1)² per report was the larger part of learning. Counts add, so the
        sum is the same in any grouping."""
        if self._codes:
            width = self.features + 1
            counts = np.bincount(np.concatenate(self._codes), minlength=width * width).reshape(width, width)
            self._counted += counts[:-1, :-1]
            self._codes.clear()

    def _active(self, ids: Sequence[int]) -> np.ndarray:
        """The indicators set for each id: a row each, a column per parameter and pair, as indicator
        numbers (``features``: unset, a column past the last). Indices and ``bincount``, not a 0/1
        matrix: BLAS threads on busy cores were far slower (docs/performance.md, "Scheduler cost and
        scaling"). Every column at once: rank 0 asks this for each chunk it deals."""
        rows = self.space.indices[np.asarray(ids, dtype=np.int64)].astype(np.int64)
        if self._columns is None:
            sizes = [int(size) for size in self.space.sizes]
            one = len(sizes)  # the column of ones appended below: a single's partner
            columns = [(j, one, offset, 2) for j, offset in self._singles]
            columns += [(a, b, offset, sizes[b]) for a, b, offset in self._pairs]
            self._columns = np.array(columns, dtype=np.int64).reshape(-1, 4).T
        first, second, offset, second_size = self._columns
        rows = np.hstack([rows, np.ones((len(rows), 1), dtype=np.int64)])
        a, b = rows[:, first], rows[:, second]
        set_ = (a > 0) & (b > 0)
        out = np.full((len(rows), 1 + len(first)), self.features, dtype=np.int64)
        out[:, 0] = 0
        out[:, 1:] = np.where(set_, offset + (a - 1) * (second_size - 1) + b - 1, self.features)
        return out

    def learn(self, results: Iterable[Result]) -> None:
        """Add measured results (a failed one too: it tells what failing costs)."""
        results = list(results)
        self.learn_values([r.config_id for r in results], [result_cost_s(r) for r in results])

    def learn_values(self, ids: Sequence[int], values: Sequence[float], floor: float = FLOOR_S) -> None:
        """Add the values of the given ids, each at least ``floor``. They are seconds of a
        configuration's cost or of one phase of it, or its kernel time: ``plan`` predicts each for
        the configurations a pilot did not measure, with a model of each."""
        if not len(ids):
            return
        active = self._active(ids)
        y = np.log(np.maximum(values, floor))
        width = self.features + 1  # with the unset column
        self._codes.append(_pair_codes(active, width))
        if sum(len(c) for c in self._codes) > _MOST_CODES:  # what waits to be counted stays small
            self._count_codes()
        moment = np.bincount(active.ravel(), weights=np.repeat(y, active.shape[1]), minlength=width)
        self._moment += moment[:-1]
        self.learned += len(ids)

    def predict_s(self, ids: Sequence[int]) -> np.ndarray | None:
        """Predicted seconds of each id; None before any result was learned (nothing to go by)."""
        if not self.learned:
            return None
        if self._weights is None or self.learned > self._solved_at + min(REFIT_EVERY, self._solved_at * REFIT_GROWTH):
            self._solved_at = self.learned
            upper = self._upper
            gram = upper + upper.T - np.diag(np.diagonal(upper))
            ridge = np.full(self.features, RIDGE)
            ridge[0] = 0.0  # the intercept is not shrunk: a prediction is seconds, not only an order
            solved = _conjugate_gradient(gram + np.diag(ridge), self._moment)
            self._weights = np.append(solved, 0.0)  # the unset column weighs nothing
        predicted_s: np.ndarray = np.exp(self._weights[self._active(ids)].sum(axis=1))
        return predicted_s

    def chunks_s(self, chunks: Sequence[Sequence[int]]) -> np.ndarray | None:
        """Predicted seconds of each chunk of a dealt batch, one per rank; None before any result
        was learned."""
        ids = [i for chunk in chunks for i in chunk]
        predicted_s = self.predict_s(ids) if ids else np.zeros(0)
        if predicted_s is None:
            return None
        per_chunk_s = np.zeros(len(chunks))
        np.add.at(per_chunk_s, np.repeat(np.arange(len(chunks)), [len(chunk) for chunk in chunks]), predicted_s)
        return per_chunk_s


def _pair_codes(active: np.ndarray, width: int) -> np.ndarray:
    """Each pair of indicators (i <= j) set together in a row of ``active``, as i * width + j, for
    ``bincount`` to count FᵀF's upper triangle. ``width - 1`` marks an unset indicator. Most are
    unset, so each row's set indicators are sorted to its front, and rows are taken together by how
    many are set: only set pairs are listed (docs/performance.md, "Scheduler cost and scaling")."""
    ordered = np.sort(active, axis=1)
    counts = (ordered < width - 1).sum(axis=1)
    codes = [np.zeros(0, dtype=np.int64)]
    for count in np.unique(counts).tolist():
        rows = ordered[counts == count, :count]
        first, second = _upper_pairs(count)
        codes.append((rows[:, first] * width + rows[:, second]).ravel())
    return np.concatenate(codes)


def _conjugate_gradient(a: np.ndarray, b: np.ndarray, tolerance: float = 1e-10) -> np.ndarray:
    """x with a @ x = b for a symmetric positive definite a (FᵀF plus the ridge), by conjugate
    gradients preconditioned with a's diagonal. It starts from x = 0, so the answer depends on a and
    b alone. Products by einsum, which uses no BLAS: LAPACK's threads on rank 0's busy cores made a
    solve hundreds of times slower (docs/performance.md, "Scheduler cost and scaling")."""
    inverse_diagonal = 1.0 / np.diagonal(a)
    x = np.zeros_like(b)
    residual = b.copy()
    z = inverse_diagonal * residual
    direction = z.copy()
    rz = float(residual @ z)
    stop = tolerance * float(np.sqrt(b @ b))
    for _ in range(2 * len(b)):
        if float(np.sqrt(residual @ residual)) <= stop:
            break
        towards = np.einsum("ij,j->i", a, direction)
        step = rz / float(direction @ towards)
        x += step * direction
        residual -= step * towards
        z = inverse_diagonal * residual
        rz, previous = float(residual @ z), rz
        direction = z + (rz / previous) * direction
    return x


@functools.lru_cache(maxsize=64)
def _upper_pairs(count: int) -> tuple[np.ndarray, np.ndarray]:
    """``np.triu_indices(count)``, made once per count rather than per report."""
    return np.triu_indices(count)
