"""How long enumerating a large search space takes.

    python benchmarks/searchspace_build.py

Builds a 1,000,000-point Cartesian product (7 parameters) with two restriction strings,
as the core issue asks ("in a few seconds"), and a callable restriction on top.
"""

import time

from mpitune.model.restrictions import Restriction
from mpitune.model.searchspace import SearchSpace

TUNE_PARAMS = {
    "block_size_x": [1, 2, 4, 8, 16, 32, 64, 128, 256, 512],
    "block_size_y": [1, 2, 4, 8, 16, 32, 64, 128, 256, 512],
    "tile_x": list(range(1, 11)),
    "tile_y": list(range(1, 11)),
    "unroll": [0, 1, 2, 3, 4],
    "use_shared": ["yes", "no"],
    "vector": list(range(1, 11)),
}
STRINGS = ["block_size_x * block_size_y <= 1024 and tile_x != tile_y", "unroll < 3 or use_shared == 'yes'"]


def main() -> None:
    names = list(TUNE_PARAMS)
    total = 1
    for values in TUNE_PARAMS.values():
        total *= len(values)
    start = time.perf_counter()
    space = SearchSpace.build(TUNE_PARAMS, [Restriction(s, names) for s in STRINGS])
    strings_s = time.perf_counter() - start
    start = time.perf_counter()
    with_callable = SearchSpace.build(
        TUNE_PARAMS, [Restriction(s, names) for s in STRINGS] + [lambda c: c["vector"] % 2 == 0]
    )
    callable_s = time.perf_counter() - start
    print(f"product {total:,} configurations, {len(space):,} valid after 2 restriction strings: {strings_s:.2f} s")
    print(f"plus a Python callable restriction ({len(with_callable):,} valid): {callable_s:.2f} s")
    print(f"index table: {space.indices.nbytes / 2**20:.1f} MiB ({space.indices.dtype})")


if __name__ == "__main__":
    main()
