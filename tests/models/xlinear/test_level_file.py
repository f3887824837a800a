"""A ranker level written from blocks of rows: the same file as the level written whole, with at most two
blocks' arrays alive at a time (the Ray trainer's driver writes its model this way, never holding all rankers)."""

from __future__ import annotations

import weakref
import zipfile

import numpy as np
import pytest
import scipy.sparse as sp
from xtag.models.errors import XtagError
from xtag.models.inference.types import RankerLevel
from xtag.models.xlinear.level_file import LevelPart, write_level
from xtag.models.xlinear.model import load_level, save_level

ROWS, COLS = 40, 30
CUTS = [(0, 7), (7, 7), (7, 25), (25, 33), (33, 40)]  # an empty block included


@pytest.fixture
def level() -> RankerLevel:
    rng = np.random.default_rng(5)
    W = sp.random(ROWS, COLS, density=0.2, random_state=rng, format="csr", dtype=np.float32)
    return RankerLevel(W=W, bias=rng.random(ROWS).astype(np.float32))


def members(path) -> dict[str, bytes]:
    with zipfile.ZipFile(path) as zf:
        return {name: zf.read(name) for name in zf.namelist()}


def test_a_level_written_whole_is_what_np_savez_writes(level, tmp_path):
    save_level(level, tmp_path / "level.npz")
    W = level.W
    arrays = {"data": W.data, "indices": W.indices.astype(np.int32), "indptr": W.indptr.astype(np.int64)}
    np.savez(tmp_path / "savez.npz", **arrays, shape=np.asarray(W.shape, np.int64), bias=level.bias)
    assert members(tmp_path / "level.npz") == members(tmp_path / "savez.npz")


def test_a_level_written_in_blocks_equals_it_written_whole_holding_two_blocks_at_most(level, tmp_path):
    alive, peak = [0], [0]

    def tracked(a: int, b: int) -> LevelPart:
        whole = LevelPart.of(RankerLevel(W=level.W[a:b], bias=level.bias[a:b]))

        def read(name: str) -> np.ndarray:
            array = whole.read(name).copy()  # as read from a file: a new array each time
            alive[0] += 1
            peak[0] = max(peak[0], alive[0])
            weakref.finalize(array, lambda: alive.__setitem__(0, alive[0] - 1))
            return array

        return LevelPart(whole.rows, whole.nnz, read)

    write_level(tmp_path / "blocks.npz", [tracked(a, b) for a, b in CUTS], COLS)
    save_level(level, tmp_path / "whole.npz")
    assert members(tmp_path / "blocks.npz") == members(tmp_path / "whole.npz")
    assert (load_level(tmp_path / "blocks.npz").W != level.W).nnz == 0
    assert peak[0] <= 2 < len(CUTS)


def test_a_block_whose_arrays_disagree_with_its_counts_leaves_no_file(level, tmp_path):
    whole = LevelPart.of(level)
    short = LevelPart(whole.rows, whole.nnz + 1, whole.read)
    with pytest.raises(XtagError, match="data: .* values written for the .* announced"):
        write_level(tmp_path / "bad.npz", [short], COLS)
    assert not (tmp_path / "bad.npz").exists()
