"""Predictions and the other types every inference path shares (families, the engine, explanations, the service).

They sit apart from the numpy beam search (beam_search.py) so that a module needing a type does not import the search.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, NamedTuple, Protocol

import numpy as np
import scipy.sparse as sp
from xtag.models.label_tree import ClusterChain

PostProcessor = Literal["l3-hinge", "sigmoid", "l2-hinge"]


# Above this many nodes a level is scored only on the beam's candidate rows; below it one sparse
# product against the whole level is cheaper than gathering rows.
FULL_PRODUCT_MAX_NODES = 8192


@dataclass
class RankerLevel:
    """One level's one-vs-all rankers: scores = X @ W.T + bias; W is nodes × features (CSR)."""

    W: sp.csr_matrix
    bias: np.ndarray

    def __post_init__(self) -> None:
        self.W = self.W.tocsr()
        self.dense_start: int | None = None
        # Derived copies, made on first use: a served model scores through the compiled engine
        # (models/engine/) and never needs them, so loading a bundle does not pay for them.
        self._Wt: sp.csr_matrix | None = None
        self._dense: np.ndarray | None = None

    def set_dense_tail(self, start: int) -> None:
        """Score columns ≥ `start` (Φ_cat's embedding block) as one dense matrix product.

        Gathering a dense block through the sparse paths costs nodes × dims index operations per
        document; BLAS does the same arithmetic in microseconds. Scores are unchanged.
        """
        self.dense_start, self._dense = start, None

    @property
    def Wt(self) -> sp.csr_matrix | None:
        """features × nodes, for whole-level products; None for large levels, scored only on candidates."""
        if self._Wt is None and self.n_nodes <= FULL_PRODUCT_MAX_NODES:
            self._Wt = self.W.T.tocsr()
        return self._Wt

    @property
    def dense(self) -> np.ndarray | None:
        """The dense tail's weights (nodes × dims float32), or None without a dense tail."""
        if self.dense_start is not None and self._dense is None:
            self._dense = self.W[:, self.dense_start :].toarray().astype(np.float32)
        return self._dense

    @property
    def n_nodes(self) -> int:
        return self.W.shape[0]


@dataclass
class Predictions:
    """Top-k label ids (-1 where fewer than k were reachable) and scores, best first, per document.

    `margins`, when the compiled engine made them: each path's summed raw ranker margins, the engine's
    tie-break key, which readable scores show (models/xlinear/readable.py) without scoring the paths again."""

    labels: np.ndarray
    scores: np.ndarray
    margins: np.ndarray | None = None


class CsrArrays(NamedTuple):
    """A CSR matrix's arrays without a scipy object: building one validates its input, which costs
    more than the arithmetic on a handful of rows (the gather paths only read these arrays)."""

    data: np.ndarray
    indices: np.ndarray
    indptr: np.ndarray
    shape: tuple[int, int]


class SplitFeatures(NamedTuple):
    """Feature rows kept as a sparse block (columns < `start`) and a dense block (columns ≥ `start`).

    What the rankers see is the same as the CSR matrix with both blocks side by side (`tocsr`), but a
    featuriser that produces the blocks separately (Φ_cat: TF-IDF, then the embedding) hands them to
    scoring as they are: packing the dense block into CSR only for beam search to unpack it again
    costs more than scoring a one-document request.
    """

    sparse: sp.csr_matrix | CsrArrays  # shape (n, all columns), entries only in columns < start
    dense: np.ndarray  # n × (all columns - start), float32
    start: int

    @property
    def shape(self) -> tuple[int, int]:
        return self.sparse.shape

    def tocsr(self) -> sp.csr_matrix:
        n = self.shape[0]
        s = self.sparse
        head = sp.csr_matrix((s.data, s.indices, s.indptr), shape=(n, self.start))
        return sp.hstack([head, sp.csr_matrix(self.dense)], format="csr", dtype=np.float32).sorted_indices()


class FirstLevelSearch(Protocol):
    """Candidate search for level 1 (e.g. models/shortlist.FaissShortlist): top-k nodes and raw scores."""

    def search(self, X: sp.csr_matrix, k: int) -> tuple[np.ndarray, np.ndarray]: ...


class TreeIndex:
    """Per-level child tables of a cluster chain, built once per loaded model."""

    def __init__(self, chain: ClusterChain):
        self.chain = chain
        # An extra all -1 row makes padded beam entries (node -1) expand to nothing.
        self.tables = [
            np.vstack([chain.child_table(t), np.full((1, chain.child_table(t).shape[1]), -1)])
            for t in range(1, chain.depth + 1)
        ]
