"""Compiled kernels that outlive the run: a folder of images, keyed by everything that changes one.

Reruns, resumed runs, ``--confirm`` and calibration compile candidates compiled before. So does
another strategy on the same space. Compiling is the largest share of a rank's time
(docs/cupy-backend.md). So both backends wrap their compiler in ``cached``. The compile workers,
``run`` and ``retime`` all call it. It looks for the image under a digest of two things. One is
the compiler's identity: its path and version, the driver's, the target architecture. The other
is the compiler's inputs for this configuration: the source after its defines, the options.
After a compile, it keeps what was made.

Every rank and compile worker of a node shares the folder, and a run may be killed at any
moment. So an entry is written whole to a temporary file and renamed into place. A reader sees
the old entry or the new one, never half of one. Every entry carries its digest and a SHA-256
of itself. A truncated, damaged or foreign entry is compiled again and replaced, never loaded.
Loading a cached image runs its code, so the folder must be the user's own, writable by no one
else. A folder that is not, or cannot be written, means no cache: one warning per node, and the
run goes on. Only images are kept. A configuration that failed to compile is compiled again:
its failure may be the environment's (a killed compiler, a full disk).

The entries keep to ``MPITUNE_KERNEL_CACHE_MAX_MB`` (2048 MiB; 0: no bound). Else a disk fills
with the images of spaces long tuned. A write that takes them past it removes the least recently
used; loading an entry touches it. The scans also remove the temporary files of writers killed
an hour or more ago (kernel_cache_upkeep.py).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import stat
import struct
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from mpitune.backends import kernel_cache_upkeep
from mpitune.backends.base import Compiled, Compiler
from mpitune.errors import environment_number
from mpitune.model.work import Work

log = logging.getLogger(__name__)

CACHE_VARIABLE = "MPITUNE_KERNEL_CACHE"  # a folder; off (0, false, no) for none; unset, "" or on: the default
_OFF = ("off", "0", "false", "no")
_ON = ("", "on", "1", "true", "yes")
MAX_MB_VARIABLE = "MPITUNE_KERNEL_CACHE_MAX_MB"  # the MiB the entries may take; 0: no bound
DEFAULT_MAX_MB = 2048
# What an entry starts with: the format's name and version, then the SHA-256 of the rest.
MAGIC = b"MPITUNE-KERNEL-CACHE-1\n"
_LENGTH = struct.Struct("<I")  # the header's length, before the header (JSON) and the image
MAX_ENTRY_BYTES = 256 << 20  # no image comes near; a larger file is not an entry of ours


def default_folder(environ: Mapping[str, str]) -> str:
    """``$XDG_CACHE_HOME/mpitune/kernels``, else ``~/.cache/mpitune/kernels`` (the XDG rule: a
    relative XDG_CACHE_HOME is ignored)."""
    base = environ.get("XDG_CACHE_HOME", "")
    if not os.path.isabs(base):
        base = os.path.join(environ.get("HOME") or os.path.expanduser("~"), ".cache")
    return os.path.join(base, "mpitune", "kernels")


def cache_folder(environ: Mapping[str, str] | None = None) -> str:
    """The folder ``MPITUNE_KERNEL_CACHE`` names: '' when it turns the cache off, the default
    folder when it is unset or on, else the folder it names (made absolute)."""
    env = os.environ if environ is None else environ
    value = env.get(CACHE_VARIABLE, "").strip()
    if value.lower() in _OFF:
        return ""
    if value.lower() in _ON:
        return default_folder(env)
    return os.path.abspath(os.path.expanduser(value))


def max_bytes(environ: Mapping[str, str] | None = None) -> int:
    """The bound ``MPITUNE_KERNEL_CACHE_MAX_MB`` sets, in bytes (0: none).

    A value that is no number of 0 or more is refused in one line (``UserError``). So is every
    variable of a run: the command line checks it before MPI starts (cli/running.py).
    """
    return int(environment_number(MAX_MB_VARIABLE, DEFAULT_MAX_MB, zero_ok=True, environ=environ) * (1 << 20))


class BadEntry(Exception):
    """An entry that is not a whole, undamaged image of the digest it is filed under."""


@dataclass(frozen=True)
class Image:
    """What an entry holds: the compiler's image and how to find the kernel in it."""

    data: bytes
    entry: str = ""
    symbols: dict[str, str] | None = None
    as_file: bool = False  # loaded from a file (a shared library), not from memory (a cubin)


