"""An XR-Linear model as data: the cluster chain plus one sparse linear ranker per tree level.

Predictions come from the compiled engine (models/engine/), over the rankers rearranged into its
chunked layout; models/inference/beam_search.py stays the reference it is tested against, and what the trainer's
matcher-aware negatives use on partially trained trees.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import scipy.sparse as sp
from pydantic import BaseModel, ConfigDict, Field, model_validator
from xtag.models.errors import XtagError, reading
from xtag.models.files import index_bounds
from xtag.models.files.atomic import write_text_atomic
from xtag.models.inference.model import CostHint, Model
from xtag.models.inference.types import FirstLevelSearch, PostProcessor, Predictions, RankerLevel, TreeIndex
from xtag.models.label_tree import ClusterChain
from xtag.models.xlinear.level_file import LevelPart, write_level

ENGINE_DIR = "engine"  # rankers/engine/: the compiled engine's layout, written by export, memory-mapped at load


class RankerConfig(BaseModel):
    """How a bundle's rankers are combined at prediction time (stored as rankers/config.json)."""

    model_config = ConfigDict(extra="forbid")

    post_processor: PostProcessor = "l3-hinge"
    beam_size: int = Field(10, ge=1)
    n_features: int = Field(..., ge=1)
    dense_features: int = Field(0, ge=0, description="trailing dense columns (Φ_cat's embedding), scored by BLAS")

    @model_validator(mode="after")
    def _dense_tail_inside(self) -> RankerConfig:
        if self.dense_features > self.n_features:
            raise ValueError(f"dense_features {self.dense_features} exceeds n_features {self.n_features}")
        return self


class XLinearModel(Model):
    """Tree + rankers; `first_level` (a FAISS shortlist from the bundle) replaces level-1 scoring when set."""

    scores_labels = True

    def __init__(
        self,
        chain: ClusterChain,
        levels: list[RankerLevel],
        config: RankerConfig,
        first_level: FirstLevelSearch | None = None,
    ):
        if len(levels) != chain.depth:
            raise XtagError(f"model has {len(levels)} ranker levels for a tree of depth {chain.depth}")
        for t, level in enumerate(levels, start=1):
            if level.n_nodes != chain.level_size(t) or level.W.shape[1] != config.n_features:
                raise XtagError(
                    f"ranker level {t} has shape {level.W.shape}, expected ({chain.level_size(t)}, {config.n_features})"
                )
        self.chain, self.levels, self.config = chain, levels, config
        if config.dense_features:
            for level in levels:
                level.set_dense_tail(config.n_features - config.dense_features)
        self.first_level = first_level
        self.tree = TreeIndex(chain)
        self._compiled = None

    @property
    def compiled(self):
        """The rankers in the compiled engine's layout (xtag.models.engine.CompiledLevels), built on first use."""
        if self._compiled is None:
            from xtag.models.engine import CompiledLevels

            self._compiled = CompiledLevels.build(self.levels, self.chain)
        return self._compiled

    def prepare(self) -> float:
        """Build the engine layout and compile its kernels now, so that no request waits for either (bundle
        loading calls this); returns the seconds the kernels took to compile or load from numba's cache."""
        from xtag.models.engine import warm_up

        _ = self.compiled
        return warm_up()

    @property
    def n_labels(self) -> int:
        return self.chain.n_labels

    def cost_hint(self) -> CostHint:
        """A sparse beam search down the label tree: its nodes per level size the search."""
        return CostHint(level_nodes=tuple(int(level.W.shape[0]) for level in self.levels))

    def predict(self, X: sp.csr_matrix, k: int = 10, beam_size: int | None = None) -> Predictions:
        if X.shape[1] != self.config.n_features:
            raise XtagError(f"features have {X.shape[1]} columns, the model expects {self.config.n_features}")
        from xtag.models.engine import engine_beam_search

        beam = max(beam_size or self.config.beam_size, 1)
        return engine_beam_search(X, self.compiled, beam, k, self.config.post_processor, first_level=self.first_level)

    def score_labels(self, X, labels: list[np.ndarray]) -> Predictions:
        """Each document's `labels` by their path score Π_t post(m_t) over the label's ancestors (readable.py's
        path walk, which explanations use too), whatever the beam would have kept; ties broken by the summed
        margins, as the engine breaks them. Overrides Model.score_labels."""
        from xtag.models.inference.beam_search import POST_PROCESSORS
        from xtag.models.xlinear.readable import as_csr, pair_scores, path_nodes

        X, post = as_csr(X), POST_PROCESSORS[self.config.post_processor]
        width = max((len(row) for row in labels), default=0)
        out_l = np.full((len(labels), max(width, 1)), -1, np.int64)
        out_s = np.full(out_l.shape, -np.inf, np.float32)
        out_m = np.zeros(out_l.shape)
        docs = np.repeat(np.arange(len(labels)), [len(row) for row in labels])
        flat = np.concatenate([np.asarray(row, np.int64) for row in labels]) if labels else np.empty(0, np.int64)
        score, margin = np.ones(len(flat)), np.zeros(len(flat))
        for level, ancestors in zip(self.levels, path_nodes(self)):
            # labels share their upper nodes: each (document, node) pair is scored once (level 1 has a few nodes)
            pairs, where = np.unique(np.stack([docs, ancestors[flat]]), axis=1, return_inverse=True)
            if level.Wt is not None:  # a level of at most FULL_PRODUCT_MAX_NODES nodes: one product, as the search
                m = np.asarray((X @ level.Wt)[pairs[0], pairs[1]]).ravel() + level.bias[pairs[1]]
            else:
                m = pair_scores(level.W, level.bias, X, pairs[0], pairs[1])
            m = m[where.ravel()]
            score, margin = score * post(m), margin + m
        score = score.astype(np.float32)
        start = 0
        for d, row in enumerate(labels):
            stop = start + len(row)
            order = np.lexsort((-margin[start:stop], -score[start:stop])) + start
            out_l[d, : len(row)], out_s[d, : len(row)], out_m[d, : len(row)] = flat[order], score[order], margin[order]
            start = stop
        return Predictions(out_l, out_s, out_m)

    def readable(self, X, preds: Predictions) -> Predictions:
        """The scores a user sees: the engine's order, no block of labels at exactly 1.0 (readable.py); overrides
        Model.readable."""
        from xtag.models.xlinear.readable import readable_scores

        return readable_scores(self, X, preds)

    def save(self, folder: Path) -> None:
        save_tree_and_rankers(folder, self.chain, [[LevelPart.of(level)] for level in self.levels], self.config)

    def with_config(self, config: RankerConfig) -> XLinearModel:
        return XLinearModel(self.chain, self.levels, config, self.first_level)

    @classmethod
    def load(cls, folder: Path) -> XLinearModel:
        """The tree and rankers of a run or bundle folder (tree/, rankers/)."""
        return cls.load_rankers(folder / "rankers", ClusterChain.load_tree(folder / "tree"))

    @classmethod
    def load_rankers(cls, folder: Path, chain: ClusterChain) -> XLinearModel:
        """The rankers/ component over an already loaded tree; its engine layout is memory-mapped when the
        bundle has one (so worker processes share it), else built from the weights. Either way every index
        array is checked against its bounds first (models/files/index_bounds.py, models/engine/checks.py)."""
        with reading(folder / "config.json", "the rankers' configuration"):
            config = RankerConfig.model_validate_json((folder / "config.json").read_text())
        index_bounds.beam(str(folder / "config.json"), "beam_size", config.beam_size, chain.n_labels)
        levels = [load_level(folder / f"level_{t}.npz") for t in range(1, chain.depth + 1)]
        model = cls(chain, levels, config)
        if (folder / ENGINE_DIR).is_dir():
            from xtag.models.engine import CompiledLevels
            from xtag.models.engine.checks import check_layout

            compiled = CompiledLevels.load(folder / ENGINE_DIR)  # its errors name the file at fault
            check_layout(folder / ENGINE_DIR, compiled, chain, config.n_features, config.dense_features)
            model._compiled = compiled
        return model

    def save_engine_layout(self, rankers: Path) -> None:
        """rankers/engine/: the layout `load_rankers` maps instead of rebuilding it (bundles only, not runs)."""
        self.compiled.save(rankers / ENGINE_DIR)


