"""One ranker level's file (rankers/level_T.npz), written from blocks of consecutive rows, one block at a time.

The file is what np.savez writes (an uncompressed zip of .npy members: data, indices, indptr, shape, bias),
so np.load and load_level read it unchanged; but each member is streamed block by block, so a writer never
holds the whole level. The Ray trainer's driver writes a level from the sub-trees' checkpoints this way
(training/xlinear/ray_parts.py) with one sub-tree's array in memory at a time; a local run's level is one block.
"""

from __future__ import annotations

import zipfile
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from xtag.models.errors import XtagError
from xtag.models.files.atomic import write_atomic
from xtag.models.inference.types import RankerLevel


@dataclass(frozen=True)
class LevelPart:
    """Rows of a ranker level: their count, their weights' count, and `read(name)`, which returns one of their
    arrays ("data", "indices", "indptr" from 0, "bias") only when the writer reaches it."""

    rows: int
    nnz: int
    read: Callable[[str], np.ndarray]

    @classmethod
    def of(cls, level: RankerLevel) -> LevelPart:
        W = level.W.tocsr()
        arrays = {"data": W.data, "indices": W.indices, "indptr": W.indptr, "bias": level.bias}
        return cls(W.shape[0], int(W.indptr[-1]), arrays.__getitem__)


def write_level(path: Path, parts: Sequence[LevelPart], n_columns: int) -> None:
    """The level whose rows are `parts`' rows, in order, written atomically (models/files/atomic.py)."""
    rows, nnz = sum(p.rows for p in parts), sum(p.nnz for p in parts)

    def write(fh) -> None:
        with zipfile.ZipFile(fh, mode="w", compression=zipfile.ZIP_STORED, allowZip64=True) as zf:
            _member(zf, "data", np.float32, nnz, (p.read("data") for p in parts))
            _member(zf, "indices", np.int32, nnz, (p.read("indices") for p in parts))
            _member(zf, "indptr", np.int64, rows + 1, _pointers(parts))
            _member(zf, "shape", np.int64, 2, [np.asarray([rows, n_columns])])
            _member(zf, "bias", np.float32, rows, (p.read("bias") for p in parts))

    write_atomic(path, write)


def _pointers(parts: Sequence[LevelPart]) -> Iterable[np.ndarray]:
    """The level's row pointers: each part's own, shifted by the weights of the parts before it."""
    yield np.zeros(1, np.int64)
    offset = 0
    for part in parts:
        yield part.read("indptr")[1:].astype(np.int64) + offset
        offset += part.nnz


def _member(zf: zipfile.ZipFile, name: str, dtype, length: int, chunks: Iterable[np.ndarray]) -> None:
    """One .npy member of `length` values, as np.save writes it (header 1.0), from its chunks in order."""
    header = {"descr": np.lib.format.dtype_to_descr(np.dtype(dtype)), "fortran_order": False, "shape": (length,)}
    written = 0
    with zf.open(f"{name}.npy", mode="w", force_zip64=True) as fid:
        np.lib.format.write_array_header_1_0(fid, header)
        for chunk in chunks:
            chunk = np.ascontiguousarray(chunk, dtype=dtype)
            fid.write(memoryview(chunk).cast("B"))
            written += len(chunk)
    if written != length:  # a part whose arrays disagree with its counts: never a file that lies about its shape
        raise XtagError(f"{name}: {written} values written for the {length} announced")