def encode(digest: str, image: Image) -> bytes:
    """An entry's bytes: MAGIC, the SHA-256 of the rest, the header's length, the header, the image.

    The header holds the entry's digest, so that an entry copied under another name is refused.
    It also holds the image's metadata.
    """
    meta = {"digest": digest, "entry": image.entry, "symbols": image.symbols, "file": image.as_file}
    header = json.dumps({**meta, "bytes": len(image.data)}).encode()
    body = _LENGTH.pack(len(header)) + header + image.data
    return MAGIC + hashlib.sha256(body).digest() + body


def decode(digest: str, data: bytes) -> Image:
    """The image of an entry read whole; ``BadEntry`` for anything else."""
    if not data.startswith(MAGIC):
        raise BadEntry("not an entry of this format")
    checksum, body = data[len(MAGIC) : len(MAGIC) + 32], data[len(MAGIC) + 32 :]
    if hashlib.sha256(body).digest() != checksum:
        raise BadEntry("its checksum does not match (truncated or damaged)")
    (length,) = _LENGTH.unpack_from(body)
    header = json.loads(body[_LENGTH.size : _LENGTH.size + length])
    image = body[_LENGTH.size + length :]
    if header.get("digest") != digest:
        raise BadEntry(f"it holds another key's image ({header.get('digest')!r})")
    if header.get("bytes") != len(image):
        raise BadEntry("its image is not the length its header says")
    return Image(image, str(header.get("entry", "")), header.get("symbols"), bool(header.get("file")))


def digest_of(parts: Sequence[str | bytes]) -> str:
    """SHA-256 of the parts, each prefixed by its length, so that no two sequences of parts run
    together into the same bytes (("ab", "c") and ("a", "bc") differ)."""
    sha = hashlib.sha256()
    for part in parts:
        raw = part.encode() if isinstance(part, str) else part
        sha.update(struct.pack("<Q", len(raw)))
        sha.update(raw)
    return sha.hexdigest()


@dataclass(frozen=True)
class KernelCache:
    """The folder of entries, ``<folder>/<digest[:2]>/<digest>.kernel``: 256 subfolders keep
    the ones of a large space (tens of thousands) out of one directory listing. ``bound_bytes``:
    what the entries may take (0: no bound)."""

    folder: str
    bound_bytes: int = DEFAULT_MAX_MB << 20

    def path(self, digest: str) -> str:
        return os.path.join(self.folder, digest[:2], f"{digest}.kernel")

    def load(self, digest: str) -> Image | None:
        """The image filed under ``digest``; None when there is none or it is bad (said at debug
        level: the compile that follows replaces it)."""
        path = self.path(digest)
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError:  # none yet (or a link, which is not ours): compiled and written anew
            return None
        try:
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode) or info.st_size > MAX_ENTRY_BYTES:
                raise BadEntry("not a regular file of an entry's size")
            with os.fdopen(fd, "rb", closefd=False) as fh:
                image = decode(digest, fh.read())
            with contextlib.suppress(OSError):  # its last use, by which eviction goes
                os.utime(fd)
            return image
        except (BadEntry, OSError, ValueError, struct.error) as exc:
            log.debug("kernel cache entry %s is not usable (%s): compiling again", path, exc)
            return None
        finally:
            os.close(fd)

    def store(self, digest: str, image: Image) -> None:
        """Write the entry whole under a temporary name in its folder, then rename it into place.

        An entry is then absent, the old one or the new one, whoever reads it and whenever this
        process is killed. Then the folder is kept within its bound (kernel_cache_upkeep.py).
        Never raises: a cache that cannot be written is no cache.
        """
        path = self.path(digest)
        data = encode(digest, image)
        tmp = ""
        try:
            os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=f".{digest[:16]}.", suffix=".tmp", dir=os.path.dirname(path))
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
            os.replace(tmp, path)
            tmp = ""
        except OSError as exc:
            _warn_once(f"cannot write to the kernel cache {self.folder} ({exc}); compiled kernels are not kept")
        else:
            kernel_cache_upkeep.wrote(self.folder, len(data), self.bound_bytes)
        finally:
            if tmp:
                _remove(tmp)


class KeyedCompiler(Protocol):
    """A backend's compiler that can say what its image depends on."""

    def __call__(self, work: Work) -> Compiled: ...

    def cache_key(self, work: Work) -> Sequence[str | bytes] | None:
        """What of this configuration's compile changes its image, besides the compiler's identity.

        That is the source after defines, the defines, the options. None when it is not to be
        cached: it cannot compile.
        """
        ...

    def image_path(self, work: Work) -> str | None:
        """Where a file image of this configuration is to be (a shared library); None when the
        image is loaded from memory."""
        ...


