"""xtag.models.engine (compiled beam search) returns what xtag.models.inference.beam_search returns: labels, scores, padding."""

import numpy as np
import pytest
import scipy.sparse as sp

pytest.importorskip("numba")

from xtag.models.engine import CompiledLevels, engine_beam_search, warm_up  # noqa: E402
from xtag.models.inference.beam_search import beam_search  # noqa: E402
from xtag.models.inference.types import RankerLevel, SplitFeatures, TreeIndex
from xtag.models.label_tree import ClusterChain  # noqa: E402

POSTS = ("l3-hinge", "l2-hinge", "sigmoid")


@pytest.fixture(scope="module", autouse=True)
def _compiled_kernels():
    warm_up()


def random_chain(rng, depth: int, branching: int) -> ClusterChain:
    """A tree of `depth` ranker levels, about `branching` children per node (a few childless inner nodes)."""
    ptrs = [np.array([0, int(rng.integers(2, branching + 3))])]
    for _ in range(depth - 1):
        size = int(ptrs[-1][-1])
        counts = rng.integers(max(1, branching - 2), branching + 3, size=size)
        counts[rng.random(size) < 0.1] = 0  # childless inner nodes must expand to nothing
        counts[0] = max(counts[0], 1)
        ptrs.append(np.concatenate(([0], np.cumsum(counts))))
    return ClusterChain(ptrs, rng.permutation(int(ptrs[-1][-1])))


def random_levels(rng, chain: ClusterChain, n_features: int, used: int, dense_start=None) -> list[RankerLevel]:
    """Rankers that only use the first `used` feature columns (and the dense tail, if any).

    Scores stay mostly below the hinge (1), so summed margins stay small and keys do not tie exactly:
    on exact ties numpy's argpartition picks arbitrarily (see test_exact_ties_keep_candidate_order).
    """
    levels = []
    for t in range(1, chain.depth + 1):
        n = chain.level_size(t)
        W = sp.random(n, used, density=0.3, random_state=rng, format="csr", dtype=np.float32)
        W.data -= 0.3
        if dense_start is not None:
            tail = rng.normal(size=(n, n_features - dense_start)).astype(np.float32) * 0.3
            W = sp.hstack([W, sp.csr_matrix((n, dense_start - used)), sp.csr_matrix(tail)], format="csr")
        else:
            W = sp.hstack([W, sp.csr_matrix((n, n_features - used))], format="csr")
        level = RankerLevel(W.astype(np.float32), rng.normal(-0.5, 0.7, size=n).astype(np.float32))
        if dense_start is not None:
            level.set_dense_tail(dense_start)
        levels.append(level)
    return levels


def random_docs(rng, n: int, n_features: int, used: int) -> sp.csr_matrix:
    X = sp.random(n, n_features, density=0.25, random_state=rng, format="csr", dtype=np.float32).tolil()
    X[0, :] = 0  # an empty document
    if n > 2:  # a document with only features no ranker uses
        X[1, :] = 0
        X[1, used:] = 1.0
    return X.tocsr()


def assert_same(expected, got) -> None:
    assert expected.labels.shape == got.labels.shape
    np.testing.assert_array_equal(got.labels, expected.labels)
    assert np.array_equal(np.isfinite(got.scores), np.isfinite(expected.scores))
    np.testing.assert_allclose(got.scores, expected.scores, atol=1e-5, rtol=0)


@pytest.mark.parametrize("depth,branching", [(1, 7), (2, 4), (3, 3), (4, 2)])
def test_random_trees_match_numpy(depth, branching):
    rng = np.random.default_rng(depth)
    chain = random_chain(rng, depth, branching)
    levels = random_levels(rng, chain, n_features=40, used=30)
    compiled = CompiledLevels.build(levels, chain)
    tree = TreeIndex(chain)
    X = random_docs(rng, 12, 40, 30)
    for post in POSTS:
        for beam, k in [(1, 1), (2, 3), (5, 4), (3, chain.n_labels + 5)]:  # last: k beyond the reachable labels
            expected = beam_search(X, levels, tree, beam, k, post)
            assert_same(expected, engine_beam_search(X, compiled, beam, k, post))  # thread pool
            assert_same(expected, engine_beam_search(X, compiled, beam, k, post, threads=1))
            for i in (0, 1, 5):  # single documents (numpy's few-document paths)
                one = beam_search(X[i], levels, tree, beam, k, post)
                assert_same(one, engine_beam_search(X[i], compiled, beam, k, post))


