"""The label embeddings as a FAISS inner-product index (rows L2-normalised, so scores are cosines), with each label's
training-document count, which the fusion reads as a feature.

Exact (IndexFlatIP) up to `exact_max_labels`, HNSW above it, as models/xlinear/shortlist.py does for the tree's first
level; written with faiss.write_index into the bundle, listed and checksummed in the manifest like every file. The
untrained TF-IDF encoder's rows are sparse and as wide as its vocabulary: no FAISS index, an exact sparse product
(kind "sparse", saved as a CSR .npz).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Literal

import numpy as np
import scipy.sparse as sp
from pydantic import BaseModel, ConfigDict, Field
from xtag.models.engine.jit import njit
from xtag.models.errors import XtagError, reading
from xtag.models.files import index_bounds
from xtag.models.files.atomic import write_text_atomic

INDEX_FILE = "faiss.index"
SPARSE_FILE = "embeddings.npz"
FREQUENCY_FILE = "frequencies.npy"
DENSE_SHARE = 0.25  # a term in at least this share of the labels is searched as a dense column (`by_term`)


@njit()
def _sparse_top_k(q_ptr, q_terms, q_weights, postings, n_labels, among, labels, out_ids, out_sims, out_cos):
    """Per query: its cosines with every label (its terms' postings summed into one buffer; the columns of the
    frequent terms added whole: `postings` is `by_term`'s tuple), the k best of labels 0..among-1 into
    out_ids/out_sims (k = their width, best first, ties in label order) by one pass that keeps a sorted top k, and the
    cosines of its row of `labels` (-1: 0) into out_cos. On debdeps (41,185 labels) scipy's sparse product, a full-row argpartition and a second
    lookup for `labels` took 10× as long (bench/RESULTS.md, label_text_stage_speed)."""
    t_ptr, t_labels, t_weights, dense_row, dense = postings
    k = out_ids.shape[1]
    acc = np.zeros(n_labels, np.float32)
    for i in range(q_ptr.size - 1):
        for p in range(q_ptr[i], q_ptr[i + 1]):
            term, w = q_terms[p], q_weights[p]
            if dense_row[term] >= 0:  # a term most labels have: its column whole, a vectorised pass
                column = dense[dense_row[term]]
                for label in range(n_labels):
                    acc[label] += w * column[label]
                continue
            for e in range(t_ptr[term], t_ptr[term + 1]):
                acc[t_labels[e]] += w * t_weights[e]
        for j in range(min(k, among)):  # the first k labels, sorted, then every other one that beats the last kept
            out_ids[i, j], out_sims[i, j] = j, acc[j]
            _sink(out_ids, out_sims, i, j)
        for label in range(k, among if k > 0 else 0):
            score = acc[label]
            if score > out_sims[i, k - 1]:  # equal: the kept label comes first (label order)
                out_ids[i, k - 1], out_sims[i, k - 1] = label, score
                _sink(out_ids, out_sims, i, k - 1)
        for j in range(labels.shape[1]):
            out_cos[i, j] = acc[labels[i, j]] if labels[i, j] >= 0 else 0.0
        acc[:] = 0.0


@njit()
def _sink(ids, sims, i, j):
    """Move entry j of row i up past every entry it beats (a higher score; ties keep their place)."""
    while j > 0 and sims[i, j] > sims[i, j - 1]:
        ids[i, j], ids[i, j - 1] = ids[i, j - 1], ids[i, j]
        sims[i, j], sims[i, j - 1] = sims[i, j - 1], sims[i, j]
        j -= 1


def by_term(embeddings: sp.csr_matrix) -> tuple:
    """The sparse kind's search arrays, built once at load: its terms × labels postings (a query then reads only its
    terms'; converting the transpose per query took 46 ms of a 0.8 ms XR-Linear request on debdeps), and the columns
    of the terms at least DENSE_SHARE of the labels have as dense rows (`dense_row`: term → row, -1: none). A dense
    row is added with vector instructions instead of scattered: on debdeps 14 terms of 56,462 held 3/4 of a query's
    postings. At most 1/DENSE_SHARE times the postings' count of rows × labels, so at most twice their memory."""
    postings = embeddings.T.tocsr()
    df = np.diff(postings.indptr)
    frequent = np.flatnonzero(df >= max(1, embeddings.shape[0] * DENSE_SHARE))
    dense_row = np.full(embeddings.shape[1], -1, np.int64)
    dense_row[frequent] = np.arange(len(frequent))
    dense = np.ascontiguousarray(postings[frequent].toarray(), dtype=np.float32)
    return (
        postings.indptr.astype(np.int64),
        postings.indices.astype(np.int32),
        postings.data.astype(np.float32),
        dense_row,
        dense,
    )


def csr_rows(queries: np.ndarray | sp.spmatrix) -> sp.csr_matrix:
    """Queries as CSR, without a copy when they already are (a scipy constructor per call cost a tenth of a
    request's label search)."""
    return queries.tocsr() if sp.issparse(queries) else sp.csr_matrix(queries)


def warm_up() -> float:
    """Compile `_sparse_top_k` (or load it from numba's cache) on a tiny index, with the argument types a search
    passes, so no request waits for the JIT (bundle loading and `xtag warm` call this); returns the seconds."""
    start = time.perf_counter()
    tiny = LabelIndex.build(sp.csr_matrix(np.eye(2, dtype=np.float32)), np.zeros(2, np.int64))
    tiny.search_and_cosines(sp.csr_matrix(np.ones((1, 2), np.float32)), 1, np.zeros((1, 1), np.int64))
    return time.perf_counter() - start


class LabelIndexConfig(BaseModel):
    """How the label index is built and searched; stored in label_text/index/config.json."""

    model_config = ConfigDict(extra="forbid")

    # A flat search costs labels × dim per query, HNSW about ef_search × M × dim. Measured on the 2-core machine
    # (bench/experiments/label_index_threshold.py, dim 256, load 15, single queries): 8,000 labels 0.13 ms flat
    # against 0.27 ms HNSW; 16,000 labels 9.5 ms flat against 0.51 ms (faiss splits a large flat search over its
    # threads, which wait for cores on a loaded machine); so exact up to 8,192 labels, HNSW above. On debdeps' own
    # tfidf-linear label embeddings (41,185 labels, test texts as queries, load 3): 8.3 ms flat against 0.41 ms HNSW,
    # whose recall@20 of the exact top 20 was 0.978.
    exact_max_labels: int = Field(8192, ge=0, description="exact (flat) index up to this many labels, HNSW above")
    hnsw_m: int = Field(32, ge=4, description="HNSW graph degree")
    ef_construction: int = Field(200, ge=8)
    ef_search: int = Field(128, ge=1, description="HNSW search breadth (higher: better recall, slower)")


class LabelIndexInfo(BaseModel):
    model_config = ConfigDict(extra="forbid")

    index: Literal["flat", "hnsw", "sparse"]
    labels: int
    dim: int
    config: LabelIndexConfig


class LabelIndex:
    """Top-M labels by cosine for document embeddings; `embeddings` is the labels × dim matrix it was built from."""

    def __init__(self, index, embeddings: np.ndarray | sp.csr_matrix, frequencies: np.ndarray, info: LabelIndexInfo):
        held = embeddings.shape if index is None else (index.ntotal, index.d)
        if embeddings.shape != (info.labels, info.dim) or held != embeddings.shape:
            raise XtagError(f"label index holds {held[0]} × {held[1]}, its config says {info.labels} × {info.dim}")
        if frequencies.shape != (info.labels,):
            raise XtagError(f"label index: {frequencies.shape} frequencies for {info.labels} labels")
        self.index, self.embeddings, self.frequencies, self.info = index, embeddings, frequencies, info
        self._by_term = by_term(embeddings) if index is None else None
        if info.index == "hnsw":
            index.hnsw.efSearch = info.config.ef_search

    @property
    def n_labels(self) -> int:
        return self.info.labels

    @classmethod
    def build(
        cls, embeddings: np.ndarray | sp.csr_matrix, frequencies: np.ndarray, config: LabelIndexConfig | None = None
    ) -> LabelIndex:
        import faiss

        config = config or LabelIndexConfig()
        frequencies = np.asarray(frequencies, dtype=np.int64)
        if sp.issparse(embeddings):
            info = LabelIndexInfo(index="sparse", labels=embeddings.shape[0], dim=embeddings.shape[1], config=config)
            return cls(None, sp.csr_matrix(embeddings, dtype=np.float32), frequencies, info)
        embeddings = np.ascontiguousarray(embeddings, dtype=np.float32)
        n, d = embeddings.shape
        if n <= config.exact_max_labels:
            index, kind = faiss.IndexFlatIP(d), "flat"
        else:
            index, kind = faiss.IndexHNSWFlat(d, config.hnsw_m, faiss.METRIC_INNER_PRODUCT), "hnsw"
            index.hnsw.efConstruction = config.ef_construction
        index.add(embeddings)
        info = LabelIndexInfo(index=kind, labels=n, dim=d, config=config)
        return cls(index, embeddings, frequencies, info)

    def added(self, embeddings: np.ndarray) -> LabelIndex:
        """This index with more labels appended (ids from n_labels on, no training documents), built again so that
        the exact/HNSW choice follows the new count."""
        stack = sp.vstack if sp.issparse(self.embeddings) else np.vstack
        return LabelIndex.build(
            stack([self.embeddings, embeddings]),
            np.concatenate([self.frequencies, np.zeros(embeddings.shape[0], np.int64)]),
            self.info.config,
        )

    def search(
        self, queries: np.ndarray | sp.csr_matrix, k: int, among: int | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """Top-k label ids per query (-1 where fewer exist) and their cosines (-inf there), among the labels
        0..among-1 (all by default: `among` leaves out the labels added after the fusion was fitted)."""
        among = self._among(among)
        k = min(k, among)
        if self.index is None:
            return self._sparse_search(csr_rows(queries), k, among=among)[:2]
        params = None
        if among < self.n_labels:
            import faiss

            selector = faiss.IDSelectorRange(0, among)
            hnsw = self.info.index == "hnsw"
            params = (
                faiss.SearchParametersHNSW(sel=selector, efSearch=self.info.config.ef_search)
                if hnsw
                else faiss.SearchParameters(sel=selector)
            )
        sims, ids = self.index.search(np.ascontiguousarray(queries, dtype=np.float32), k, params=params)
        return ids.astype(np.int64), np.where(ids >= 0, sims, -np.inf).astype(np.float32)

    def _among(self, among: int | None) -> int:
        """The labels a search ranks: 0..among-1, all of them by default."""
        return self.n_labels if among is None else min(among, self.n_labels)

    def search_and_cosines(
        self, queries: np.ndarray | sp.csr_matrix, k: int, labels: np.ndarray, among: int | None = None
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """`search` and `cosines(queries, labels)` at once: the sparse kind reads both from one product per query
        (a second lookup of the tree's labels cost as much as a tenth of the search)."""
        if self.index is not None:
            return *self.search(queries, k, among), self.cosines(queries, labels)
        among = self._among(among)
        return self._sparse_search(csr_rows(queries), min(k, among), labels, among)

    def _sparse_search(
        self, queries: sp.csr_matrix, k: int, labels: np.ndarray | None = None, among: int | None = None
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
        """Exact, by the compiled kernel `_sparse_top_k` over the terms × labels postings; no documents × labels
        buffer for a batch."""
        n = queries.shape[0]
        ids, sims = np.full((n, k), -1, np.int64), np.full((n, k), -np.inf, np.float32)
        tree = np.zeros((n, 0), np.int64) if labels is None else np.ascontiguousarray(labels, dtype=np.int64)
        cos = np.zeros(tree.shape, np.float32)
        q = (queries.indptr.astype(np.int64), queries.indices.astype(np.int32), queries.data.astype(np.float32))
        _sparse_top_k(*q, self._by_term, self.n_labels, self._among(among), tree, ids, sims, cos)
        return ids, sims, None if labels is None else cos

    def cosines(self, queries: np.ndarray | sp.csr_matrix, labels: np.ndarray) -> np.ndarray:
        """The cosine of each query (row i) with each of its labels (labels[i, j]; -1: 0)."""
        if self.index is None:
            return self._sparse_search(csr_rows(queries), 0, labels)[2]  # the kernel's sums, no top k
        cos = np.einsum("nd,nkd->nk", queries, self.embeddings[np.maximum(labels, 0)])
        return np.where(labels >= 0, cos, 0.0).astype(np.float32)

    def vectors(self, labels: np.ndarray) -> np.ndarray | sp.csr_matrix:
        """The embeddings of these labels, as queries."""
        return self.embeddings[labels]

    def save(self, folder: Path) -> None:
        import faiss

        folder.mkdir(parents=True, exist_ok=True)
        if self.index is None:
            sp.save_npz(folder / SPARSE_FILE, self.embeddings)
        else:
            faiss.write_index(self.index, str(folder / INDEX_FILE))
        np.save(folder / FREQUENCY_FILE, self.frequencies)
        write_text_atomic(folder / "config.json", self.info.model_dump_json(indent=2))

    @classmethod
    def load(cls, folder: Path) -> LabelIndex:
        import faiss

        with reading(folder / "config.json", "the label index's configuration"):
            info = LabelIndexInfo.model_validate_json((folder / "config.json").read_text())
        with reading(folder / FREQUENCY_FILE, "the labels' training frequencies"):
            frequencies = index_bounds.integers(FREQUENCY_FILE, np.load(folder / FREQUENCY_FILE, allow_pickle=False))
        index_bounds.in_range(FREQUENCY_FILE, frequencies, 0, np.iinfo(np.int64).max, "document counts")
        if info.index == "sparse":
            with reading(folder / SPARSE_FILE, "the label embeddings"):
                embeddings = sp.load_npz(folder / SPARSE_FILE).tocsr()
            index_bounds.pointer("indptr", embeddings.indptr, len(embeddings.indices))
            index_bounds.in_range("indices", embeddings.indices, 0, info.dim, "the embedding columns")
            return cls(None, embeddings.astype(np.float32), frequencies.astype(np.int64), info)
        with reading(folder / INDEX_FILE, "the label index"):
            index = faiss.read_index(str(folder / INDEX_FILE))
        embeddings = index.reconstruct_n(0, index.ntotal) if index.ntotal else np.zeros((0, index.d), np.float32)
        return cls(index, np.asarray(embeddings, dtype=np.float32), frequencies.astype(np.int64), info)
