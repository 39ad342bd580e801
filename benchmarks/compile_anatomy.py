"""Where a cold NVRTC compile's time goes, and what makes a later one cheap.

Compiles configurations of the CUDA matrix multiply example (examples/matmul_cupy) with the
options mpitune gives NVRTC, in fresh processes, and prints one JSON line per measurement:

- ``libraries``: reading NVRTC's shared libraries from disk (what a fresh machine pays once);
- ``first``: the first compile in a process (loading NVRTC and its built-in headers);
- ``cold`` / ``again``: distinct configurations, then the same ones again in the same process
  and in a new one (does anything outside the process keep compiled work?);
- ``variants``: one set of configurations as a cubin, as PTX, without CuPy's include folder,
  without ``-ftz=true``, and with ``-minimal`` (NVRTC 12.4 on);
- ``again_fresh_home``: the same ones in a new process whose HOME, XDG_CACHE_HOME, TMPDIR and
  CUDA_CACHE_PATH are new, empty folders (is the keeper a per-user cache?), then with only
  CUDA_CACHE_PATH new (is it the CUDA cache?);
- ``again_dropped_caches``: the same ones after the kernel's page cache is dropped, where the
  machine allows it (``dropped`` says whether it did: is the keeper the page cache?);
- ``pair_cubin`` / ``pair_minimal``: the same configurations with and without ``-minimal``,
  each in a new process with a new, empty CUDA cache, twice in turn;
- ``parallel``: the same work on W worker processes at once, as the compile workers do;
- ``grouped_K``: K configurations in one NVRTC program (each copy of the kernel renamed by a
  macro), each group cold in a new process with a new CUDA cache: what a compile costs per
  configuration once NVRTC's fixed cost per program is shared;
- ``files``: files written under HOME, /tmp and /var/tmp while it ran (a cache nobody named).

    python benchmarks/compile_anatomy.py [--configs 24] [--workers 15]

Needs CuPy and an NVIDIA GPU (only to read its compute capability); compiles nothing on it.
"""

from __future__ import annotations

import argparse
import itertools
import json
import multiprocessing
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SOURCE = (REPO / "examples" / "matmul_cupy" / "matmul.cu").read_text()
PARAMS = {
    "block_size_x": [16, 32, 64],
    "block_size_y": [4, 8, 16, 32],
    "tile_size_x": [1, 2, 4, 8],
    "tile_size_y": [1, 2, 4, 8],
    "tile_k": [16, 32],
}


def configs(count: int, skip: int = 0) -> list[dict[str, int]]:
    """Valid configurations of the example's space, in a fixed order."""
    out = []
    for values in itertools.product(*PARAMS.values()):
        c = dict(zip(PARAMS, values))
        bx, by, tx, ty, tk = c["block_size_x"], c["block_size_y"], c["tile_size_x"], c["tile_size_y"], c["tile_k"]
        if not 64 <= bx * by <= 1024 or (by * ty + bx * tx) * tk * 4 > 48 * 1024 or tx * ty > 32:
            continue
        if by * ty * tk < bx * by or bx * tx * tk < bx * by:
            continue
        out.append(c)
    return out[skip : skip + count]


def code(config: dict[str, int]) -> str:
    defines = dict(config, N=4096, kernel_tuner=1)
    return "\n".join(f"#define {k} {v}" for k, v in defines.items()) + "\n#line 1\n" + SOURCE


def grouped_code(group: list[dict[str, int]]) -> str:
    """Several configurations in one program: each copy's macros and kernel name undone after it."""
    parts = []
    for i, config in enumerate(group):
        defines = dict(config, N=4096, kernel_tuner=1, matmul=f"matmul_{i}")
        parts.append("\n".join(f"#define {k} {v}" for k, v in defines.items()) + "\n#line 1\n" + SOURCE)
        parts.append("\n".join(f"#undef {k}" for k in (*defines, "BM", "BN", "THREADS")))
    return "\n".join(parts) + "\n"


