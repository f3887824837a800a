"""Φ_cat (XR-Transformer eq. 10): [TF-IDF/‖·‖, embedding/‖·‖] as one CSR matrix, so rankers stay linear.

Training and serving build the matrix with the same `concat_features`, so the rankers see
identical columns in both.
"""

from __future__ import annotations

from typing import Protocol

import numpy as np
import scipy.sparse as sp

from models.features import TfidfFeaturizer


class DenseEncoder(Protocol):
    dim: int

    def encode(self, texts: list[str]) -> np.ndarray: ...


def _row_normalised(data: np.ndarray, indptr: np.ndarray) -> np.ndarray:
    rows = np.repeat(np.arange(len(indptr) - 1), np.diff(indptr))
    norms = np.sqrt(np.bincount(rows, weights=data.astype(np.float64) ** 2, minlength=len(indptr) - 1))
    return (data / np.maximum(norms, 1e-12)[rows]).astype(np.float32)


def concat_features(X_tfidf: sp.csr_matrix | None, E: np.ndarray) -> sp.csr_matrix:
    """Row-normalised sparse block (if any) followed by the row-normalised dense block.

    Built directly as CSR arrays: scipy's hstack/normalize cost more than the arithmetic for the
    one-document requests a service sees.
    """
    E = np.asarray(E, dtype=np.float32)
    n, dim = E.shape
    E = E / np.maximum(np.linalg.norm(E, axis=1, keepdims=True), 1e-12)
    if X_tfidf is None:
        return sp.csr_matrix((E.ravel(), np.tile(np.arange(dim, dtype=np.int32), n),
                              np.arange(0, n * dim + 1, dim)), shape=(n, dim))
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
    """Text → Φ_cat: an optional TF-IDF featuriser plus a dense encoder (ONNX at serving time)."""

    def __init__(self, tfidf: TfidfFeaturizer | None, encoder: DenseEncoder):
        self.tfidf, self.encoder = tfidf, encoder

    @property
    def dim(self) -> int:
        return (self.tfidf.dim if self.tfidf else 0) + self.encoder.dim

    def transform(self, texts: list[str]) -> sp.csr_matrix:
        X = self.tfidf.transform(texts) if self.tfidf else None
        return concat_features(X, self.encoder.encode(list(texts)))
