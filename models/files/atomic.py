"""Files that appear whole or not at all: checkpoints and bundle files survive a kill (or power loss) mid-write.

A writer writes a hidden temporary beside the target, flushes it to disk, renames it over the target (one
atomic step on POSIX) and flushes the directory, so a reader sees the old file or the new one, never a
0-byte or half-written one. The temporary's name is fixed (`.NAME.tmp`): a write killed before the rename
leaves at most one such file per target, which the next write of that target reuses. Used by every
checkpoint writer; models/ code writes through it too, so it lives here (models never imports training).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO


def temporary(path: Path) -> Path:
    """Where `replacing(path)` writes before the rename."""
    return path.with_name(f".{path.name}.tmp")


def fsync_dir(folder: Path) -> None:
    """Flush a directory's entries (a rename is durable only after this); a no-op where unsupported."""
    try:
        fd = os.open(folder, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _fsync_file(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@contextmanager
def replacing(path: Path) -> Iterator[Path]:
    """Yield the temporary path to write (for APIs that take a file name, e.g. safetensors); on success it is
    flushed and renamed over `path`; on an error it is removed and `path` keeps its previous content."""
    path = Path(path)
    tmp = temporary(path)
    try:
        yield tmp
        _fsync_file(tmp)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    fsync_dir(path.parent)


def write_atomic(path: Path, write: Callable[[BinaryIO], None]) -> None:
    """`write(fh)` into an open binary file that replaces `path` only once complete (np.save/np.savez take one)."""
    with replacing(path) as tmp, open(tmp, "wb") as fh:
        write(fh)


def write_text_atomic(path: Path, text: str) -> None:
    """Path.write_text, atomically (UTF-8)."""
    write_atomic(path, lambda fh: fh.write(text.encode("utf-8")))
