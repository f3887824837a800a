"""The one exception type for errors a user can cause (bad corpus row, bad request, bad bundle)."""

from __future__ import annotations

import zipfile
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


class XtagError(ValueError):
    """A user-facing error whose message names the file/line, field or bundle at fault."""


# What numpy, zipfile and json raise on an empty, truncated or malformed file: np.load of a 0-byte file raises
# EOFError (which click turns into a bare "Aborted."), a cut .npz BadZipFile, neither naming the file.
READ_ERRORS: tuple[type[BaseException], ...] = (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile, zlib.error)


@contextmanager
def reading(path: Path, what: str, *also: type[BaseException]) -> Iterator[None]:
    """Turn a failure to read `path` (READ_ERRORS, plus `also`) into an XtagError naming the file and the cause.

    An XtagError that already names `path` (or a file below it) passes through unchanged.
    """
    try:
        yield
    except XtagError as exc:
        if str(path) in str(exc):
            raise
        raise XtagError(f"{path}: {what}: {exc}") from exc
    except (*READ_ERRORS, *also) as exc:
        cause = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
        raise XtagError(f"{path}: cannot read {what} ({cause})") from exc
