"""Φ_cat (XR-Transformer eq. 10): [TF-IDF/‖·‖, α · embedding/‖·‖] as one CSR matrix, so rankers stay linear.

Training builds the matrix with `concat_features`; serving (`ConcatFeaturizer`) builds the same
two blocks with the same normalisation but hands them to the inference core apart
(models.inference.SplitFeatures), which scores the dense block with BLAS.

α (1 in the paper, and for XR-Transformer) weighs the dense block against the sparse one; XR-Linear's
static token block (models/features/static_encoder.py) sets it from its config, at training and serving alike.
The dense encoder is either XR-Transformer's ONNX encoder or that static block: anything with `dim`
and `encode`.
"""

from __future__ import annotations

from typing import Protocol

import numpy as np
import scipy.sparse as sp
from xtag.models.features.tfidf import TfidfFeaturizer
from xtag.models.inference.beam_search import GATHER_MAX_DOCS
from xtag.models.inference.types import CsrArrays, SplitFeatures


class DenseEncoder(Protocol):
    dim: int

    def encode(self, texts: list[str]) -> np.ndarray: ...


def _row_normalised(data: np.ndarray, indptr: np.ndarray) -> np.ndarray:
    rows = np.repeat(np.arange(len(indptr) - 1), np.diff(indptr))
    norms = np.sqrt(np.bincount(rows, weights=data.astype(np.float64) ** 2, minlength=len(indptr) - 1))
    return (data / np.maximum(norms, 1e-12)[rows]).astype(np.float32)


def _unit_rows(E: np.ndarray, alpha: float = 1.0) -> np.ndarray:
    E = np.asarray(E, dtype=np.float32)
    E = E / np.maximum(np.linalg.norm(E, axis=1, keepdims=True), 1e-12)
    return E if alpha == 1.0 else (E * np.float32(alpha)).astype(np.float32)


def concat_features(X_tfidf: sp.csr_matrix | None, E: np.ndarray, alpha: float = 1.0) -> sp.csr_matrix:
    """Row-normalised sparse block (if any) followed by the row-normalised dense block times `alpha`.

    Built directly as CSR arrays: scipy's hstack/normalize cost more than the arithmetic for the
    one-document requests a service sees.
    """
    E = _unit_rows(E, alpha)
    n, dim = E.shape
    if X_tfidf is None:
        return sp.csr_matrix(
            (E.ravel(), np.tile(np.arange(dim, dtype=np.int32), n), np.arange(0, n * dim + 1, dim)), shape=(n, dim)
        )
    X = X_tfidf.tocsr()
    d, counts = X.shape[1], np.diff(X.indptr)
    indptr = X.indptr.astype(np.int64) + np.arange(n + 1) * dim
    data = np.empty(indptr[-1], dtype=np.float32)
    indices = np.empty(indptr[-1], dtype=np.int32)
    sparse_pos = np.arange(X.nnz) + np.repeat(indptr[:-1] - X.indptr[:-1], counts)
    data[sparse_pos], indices[sparse_pos] = _row_normalised(X.data, X.indptr), X.indices
    dense_pos = (indptr[:-1] + counts)[:, None] + np.arange(dim)
    data[dense_pos.ravel()], indices[dense_pos.ravel()] = E.ravel(), np.tile(np.arange(d, d + dim), n)
    return sp.csr_matrix((data, indices, indptr), shape=(n, d + dim))


class ConcatFeaturizer:
    """Text → Φ_cat: an optional TF-IDF featuriser plus a dense encoder (ONNX or static token embeddings)."""

    encodes = True  # the Featurizer contract (models/inference/predictor.py)

    def __init__(self, tfidf: TfidfFeaturizer | None, encoder: DenseEncoder, alpha: float = 1.0):
        self.tfidf, self.encoder, self.alpha = tfidf, encoder, alpha

    @property
    def dim(self) -> int:
        return (self.tfidf.dim if self.tfidf else 0) + self.encoder.dim

    def transform(self, texts: list[str]) -> SplitFeatures:
        """Φ_cat as its two blocks; `.tocsr()` of the result equals `concat_features` of the same inputs."""
        E = _unit_rows(self.encoder.encode(list(texts)), self.alpha)
        n, dim = E.shape
        d = self.tfidf.dim if self.tfidf else 0
        if self.tfidf:
            data, indices, indptr = self.tfidf.transform_arrays(texts)
            data = _row_normalised(data, indptr)
        else:
            data, indices, indptr = np.empty(0, np.float32), np.empty(0, np.int32), np.zeros(n + 1, np.int32)
        sparse = (
            CsrArrays(data, indices, indptr, (n, d + dim))
            if n <= GATHER_MAX_DOCS
            else sp.csr_matrix((data, indices, indptr), shape=(n, d + dim))
        )
        return SplitFeatures(sparse, E, d)
