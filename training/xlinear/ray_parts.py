"""The Ray trainer's parts on disk, and the model its driver returns: the tree, the top levels' rankers, and
the finished sub-trees' files, never all rankers at once.

Each finished part (the top levels, or one sub-tree) is one file of the run's checkpoints (RUN/checkpoints/ray/),
written by the driver as the part arrives and then dropped from its memory: the driver keeps the label
order only. `StreamedXLinear.save` writes RUN/model's level files through the same writer as a local run
(models/xlinear/model.py save_tree_and_rankers), each lower level from the sub-trees' files one sub-tree's
array at a time, so the driver's peak is its share of X and Y plus one sub-tree's largest array.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import scipy.sparse as sp
from xtag.models.errors import reading
from xtag.models.files import index_bounds
from xtag.models.files.atomic import write_atomic
from xtag.models.inference.types import RankerLevel
from xtag.models.label_tree import ClusterChain
from xtag.models.xlinear.level_file import LevelPart
from xtag.models.xlinear.model import RankerConfig, XLinearModel, save_tree_and_rankers

WHAT = "a finished part of the Ray run"


def save_part(path: Path, order: np.ndarray, levels: list[RankerLevel], split_level: int) -> None:
    """A finished part (top or sub-tree): its label order and its rankers, in one file written atomically."""
    arrays: dict = {"order": order.astype(np.int64), "split_level": np.int64(split_level)}
    for s, level in enumerate(levels):
        W = level.W.tocsr()
        arrays |= {f"data_{s}": W.data, f"indices_{s}": W.indices, f"indptr_{s}": W.indptr}
        arrays |= {f"shape_{s}": np.asarray(W.shape, np.int64), f"bias_{s}": level.bias}
    write_atomic(path, lambda fh: np.savez(fh, **arrays))


def load_part(path: Path) -> tuple[np.ndarray, list[RankerLevel], int]:
    """A part whole (the top levels: the meta-tree the driver holds)."""
    with reading(path, WHAT), np.load(path, allow_pickle=False) as z:
        n = sum(1 for name in z.files if name.startswith("bias_"))
        levels = []
        for s in range(n):
            shape, indptr = _rows(z, s)
            indices = z[f"indices_{s}"]
            index_bounds.pointer(f"indptr_{s}", indptr, len(indices))
            index_bounds.in_range(f"indices_{s}", indices, 0, shape[1], "the feature columns")
            levels.append(
                RankerLevel(W=sp.csr_matrix((z[f"data_{s}"], indices, indptr), shape=shape), bias=z[f"bias_{s}"])
            )
        return z["order"], levels, int(z["split_level"])


def load_order(path: Path) -> np.ndarray:
    """A part's label order alone (a resumed sub-tree: its rankers stay on disk)."""
    with reading(path, WHAT), np.load(path, allow_pickle=False) as z:
        return z["order"]


def _rows(z, s: int) -> tuple[tuple[int, int], np.ndarray]:
    shape = tuple(int(v) for v in index_bounds.integers(f"shape_{s}", z[f"shape_{s}"]))
    indptr = index_bounds.integers(f"indptr_{s}", z[f"indptr_{s}"])
    if len(shape) != 2 or len(indptr) != shape[0] + 1:
        raise index_bounds.fail(f"indptr_{s}", f"{len(indptr)} entries for the shape {list(shape)}")
    return shape, indptr


def level_part(path: Path, s: int, n_features: int) -> LevelPart:
    """Level `s` of the part at `path` (its first level below the split: 0), read array by array when written."""
    with reading(path, WHAT), np.load(path, allow_pickle=False) as z:
        shape, indptr = _rows(z, s)
    if shape[1] != n_features:
        raise index_bounds.fail(f"shape_{s}", f"{shape[1]} feature columns, the model has {n_features}")

    def read(name: str) -> np.ndarray:
        with reading(path, WHAT), np.load(path, allow_pickle=False) as z:
            array = z[f"{name}_{s}"]
            if name == "indptr":
                index_bounds.pointer(f"indptr_{s}", array, int(indptr[-1]))
            elif name == "indices":
                index_bounds.in_range(f"indices_{s}", array, 0, n_features, "the feature columns")
            return array

    return LevelPart(shape[0], int(indptr[-1]), read)


@dataclass(frozen=True)
class StreamedXLinear:
    """XR-Linear trained as Ray tasks, as its driver holds it: `top` the rankers of the levels down to the split,
    `parts` the sub-trees' files in tree order, each with `below` levels of rankers under the split. `save` writes
    the same files as the equal XLinearModel's; `load` gives that model (whole, in memory: tests and benches)."""

    chain: ClusterChain
    top: list[RankerLevel]
    parts: list[Path]
    below: int
    config: RankerConfig
    scratch: tempfile.TemporaryDirectory | None = None  # holds `parts` when the run had no checkpoint folder

    def save(self, folder: Path) -> None:
        lower = [[level_part(p, s, self.config.n_features) for p in self.parts] for s in range(self.below)]
        save_tree_and_rankers(folder, self.chain, [*([LevelPart.of(level)] for level in self.top), *lower], self.config)

    def with_config(self, config: RankerConfig) -> StreamedXLinear:
        return replace(self, config=config)

    def load(self) -> XLinearModel:
        with tempfile.TemporaryDirectory() as tmp:
            self.save(Path(tmp))
            return XLinearModel.load(Path(tmp))