def options(kind: str) -> list[str]:
    import cupy
    from cupy_backends.cuda.libs import nvrtc

    major, minor = cupy.cuda.Device(0).compute_capability[:1], cupy.cuda.Device(0).compute_capability[1:]
    capability = int(major + minor)
    include = f"-I{os.path.join(os.path.dirname(cupy.__file__), '_core', 'include')}"
    arch = f"-arch=sm_{capability}" if capability in nvrtc.getSupportedArchs() else "-arch=compute_90"
    return {
        "cubin": [arch, "-ftz=true", include],
        "ptx": [arch.replace("sm_", "compute_"), "-ftz=true", include],
        "no_include": [arch, "-ftz=true"],
        "no_ftz": [arch, include],
        "minimal": [arch, "-ftz=true", include, "-minimal"],
    }[kind]


def read_bytes() -> int:
    for line in Path("/proc/self/io").read_text().splitlines():
        if line.startswith("read_bytes:"):
            return int(line.split()[1])
    return -1


def compile_one(source: str, opts: list[str]) -> float:
    from cupy_backends.cuda.libs import nvrtc

    start = time.perf_counter()
    program = nvrtc.createProgram(source, "kernel.cu", [], [])
    try:
        nvrtc.compileProgram(program, opts)
        image = nvrtc.getCUBIN(program) if any("sm_" in o for o in opts) else nvrtc.getPTX(program)
        assert len(image) > 0
    finally:
        nvrtc.destroyProgram(program)
    return time.perf_counter() - start


