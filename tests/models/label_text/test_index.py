"""The sparse label index (the untrained TF-IDF encoder's) searches exactly: its top k is the brute-force product's,
ties in label order, frequent terms' dense columns included, with the tree's labels' cosines read from the same
product; an empty query never gives NaN."""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp
from xtag.models.label_text.index import LabelIndex, by_term


def sparse_index(labels: int = 3000, terms: int = 400, seed: int = 0) -> LabelIndex:
    rng = np.random.default_rng(seed)
    E = sp.random(labels, terms, density=0.02, random_state=rng, format="csr", dtype=np.float32)
    E.data = np.round(E.data, 1) + 0.1  # few distinct values: many ties
    E = sp.lil_matrix(E)
    E[np.flatnonzero(rng.random(labels) < 0.8), :2] = 0.3  # two terms most labels have: searched as dense columns
    E = sp.csr_matrix(E)
    norms = np.sqrt(np.asarray(E.multiply(E).sum(axis=1))).ravel()
    E = sp.csr_matrix(sp.diags(1 / np.where(norms > 0, norms, 1)) @ E, dtype=np.float32)
    return LabelIndex.build(E, rng.integers(0, 5, labels))


def brute_force(index: LabelIndex, queries: sp.csr_matrix, k: int) -> tuple[np.ndarray, np.ndarray]:
    scores = (queries @ index.embeddings.T).toarray().astype(np.float32)
    order = np.argsort(-scores, axis=1, kind="stable")[:, :k]  # ties in label order
    return order, np.take_along_axis(scores, order, axis=1)


def queries(index: LabelIndex, n: int = 40, seed: int = 1) -> sp.csr_matrix:
    rng = np.random.default_rng(seed)
    Q = sp.random(n, index.info.dim, density=0.05, random_state=rng, format="csr", dtype=np.float32)
    keep = np.ones(n, np.float32)
    keep[-1] = 0  # a text that embeds to nothing
    Q = sp.csr_matrix(sp.diags(keep) @ Q, dtype=np.float32)
    Q.eliminate_zeros()
    return Q


def test_the_sparse_top_k_is_the_exact_one_ties_in_label_order():
    index = sparse_index()
    assert index.info.index == "sparse" and by_term(index.embeddings)[4].shape == (2, index.n_labels)
    Q = queries(index)
    for k in (1, 20, 64):
        ids, sims = index.search(Q, k)
        want_ids, want_sims = brute_force(index, Q, k)
        assert np.allclose(sims, want_sims, atol=1e-6)
        same_score = np.isclose(np.take_along_axis((Q @ index.embeddings.T).toarray(), ids, 1), want_sims)
        assert same_score.all()
        assert (ids == want_ids).mean() > 0.99  # a float sum's last bit may order two equal-looking scores apart


def test_the_tree_labels_cosines_come_from_the_same_product():
    index = sparse_index()
    Q = queries(index)
    labels = np.random.default_rng(2).integers(-1, index.n_labels, (Q.shape[0], 7))
    ids, sims, cos = index.search_and_cosines(Q, 20, labels)
    searched = index.search(Q, 20)
    assert np.array_equal(ids, searched[0]) and np.array_equal(sims, searched[1])
    assert np.array_equal(cos, index.cosines(Q, labels))  # one implementation
    rows = np.maximum(labels, 0)
    products = np.stack([(Q[i] @ index.embeddings[rows[i]].T).toarray()[0] for i in range(Q.shape[0])])
    assert np.allclose(cos, np.where(labels >= 0, products, 0.0), atol=1e-6)
    assert (cos[labels < 0] == 0).all() and np.isfinite(cos).all()


def test_a_dense_index_answers_search_and_cosines_as_the_two_calls():
    rng = np.random.default_rng(3)
    E = rng.normal(size=(50, 8)).astype(np.float32)
    index = LabelIndex.build(E / np.linalg.norm(E, axis=1, keepdims=True), np.zeros(50, np.int64))
    Q = rng.normal(size=(6, 8)).astype(np.float32)
    labels = rng.integers(-1, 50, (6, 4))
    ids, sims, cos = index.search_and_cosines(Q, 5, labels)
    assert index.info.index == "flat"
    assert np.array_equal(ids, index.search(Q, 5)[0]) and np.allclose(sims, index.search(Q, 5)[1])
    assert np.allclose(cos, index.cosines(Q, labels)) and (cos[labels < 0] == 0).all()


def test_an_empty_query_scores_zero_never_nan():
    index = sparse_index()
    ids, sims, cos = index.search_and_cosines(sp.csr_matrix((1, index.info.dim), dtype=np.float32), 5, np.array([[3]]))
    assert np.array_equal(ids, [[0, 1, 2, 3, 4]]) and (sims == 0).all() and (cos == 0).all()


def test_ties_come_in_label_order_then_the_labels_a_query_shares_nothing_with():
    E = sp.csr_matrix(np.array([[0, 1], [1, 0], [0, 1], [1, 0], [0, 1]], np.float32))
    index = LabelIndex.build(E, np.zeros(5, np.int64))
    ids, sims = index.search(sp.csr_matrix(np.array([[0, 0.5]], np.float32)), 4)
    assert ids.tolist() == [[0, 2, 4, 1]] and sims.tolist() == [[0.5, 0.5, 0.5, 0.0]]
    ids, _ = index.search(sp.csr_matrix(np.array([[0.6, 0.8]], np.float32)), 2)
    assert ids.tolist() == [[0, 2]]


def test_a_search_among_the_first_labels_is_the_exact_one_over_them():
    """`among` (the labels a fusion was fitted over): the top k of labels 0..among-1 only, sparse and FAISS alike."""
    index = sparse_index()
    Q = queries(index)
    among = index.n_labels - 500
    ids, sims = index.search(Q, 20, among=among)
    assert (ids < among).all()
    scores = (Q @ index.embeddings[:among].T).toarray().astype(np.float32)
    assert np.allclose(sims, -np.sort(-scores, axis=1)[:, :20], atol=1e-6)
    dense = LabelIndex.build(index.embeddings.toarray(), index.frequencies)
    d_ids, d_sims = dense.search(Q.toarray(), 20, among=among)
    assert dense.info.index == "flat" and (d_ids < among).all()
    assert np.allclose(d_sims, sims, atol=1e-5)
