"""FAISS shortlist: the first tree level's rankers as an inner-product index that beam search can query.

Each level-1 node's score is w·x + b. The index holds [w restricted to the columns any node uses,
b] and a query is [x on those columns, 1], so an exact (flat) index returns exactly the scores
the inference core would compute; an HNSW index (above `exact_max_nodes`) approximates them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import numpy as np
import scipy.sparse as sp
from pydantic import BaseModel, ConfigDict, Field
from xtag.models.errors import XtagError
from xtag.models.files import index_bounds
from xtag.models.inference.types import RankerLevel

# Queries are densified in chunks of at most this many entries (documents × indexed columns).
QUERY_CHUNK_ENTRIES = 8_000_000


class ShortlistConfig(BaseModel):
    """How to build (and, for HNSW, search) the level-1 index; stored as shortlist/config.json."""

    model_config = ConfigDict(extra="forbid")

    # Scoring every level-1 node through the sparse core beat a FAISS index over the rankers' columns
    # at every size measured (bench/RESULTS.md, "level-1 FAISS vs exact sweep"), so small levels get
    # no index at all.
    min_nodes: int = Field(4096, ge=0, description="write an index only when level 1 has at least this many nodes")
    exact_max_nodes: int = Field(4096, ge=0, description="flat (exact) index up to this many level-1 nodes")
    hnsw_m: int = Field(32, ge=4, description="HNSW graph degree")
    ef_construction: int = Field(200, ge=8)
    ef_search: int = Field(128, ge=1, description="HNSW search breadth (higher: better recall, slower)")


class ShortlistInfo(BaseModel):
    """What was built: index kind, sizes, and the recall measured against exact scoring at export."""

    model_config = ConfigDict(extra="forbid")

    index: Literal["flat", "hnsw"]
    nodes: int
    columns: int
    n_features: int
    config: ShortlistConfig
    recall: float | None = Field(None, description="fraction of exact top-beam level-1 nodes found (export sample)")
    recall_docs: int = 0
    recall_beam: int = 0


class FaissShortlist:
    """Level-1 candidate search for `beam_search(first_level=...)`: returns (nodes, raw scores)."""

    def __init__(self, index, columns: np.ndarray, info: ShortlistInfo):
        self.index, self.columns, self.info = index, columns, info
        self.placement, self._gpu_resources = "cpu", None
        self.position = np.full(info.n_features, -1, dtype=np.int64)  # feature → column of the index, or -1
        self.position[columns] = np.arange(len(columns))
        if info.index == "hnsw":
            index.hnsw.efSearch = max(info.config.ef_search, 1)

    def to_device(self, device=None) -> FaissShortlist:
        """This shortlist searched on `device` (xtag.models.features.device.Device or spec; None: stays on the CPU). On CUDA
        the index becomes a GPU flat index: exact, so recall can only rise over an HNSW one."""
        from xtag.models.features.device import Device

        self.index, self._gpu_resources, self.placement = Device.parse(device).faiss_index(self.index)
        return self

    @classmethod
    def build(cls, level: RankerLevel, n_features: int, config: ShortlistConfig | None = None) -> FaissShortlist:
        import faiss

        config = config or ShortlistConfig()
        W = level.W.tocsc()
        columns = np.flatnonzero(np.diff(W.indptr)).astype(np.int64)  # features any level-1 node uses
        vectors = np.hstack([W[:, columns].toarray(), level.bias[:, None]]).astype(np.float32)
        d = vectors.shape[1]
        if level.n_nodes <= config.exact_max_nodes:
            index, kind = faiss.IndexFlatIP(d), "flat"
        else:
            index, kind = faiss.IndexHNSWFlat(d, config.hnsw_m, faiss.METRIC_INNER_PRODUCT), "hnsw"
            index.hnsw.efConstruction = config.ef_construction
        index.add(np.ascontiguousarray(vectors))
        info = ShortlistInfo(
            index=kind, nodes=level.n_nodes, columns=len(columns), n_features=n_features, config=config
        )
        return cls(index, columns, info)

    def search(self, X: sp.csr_matrix, k: int) -> tuple[np.ndarray, np.ndarray]:
        """Top-k level-1 nodes per row of X (-1 where fewer exist) and their raw ranker scores."""
        n = X.shape[0]
        k = min(k, self.info.nodes)
        nodes = np.empty((n, k), dtype=np.int64)
        scores = np.empty((n, k), dtype=np.float32)
        X = X.tocsr()
        width = len(self.columns) + 1
        chunk = max(1, QUERY_CHUNK_ENTRIES // width)
        for lo in range(0, n, chunk):
            rows = X if n <= chunk else X[lo : lo + chunk]  # slicing builds a new scipy matrix: skip it
            q = np.zeros((rows.shape[0], width), dtype=np.float32)
            q[:, -1] = 1.0  # the bias column
            pos = self.position[rows.indices]
            keep = pos >= 0
            row_of = np.repeat(np.arange(rows.shape[0]), np.diff(rows.indptr))
            q[row_of[keep], pos[keep]] = rows.data[keep]
            D, I = self.index.search(q, k)
            nodes[lo : lo + chunk], scores[lo : lo + chunk] = I, D
        return nodes, np.where(nodes >= 0, scores, -np.inf).astype(np.float32)

    def save(self, folder: Path) -> None:
        import faiss

        folder.mkdir(parents=True, exist_ok=True)
        faiss.write_index(self.index, str(folder / "faiss.index"))
        np.save(folder / "columns.npy", self.columns)
        (folder / "config.json").write_text(self.info.model_dump_json(indent=2))

    @classmethod
    def load(cls, folder: Path, nodes: int | None = None, n_features: int | None = None) -> FaissShortlist:
        """The saved shortlist, checked to be one over `nodes` level-1 nodes and `n_features` columns (when
        given) and its index arrays against their bounds: a node id it returns is dereferenced unchecked by
        the compiled engine, and a column id indexes the feature map (models/files/index_bounds.py)."""
        import faiss

        try:
            info = ShortlistInfo.model_validate_json((folder / "config.json").read_text())
            columns = np.load(folder / "columns.npy", allow_pickle=False)
            index = faiss.read_index(str(folder / "faiss.index"))
        except (OSError, ValueError, RuntimeError) as exc:
            raise XtagError(f"{folder}: cannot read the FAISS shortlist ({exc})") from exc
        if (nodes, n_features) != (None, None) and (info.nodes, info.n_features) != (nodes, n_features):
            raise XtagError(
                f"{folder}/config.json: a shortlist of {info.nodes} nodes over {info.n_features} features, "
                f"the rankers' level 1 has {nodes} nodes over {n_features}"
            )
        name = str(folder / "columns.npy")
        columns = index_bounds.integers(name, columns)
        index_bounds.in_range(name, columns, 0, info.n_features, "the feature columns")
        if len(columns) > 1 and bool((np.diff(columns) <= 0).any()):
            raise index_bounds.fail(name, "columns must be increasing (each once)")
        if index.d != len(columns) + 1 or index.ntotal != info.nodes:
            raise XtagError(
                f"{folder}: index holds {index.ntotal} vectors of size {index.d}, "
                f"config says {info.nodes} of size {len(columns) + 1}"
            )
        if hasattr(index, "hnsw") != (info.index == "hnsw"):
            raise XtagError(f"{folder}/faiss.index: a {type(index).__name__}, config.json says {info.index}")
        if info.index == "hnsw":
            check_hnsw(folder / "faiss.index", index)
            default = ShortlistConfig.model_fields["ef_search"].default
            index_bounds.beam(
                f"{folder}/config.json", "ef_search", info.config.ef_search, info.nodes, default, "its nodes"
            )
        return cls(index, columns.astype(np.int64), info)


def check_hnsw(name: Path, index) -> None:
    """FAISS follows an HNSW graph's links without bounds checks: every link must name a node whose levels
    include the one it is followed at, and each node's links must lie inside its own slots of the array."""
    import faiss

    hnsw, n = index.hnsw, index.ntotal
    levels = faiss.vector_to_array(hnsw.levels).astype(np.int64)  # node i has levels 0 .. levels[i] - 1
    offsets = faiss.vector_to_array(hnsw.offsets).astype(np.int64)
    cum = faiss.vector_to_array(hnsw.cum_nneighbor_per_level).astype(np.int64)  # links per level, cumulated
    links = faiss.vector_to_array(hnsw.neighbors).astype(np.int64)
    index_bounds.pointer(f"{name} (level sizes)", cum, int(cum[-1]) if len(cum) else 0)
    index_bounds.in_range(f"{name} (levels)", levels, 1, len(cum))
    if len(levels) != n or index.storage.ntotal != n or index.storage.d != index.d:
        raise XtagError(f"{name}: the HNSW graph and its vectors disagree on their number or size")
    index_bounds.pointer(f"{name} (offsets)", offsets, len(links), n + 1)
    if not np.array_equal(np.diff(offsets), cum[levels]):
        raise index_bounds.fail(f"{name} (offsets)", "a node's links do not fill its levels' slots")
    if n and not (0 <= hnsw.entry_point < n and hnsw.max_level == levels[hnsw.entry_point] - 1):
        raise index_bounds.fail(f"{name} (entry point)", f"{hnsw.entry_point} at level {hnsw.max_level}")
    for g0, g1 in index_bounds.segment_blocks(offsets):
        lo, hi = offsets[g0], offsets[g1]
        node = index_bounds.segment_ids(offsets, g0, g1)
        to = links[lo:hi]
        level = np.searchsorted(cum, np.arange(lo, hi) - offsets[node], side="right") - 1  # the link's level
        index_bounds.in_range(f"{name} (links)", to, -1, n)
        if bool((levels[to[to >= 0]] <= level[to >= 0]).any()):
            raise index_bounds.fail(f"{name} (links)", "a link names a node that is not on its level")


def level1_recall(shortlist: FaissShortlist, X: sp.csr_matrix, level: RankerLevel, beam: int) -> float:
    """Fraction of the exact top-`beam` level-1 nodes (by raw score) that the index returns."""
    from xtag.models.inference.beam_search import score_candidates, top_k

    beam = min(beam, level.n_nodes)
    all_nodes = np.tile(np.arange(level.n_nodes), (X.shape[0], 1))
    exact, _ = top_k(score_candidates(X, level, all_nodes), all_nodes, beam)
    found, _ = shortlist.search(X, beam)
    hits = sum(len(np.intersect1d(a[a >= 0], b[b >= 0])) for a, b in zip(exact, found))
    return hits / max(int((exact >= 0).sum()), 1)