def save_tree_and_rankers(
    folder: Path, chain: ClusterChain, levels: Sequence[Sequence[LevelPart]], config: RankerConfig
) -> None:
    """tree/ and rankers/ of a run's model folder, each level written from its parts (models/xlinear/level_file.py):
    the one writer of a model held whole (XLinearModel.save) and of one whose rankers are still on disk in pieces
    (the Ray trainer's, training/xlinear/ray_parts.py)."""
    (folder / "tree").mkdir(parents=True, exist_ok=True)
    (folder / "rankers").mkdir(parents=True, exist_ok=True)
    chain.save(folder / "tree" / "chain.npz")
    for t, parts in enumerate(levels, start=1):
        write_level(folder / "rankers" / f"level_{t}.npz", parts, config.n_features)
    write_text_atomic(folder / "rankers" / "config.json", config.model_dump_json(indent=2))


def save_level(level: RankerLevel, path: Path) -> None:
    """Atomically (models/files/atomic.py): a training checkpoint killed mid-write keeps the previous file."""
    write_level(path, [LevelPart.of(level)], level.W.shape[1])


def load_level(path: Path) -> RankerLevel:
    """Raises an XtagError naming the file and the cause when it is empty, truncated or inconsistent, or
    when an index array is out of bounds (scipy's sparse routines would read past them: models/files/index_bounds.py)."""
    with reading(path, "the ranker level"), np.load(path, allow_pickle=False) as z:
        shape = index_bounds.integers("shape", z["shape"])
        if shape.shape != (2,) or bool((shape < 0).any()):
            raise index_bounds.fail("shape", f"{shape.tolist()} is not (rows, columns)")
        rows, cols = int(shape[0]), int(shape[1])
        indptr, indices = index_bounds.integers("indptr", z["indptr"]), index_bounds.integers("indices", z["indices"])
        data, bias = z["data"], z["bias"]
        if len(indptr) != rows + 1:
            raise index_bounds.fail("indptr", f"{len(indptr)} entries for the {rows} rows in shape")
        index_bounds.pointer("indptr", indptr, len(indices))
        index_bounds.in_range("indices", indices, 0, cols, "the feature columns")
        if data.shape != indices.shape:
            raise index_bounds.fail("data", f"{data.shape} weights for {indices.shape} entries")
        if bias.shape != (rows,):
            raise index_bounds.fail("bias", f"{bias.shape} biases for {rows} rows")
        return RankerLevel(W=sp.csr_matrix((data, indices, indptr), shape=(rows, cols)), bias=bias)
