"""The label embeddings as a FAISS inner-product index (rows L2-normalised, so scores are cosines), with each label's
training-document count, which the fusion reads as a feature.

Exact (IndexFlatIP) up to `exact_max_labels`, HNSW above it, as models/xlinear/shortlist.py does for the tree's first
level; written with faiss.write_index into the bundle, listed and checksummed in the manifest like every file.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field
from xtag.models.errors import XtagError, reading
from xtag.models.files import index_bounds
from xtag.models.files.atomic import write_text_atomic

INDEX_FILE = "faiss.index"
FREQUENCY_FILE = "frequencies.npy"


class LabelIndexConfig(BaseModel):
    """How the label index is built and searched; stored in label_text/index/config.json."""

    model_config = ConfigDict(extra="forbid")

    # A flat search costs labels × dim per document; HNSW about ef_search × M × dim. Measured at dim 256 on the
    # 2-core machine (bench/experiments/label_index_threshold.py): one query over 40,000 labels took 1.6 ms flat,
    # against 0.25 ms HNSW at recall@20 0.98 (ef 128); the two cross near 8,000 labels.
    exact_max_labels: int = Field(8192, ge=0, description="exact (flat) index up to this many labels, HNSW above")
    hnsw_m: int = Field(32, ge=4, description="HNSW graph degree")
    ef_construction: int = Field(200, ge=8)
    ef_search: int = Field(128, ge=1, description="HNSW search breadth (higher: better recall, slower)")


class LabelIndexInfo(BaseModel):
    model_config = ConfigDict(extra="forbid")

    index: Literal["flat", "hnsw"]
    labels: int
    dim: int
    config: LabelIndexConfig


class LabelIndex:
    """Top-M labels by cosine for document embeddings; `embeddings` is the labels × dim matrix it was built from."""

    def __init__(self, index, embeddings: np.ndarray, frequencies: np.ndarray, info: LabelIndexInfo):
        if embeddings.shape != (info.labels, info.dim) or index.ntotal != info.labels or index.d != info.dim:
            raise XtagError(f"label index holds {index.ntotal} × {index.d}, its config says {info.labels} × {info.dim}")
        if frequencies.shape != (info.labels,):
            raise XtagError(f"label index: {frequencies.shape} frequencies for {info.labels} labels")
        self.index, self.embeddings, self.frequencies, self.info = index, embeddings, frequencies, info
        if info.index == "hnsw":
            index.hnsw.efSearch = info.config.ef_search

    @property
    def n_labels(self) -> int:
        return self.info.labels

    @classmethod
    def build(
        cls, embeddings: np.ndarray, frequencies: np.ndarray, config: LabelIndexConfig | None = None
    ) -> LabelIndex:
        import faiss

        config = config or LabelIndexConfig()
        embeddings = np.ascontiguousarray(embeddings, dtype=np.float32)
        n, d = embeddings.shape
        if n <= config.exact_max_labels:
            index, kind = faiss.IndexFlatIP(d), "flat"
        else:
            index, kind = faiss.IndexHNSWFlat(d, config.hnsw_m, faiss.METRIC_INNER_PRODUCT), "hnsw"
            index.hnsw.efConstruction = config.ef_construction
        index.add(embeddings)
        info = LabelIndexInfo(index=kind, labels=n, dim=d, config=config)
        return cls(index, embeddings, np.asarray(frequencies, dtype=np.int64), info)

    def added(self, embeddings: np.ndarray) -> LabelIndex:
        """This index with more labels appended (ids from n_labels on, no training documents), built again so that
        the exact/HNSW choice follows the new count."""
        return LabelIndex.build(
            np.vstack([self.embeddings, embeddings]),
            np.concatenate([self.frequencies, np.zeros(len(embeddings), np.int64)]),
            self.info.config,
        )

    def search(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """Top-k label ids per query (-1 where fewer exist) and their cosines (-inf there)."""
        k = min(k, self.n_labels)
        sims, ids = self.index.search(np.ascontiguousarray(queries, dtype=np.float32), k)
        return ids.astype(np.int64), np.where(ids >= 0, sims, -np.inf).astype(np.float32)

    def save(self, folder: Path) -> None:
        import faiss

        folder.mkdir(parents=True, exist_ok=True)
        faiss.write_index(self.index, str(folder / INDEX_FILE))
        np.save(folder / FREQUENCY_FILE, self.frequencies)
        write_text_atomic(folder / "config.json", self.info.model_dump_json(indent=2))

    @classmethod
    def load(cls, folder: Path) -> LabelIndex:
        import faiss

        with reading(folder / "config.json", "the label index's configuration"):
            info = LabelIndexInfo.model_validate_json((folder / "config.json").read_text())
        with reading(folder / INDEX_FILE, "the label index"):
            index = faiss.read_index(str(folder / INDEX_FILE))
        with reading(folder / FREQUENCY_FILE, "the labels' training frequencies"):
            frequencies = index_bounds.integers(FREQUENCY_FILE, np.load(folder / FREQUENCY_FILE, allow_pickle=False))
        index_bounds.in_range(FREQUENCY_FILE, frequencies, 0, np.iinfo(np.int64).max, "document counts")
        embeddings = index.reconstruct_n(0, index.ntotal) if index.ntotal else np.zeros((0, index.d), np.float32)
        return cls(index, np.asarray(embeddings, dtype=np.float32), frequencies.astype(np.int64), info)