def child(task: str, count: int, skip: int, kind: str) -> None:
    """One fresh process: the measurement ``task`` names, printed as one JSON line."""
    t0 = time.perf_counter()
    from cupy_backends.cuda.libs import nvrtc  # noqa: F401

    import_s = time.perf_counter() - t0
    opts = options(kind)
    chosen = configs(count, skip)
    if task.startswith("grouped_"):
        size = int(task.split("_")[1])
        sources = [grouped_code(chosen[i : i + size]) for i in range(0, len(chosen), size)]
    else:
        sources = [code(c) for c in chosen]
    io0 = read_bytes()
    times = [compile_one(s, opts) for s in sources]
    io1 = read_bytes()
    again = [compile_one(s, opts) for s in sources] if task == "cold" else []
    print(
        json.dumps(
            {
                "task": task,
                "kind": kind,
                "import_s": round(import_s, 3),
                "first_s": round(times[0], 3),
                "rest_median_s": round(sorted(times[1:])[len(times[1:]) // 2], 4) if len(times) > 1 else None,
                "sum_s": round(sum(times), 3),
                "again_same_process_sum_s": round(sum(again), 3) if again else None,
                "disk_read_mb": round((io1 - io0) / 1e6, 1),
                "count": len(times),
                "configurations": len(chosen),
            }
        ),
        flush=True,
    )


def _parallel_one(args: tuple[int, str]) -> float:
    skip, kind = args
    return compile_one(code(configs(1, skip)[0]), options(kind))


def run_child(*args: str, env: dict[str, str] | None = None) -> None:
    out = subprocess.run(
        [sys.executable, __file__, "--child", *args], capture_output=True, text=True, timeout=600, env=env
    )
    sys.stdout.write(out.stdout)
    if out.returncode:
        sys.stdout.write(json.dumps({"child_failed": args, "stderr": out.stderr[-2000:]}) + "\n")


def library_read() -> None:
    """Reads NVRTC's libraries as a fresh machine's first compile must."""
    import cupy_backends.cuda.libs.nvrtc as binding

    folders = {Path(binding.__file__).parent}
    try:
        import nvidia

        folders |= {Path(p) for p in nvidia.__path__}
    except ImportError:
        pass
    files = [
        p for folder in folders for p in folder.rglob("*") if p.is_file() and "nvrtc" in p.name and ".so" in p.name
    ]
    start = time.perf_counter()
    size = sum(len(p.read_bytes()) for p in files)
    mount = subprocess.run(["df", "-T", str(next(iter(folders)))], capture_output=True, text=True).stdout
    print(
        json.dumps(
            {
                "task": "libraries",
                "files": [str(p) for p in files],
                "mb": round(size / 1e6, 1),
                "read_s": round(time.perf_counter() - start, 3),
                "filesystem": mount.strip().splitlines()[-1] if mount.strip() else "",
            }
        ),
        flush=True,
    )


def drop_page_cache() -> bool:
    """Asks the kernel to forget cached file pages (root only; a container may refuse)."""
    try:
        os.sync()
        Path("/proc/sys/vm/drop_caches").write_text("3\n")
        return True
    except OSError:
        return False


def written_since(start: float) -> None:
    roots = [Path.home(), Path("/tmp"), Path("/var/tmp")]
    found = []
    for root in roots:
        for p in root.rglob("*"):
            try:
                if p.is_file() and p.stat().st_mtime >= start:
                    found.append(str(p))
            except OSError:
                continue
    print(json.dumps({"task": "files", "written": found[:50], "count": len(found)}), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--configs", type=int, default=24)
    parser.add_argument("--workers", type=int, default=15)
    parser.add_argument("--child", nargs=4, metavar=("TASK", "COUNT", "SKIP", "KIND"))
    args = parser.parse_args()
    if args.child:
        task, count, skip, kind = args.child
        child(task, int(count), int(skip), kind)
        return
    start = time.time() - 1
    n = args.configs
    run_child("first", "1", "120", "cubin")  # the very first compile on this machine
    library_read()
    run_child("cold", str(n), "0", "cubin")  # n distinct, then the same n again in-process
    run_child("again_new_process", str(n), "0", "cubin")  # the same n in a new process
    with tempfile.TemporaryDirectory(prefix="anatomy-home-") as home:
        fresh = {
            name: os.path.join(home, name.lower()) for name in ("HOME", "XDG_CACHE_HOME", "TMPDIR", "CUDA_CACHE_PATH")
        }
        for folder in fresh.values():
            os.makedirs(folder)
        run_child("again_fresh_home", str(n), "0", "cubin", env=dict(os.environ, **fresh))
        cuda_cache = os.path.join(home, "cuda_cache_only")
        run_child("again_fresh_cuda_cache", str(n), "0", "cubin", env=dict(os.environ, CUDA_CACHE_PATH=cuda_cache))
    print(json.dumps({"task": "drop_caches", "dropped": drop_page_cache()}), flush=True)
    run_child("again_dropped_caches", str(n), "0", "cubin")
    kinds = ("cubin", "ptx", "no_include", "no_ftz", "minimal")
    for i, kind in enumerate(kinds):
        run_child("variant", str(n // 2), str(n + i * (n // 2)), kind)  # n/2 not yet compiled, each
    first_unseen = n + len(kinds) * (n // 2)
    w = args.workers
    with multiprocessing.get_context("spawn").Pool(w) as pool:
        pool.map(_parallel_one, [(150 + i, "cubin") for i in range(w)])  # start and warm the workers
        t0 = time.perf_counter()
        each = pool.map(_parallel_one, [(first_unseen + i, "cubin") for i in range(2 * w)])
        wall = time.perf_counter() - t0
    print(
        json.dumps(
            {
                "task": "parallel",
                "workers": w,
                "count": len(each),
                "wall_s": round(wall, 3),
                "per_compile_median_s": round(sorted(each)[len(each) // 2], 4),
                "cpu_count": os.cpu_count(),
            }
        ),
        flush=True,
    )
    with tempfile.TemporaryDirectory(prefix="anatomy-pair-") as pair:  # the same ones, each cold
        for kind in ("cubin", "minimal", "cubin", "minimal"):
            cache = tempfile.mkdtemp(dir=pair)
            run_child(f"pair_{kind}", str(n), str(n), kind, env=dict(os.environ, CUDA_CACHE_PATH=cache))
    with tempfile.TemporaryDirectory(prefix="anatomy-grouped-") as grouped:  # 24 unseen, each run cold
        for size in (1, 4, 8, 24):
            cache = tempfile.mkdtemp(dir=grouped)
            run_child(f"grouped_{size}", "24", "200", "cubin", env=dict(os.environ, CUDA_CACHE_PATH=cache))
    written_since(start)


if __name__ == "__main__":
    main()
