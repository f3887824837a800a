"""Are a folder's float arrays finite? The one check for NaN and inf weights, wherever arrays are trusted.

A corrupt array (NaN weights or biases) loads and predicts without raising, yet scores NaN, returns no
label, or ranks garbage. The server scans a bundle with it before serving it (service/state/model_slot.py);
training scans a checkpoint before resuming from it and a run before exporting it (issue 30: `--resume`
took a checkpoint full of NaN, export then succeeded and `xtag predict` answered garbage). Reads .npy
(memory-mapped), .npz (one member at a time) and .safetensors (memory-mapped, torch-free), in chunks.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Iterable
from pathlib import Path

import numpy as np
from xtag.models.errors import XtagError, reading

ARRAY_SUFFIXES = (".npy", ".npz", ".safetensors")
CHUNK = 1 << 24  # elements scanned at once: a few hundred MB go in well under a second, in bounded memory
# safetensors dtypes that hold floats; BF16 has no numpy dtype and is read as its bits (see _nonfinite)
SAFETENSORS_FLOATS = {"F64": np.float64, "F32": np.float32, "F16": np.float16, "BF16": np.uint16}


def _nonfinite(array: np.ndarray, bfloat16: bool = False) -> int:
    flat = array.reshape(-1)
    n = 0
    for lo in range(0, flat.size, CHUNK):
        chunk = flat[lo : lo + CHUNK]
        # bfloat16 is the top half of a float32: all exponent bits set means inf or NaN
        n += int(((chunk & 0x7F80) == 0x7F80).sum()) if bfloat16 else int((~np.isfinite(chunk)).sum())
    return n


def _safetensors(path: Path) -> Iterable[tuple[str, np.ndarray, bool]]:
    """(name, float tensor as a read-only memory map, is bfloat16) for each float tensor of the file."""
    with open(path, "rb") as fh:
        (size,) = struct.unpack("<Q", fh.read(8))
        header = json.loads(fh.read(size))
    for name, entry in header.items():
        if name == "__metadata__" or entry["dtype"] not in SAFETENSORS_FLOATS:
            continue
        begin, end = entry["data_offsets"]
        if end > begin:
            dtype = np.dtype(SAFETENSORS_FLOATS[entry["dtype"]]).newbyteorder("<")
            data = np.memmap(path, dtype=np.uint8, mode="r", offset=8 + size + begin, shape=(end - begin,))
            yield name, data.view(dtype), entry["dtype"] == "BF16"


def nonfinite_arrays(folder: Path, files: Iterable[str]) -> list[str]:
    """Those of `files` (paths relative to `folder`; other than ARRAY_SUFFIXES skipped) whose float arrays
    hold NaN or inf, as `file[key] (n of size)` (key: the .npz member or safetensors tensor)."""
    bad = []

    def check(name: str, array: np.ndarray, bfloat16: bool = False) -> None:
        if array.dtype.kind in "fc" or bfloat16:
            n = _nonfinite(array, bfloat16)
            if n:
                bad.append(f"{name} ({n} of {array.size})")

    for rel in files:
        path = folder / rel
        if rel.endswith(".npy"):  # memory-mapped: scanned in chunks, never copied whole
            with reading(path, "an array"):
                check(rel, np.load(path, mmap_mode="r", allow_pickle=False))
        elif rel.endswith(".npz"):
            with reading(path, "an array"), np.load(path, allow_pickle=False) as z:
                for key in z.files:  # one member in memory at a time (an 1M-label level holds GBs)
                    check(f"{rel}[{key}]", z[key])
        elif rel.endswith(".safetensors"):
            with reading(path, "a tensor file", struct.error, TypeError):
                for key, array, bfloat16 in _safetensors(path):
                    check(f"{rel}[{key}]", array, bfloat16)
    return bad


def array_files(folder: Path) -> list[str]:
    """Every array file below `folder` (relative POSIX paths, sorted), leaving out writes in progress
    (models/files/atomic.py's `.NAME.tmp`, a checkpoint's `NAME.tmp/`): nothing reads those."""
    return sorted(
        path.relative_to(folder).as_posix()
        for path in folder.rglob("*")
        if path.suffix in ARRAY_SUFFIXES
        and path.is_file()
        and not any(part.endswith(".tmp") for part in path.relative_to(folder).parts)
    )


def refuse_nonfinite(folder: Path, files: Iterable[str], what: str) -> None:
    """Raise an XtagError naming `what` and each file (and array) that holds NaN or inf."""
    bad = nonfinite_arrays(folder, files)
    if bad:
        raise XtagError(f"{folder}: {what}: non-finite values (NaN or inf) in {', '.join(bad)}")