@dataclass(frozen=True)
class CachedCompiler:
    """A backend's compiler with the cache in front of it; picklable, for the compile workers.
    ``identity``: the compiler's own (path, version, driver, target), the same for every
    configuration, so taken once."""

    inner: KeyedCompiler
    cache: KernelCache
    identity: str

    def __call__(self, work: Work) -> Compiled:
        started = time.perf_counter()
        parts = self.inner.cache_key(work)
        if parts is None:
            return self.inner(work)
        digest = digest_of([self.identity, *parts])
        image = self.cache.load(digest)
        if image is not None:
            hit = self._restored(work, image)
            if hit is not None:
                hit.started, hit.finished = started, time.perf_counter()
                log.debug("configuration %d: from the kernel cache (%s)", work.config_id, digest[:16])
                return hit
        compiled = self.inner(work)
        if compiled.status is None and compiled.artifact:
            kept = self._image(compiled)
            if kept is not None:
                self.cache.store(digest, kept)
            compiled.finished = time.perf_counter()  # keeping it is part of what compiling cost
        return compiled

    def _restored(self, work: Work, image: Image) -> Compiled | None:
        """The configuration compiled, from its cached image: a file image is written where the
        compiler would have put it (the backend unlinks it once loaded)."""
        artifact: bytes | str = image.data
        if image.as_file:
            path = self.inner.image_path(work)
            if path is None:
                return None
            try:
                with open(path, "wb") as fh:
                    fh.write(image.data)
            except OSError as exc:
                log.debug("cannot write a cached image to %s (%s): compiling", path, exc)
                return None
            artifact = path
        return Compiled(work.config_id, artifact=artifact, entry=image.entry, symbols=image.symbols)

    @staticmethod
    def _image(compiled: Compiled) -> Image | None:
        if isinstance(compiled.artifact, bytes):
            return Image(compiled.artifact, compiled.entry, compiled.symbols)
        try:
            with open(compiled.artifact, "rb") as fh:
                return Image(fh.read(), compiled.entry, compiled.symbols, as_file=True)
        except OSError:
            return None


def cached(compiler: KeyedCompiler, identity: Callable[[], str | None], local_rank: int = 0) -> Compiler:
    """``compiler`` behind the cache ``MPITUNE_KERNEL_CACHE`` names, or ``compiler`` itself.

    It is itself when the cache is off, or its folder cannot be made private and writable. So
    it is when the compiler cannot say what it is (``identity()`` None). The node's first rank
    (``local_rank`` 0) warns of a folder that cannot serve. The others say it at debug level:
    one line per node.
    """
    folder = cache_folder()
    if not folder:
        return compiler
    why = unusable(folder)
    if why:
        say = log.warning if local_rank == 0 else log.debug
        say("kernel cache %s not used: %s; set %s=off to say so, or to another folder", folder, why, CACHE_VARIABLE)
        return compiler
    name = identity()
    if name is None:
        log.debug("the compiler cannot say what it is: kernels are not cached")
        return compiler
    return CachedCompiler(compiler, KernelCache(folder, max_bytes()), name)


def unusable(folder: str) -> str:
    """Why ``folder`` cannot hold the cache; '' if it can.

    It is made where missing, private. It must be this user's folder, writable by no one else:
    a kernel loaded from it runs. And this process must be able to write it.
    """
    try:
        os.makedirs(folder, mode=0o700, exist_ok=True)
        info = os.stat(folder)
    except OSError as exc:
        return f"cannot make it ({exc.strerror or exc})"
    if not stat.S_ISDIR(info.st_mode):
        return "not a folder"
    if info.st_uid != os.getuid():
        return "another user owns it, and a kernel loaded from it runs as you"
    if info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return f"others may write to it (mode {stat.S_IMODE(info.st_mode):o}), and a kernel loaded from it runs as you"
    if not os.access(folder, os.W_OK | os.X_OK):
        return "it is not writable"
    try:  # access() believes a read-only mount writable, and root every folder
        fd, probe = tempfile.mkstemp(prefix=".probe.", dir=folder)
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        return f"cannot write to it ({exc.strerror or exc})"
    return ""


_warned = [False]  # whether this process has said that the cache cannot be written


def _warn_once(message: str) -> None:
    """A full disk or a folder made read-only during a run: said once per process, then at debug
    level, since every compile after would say it again."""
    (log.debug if _warned[0] else log.warning)("%s", message)
    _warned[0] = True


def _remove(path: str) -> None:
    with contextlib.suppress(OSError):
        os.unlink(path)