def test_stop_level_returns_nodes_of_that_level():
    rng = np.random.default_rng(10)
    chain = random_chain(rng, 3, 4)
    levels = random_levels(rng, chain, 25, 25)
    compiled, tree = CompiledLevels.build(levels, chain), TreeIndex(chain)
    X = random_docs(rng, 9, 25, 25)
    for stop in (1, 2, 3):
        for post in POSTS:
            expected = beam_search(X, levels, tree, 3, 6, post, stop_level=stop)
            assert_same(expected, engine_beam_search(X, compiled, 3, 6, post, stop_level=stop))


def test_every_scoring_path_agrees(monkeypatch):
    from xtag.models.engine import layout

    rng = np.random.default_rng(11)
    chain = random_chain(rng, 3, 5)
    levels = random_levels(rng, chain, 60, 50)
    tree = TreeIndex(chain)
    X = random_docs(rng, 10, 60, 50)
    expected = beam_search(X, levels, tree, 4, 5)
    for max_chunks in (0, 1000):  # chunks only; every level also feature-major
        monkeypatch.setattr(layout, "FEATURE_MAJOR_MAX_CHUNKS", max_chunks)
        compiled = CompiledLevels.build(levels, chain)
        for ratio in (0.0, 1e9):  # always the hash, always the dense scatter
            assert_same(expected, engine_beam_search(X, compiled, 4, 5, scatter_ratio=ratio))


def test_split_features_with_a_dense_tail_match_numpy():
    rng = np.random.default_rng(12)
    chain = random_chain(rng, 3, 3)
    start, d = 30, 46
    levels = random_levels(rng, chain, d, 24, dense_start=start)
    compiled, tree = CompiledLevels.build(levels, chain), TreeIndex(chain)
    sparse = random_docs(rng, 10, d, 24)[:, :start]
    dense = rng.normal(size=(10, d - start)).astype(np.float32)
    dense[0] = 0  # the empty document stays empty
    split = SplitFeatures(sp.hstack([sparse, sp.csr_matrix((10, d - start))], format="csr"), dense, start)
    joined = split.tocsr()
    for post in POSTS:
        expected = beam_search(split, levels, tree, 3, 5, post)
        assert_same(expected, engine_beam_search(split, compiled, 3, 5, post))
        assert_same(expected, engine_beam_search(joined, compiled, 3, 5, post))  # a joined Φ_cat matrix
        one = SplitFeatures(split.sparse[2], dense[2:3], start)
        assert_same(beam_search(one, levels, tree, 3, 5, post), engine_beam_search(one, compiled, 3, 5, post))


def test_first_level_index_matches_numpy():
    from xtag.models.xlinear.shortlist import FaissShortlist, ShortlistConfig

    rng = np.random.default_rng(13)
    chain = random_chain(rng, 3, 6)
    levels = random_levels(rng, chain, 30, 30)
    compiled, tree = CompiledLevels.build(levels, chain), TreeIndex(chain)
    index = FaissShortlist.build(levels[0], 30, ShortlistConfig(min_nodes=0))
    X = random_docs(rng, 8, 30, 30)
    for stop in (None, 1, 2):
        for beam, k in [(2, 3), (4, 20)]:
            expected = beam_search(X, levels, tree, beam, k, stop_level=stop, first_level=index)
            assert_same(expected, engine_beam_search(X, compiled, beam, k, stop_level=stop, first_level=index))


def test_trained_bundle_matches_numpy(tiny_bundle, corpus_files):
    import json

    from xtag.models.bundle.loader import load_bundle

    predictor = load_bundle(tiny_bundle).predictor
    model = predictor.model
    texts = [json.loads(line)["text"] for line in corpus_files[0].read_text().splitlines()]
    texts += ["", "zzzz unknown words only"]
    X = predictor.featurizer.transform(texts)
    compiled = CompiledLevels.build(model.levels, model.chain)
    for beam, k in [(1, 3), (3, 5), (10, 10)]:
        expected = model.predict(X, k=k, beam_size=beam)
        got = engine_beam_search(X, compiled, beam, k, model.config.post_processor)
        assert_same(expected, got)
        for i in (0, len(texts) - 2, len(texts) - 1):
            assert_same(
                model.predict(X[i], k=k, beam_size=beam),
                engine_beam_search(X[i], compiled, beam, k, model.config.post_processor),
            )


def test_exact_ties_keep_candidate_order(monkeypatch):
    """Identical sibling rankers tie exactly; the engine keeps them in candidate order (parents best first,
    children in tree order), the rule top_k_positions documents. numpy's argpartition picks any of the tied
    candidates at the cut, so the comparison is with a full stable sort in its place."""
    import xtag.models.inference.beam_search as numpy_search

    rng = np.random.default_rng(14)
    chain = ClusterChain([np.array([0, 4]), np.arange(0, 25, 5), np.arange(0, 61, 3)], rng.permutation(60))
    levels = []
    for level in random_levels(rng, chain, 20, 20):  # nodes come in pairs of identical rankers
        W, bias = level.W.toarray() * 4, level.bias + 1  # large margins: l3-hinge saturates, so does tanh
        W[1::2], bias[1::2] = W[0::2], bias[0::2]
        levels.append(RankerLevel(sp.csr_matrix(W), bias))
    compiled, tree = CompiledLevels.build(levels, chain), TreeIndex(chain)
    X = random_docs(rng, 10, 20, 20)
    got = engine_beam_search(X, compiled, 3, 5)
    assert (got.scores[:, :-1] == got.scores[:, 1:]).any()  # the test has ties to break
    monkeypatch.setattr(numpy_search, "top_k_positions", lambda key, k: np.argsort(-key, axis=1, kind="stable")[:, :k])
    assert_same(numpy_search.beam_search(X, levels, tree, 3, 5), got)


def test_concurrent_calls_from_threads():
    from concurrent.futures import ThreadPoolExecutor

    rng = np.random.default_rng(15)
    chain = random_chain(rng, 3, 5)
    levels = random_levels(rng, chain, 40, 40)
    compiled = CompiledLevels.build(levels, chain)
    X = random_docs(rng, 30, 40, 40)
    expected = engine_beam_search(X, compiled, 4, 6, threads=1)
    jobs = [(X, 2), (X[:1], None), (X[3:4], None), (X, None)] * 4
    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(lambda job: engine_beam_search(job[0], compiled, 4, 6, threads=job[1]), jobs))
    for (Xj, _), got in zip(jobs, results):
        ref = expected if Xj.shape[0] == 30 else engine_beam_search(Xj, compiled, 4, 6, threads=1)
        assert_same(ref, got)


def test_forked_child_of_a_pool_user_runs_serially():
    """GNU OpenMP aborts a forked child that launches its parent's pool; the engine runs such a child serially."""
    import os

    rng = np.random.default_rng(16)
    chain = random_chain(rng, 2, 4)
    levels = random_levels(rng, chain, 20, 20)
    compiled = CompiledLevels.build(levels, chain)
    X = random_docs(rng, 8, 20, 20)
    expected = engine_beam_search(X, compiled, 2, 3, threads=2)  # the parent uses the pool
    pid = os.fork()
    if pid == 0:
        ok = False
        try:
            got = engine_beam_search(X, compiled, 2, 3, threads=2)
            ok = np.array_equal(got.labels, expected.labels)
        finally:
            os._exit(0 if ok else 1)
    assert os.waitpid(pid, 0)[1] == 0


def test_unwritable_cache_falls_back_to_memory(monkeypatch):
    from numba.core import caching
    from xtag.models.engine import jit as _jit

    def refuse(self):
        raise PermissionError("read-only")

    def add_two(x):
        return x + 2

    saved = _jit.njit()(add_two)
    if not isinstance(saved._cache, caching.NullCache):  # a writable cache at decoration time ...
        monkeypatch.setattr(caching._CacheLocator, "ensure_cache_path", refuse)
        with pytest.raises(OSError):
            saved(1)  # ... that refuses the save: numba raises, warm_up catches it and compiles in memory
        with pytest.warns(UserWarning, match="not writable"):
            _jit.disable_caching([saved])
        assert saved(1) == 3
    monkeypatch.setattr(caching._CacheLocator, "ensure_cache_path", refuse)
    unsaved = _jit.njit()(add_two)  # no writable cache at decoration time: no cache, no error
    assert unsaved(1) == 3 and isinstance(unsaved._cache, caching.NullCache)
    _jit.KERNELS.remove(saved)
    _jit.KERNELS.remove(unsaved)


def test_nothing_compiles_after_warm_up():
    """Every call above went through kernels compiled by warm_up: one signature each, never a second."""
    from xtag.models.engine.kernels import search_parallel, search_range
    from xtag.models.engine.layout import _fill_hash

    assert [len(kernel.signatures) for kernel in (search_range, search_parallel, _fill_hash)] == [1, 1, 1]
