"""FAISS level-1 shortlist: exact index = exact beam search; HNSW recall at the default efSearch."""

import numpy as np
import scipy.sparse as sp
from xtag.models.inference.beam_search import beam_search
from xtag.models.inference.types import RankerLevel, TreeIndex
from xtag.models.label_tree import ClusterChain
from xtag.models.xlinear.shortlist import FaissShortlist, ShortlistConfig, level1_recall


def wide_model(rng, n_features=400, clusters=300, per_cluster=3):
    """A tree whose first level is wide (as with a flat cluster matcher), with sparse random rankers."""
    chain = ClusterChain(
        ptrs=[np.array([0, clusters]), np.arange(0, clusters * per_cluster + 1, per_cluster)],
        leaf_labels=rng.permutation(clusters * per_cluster),
    )
    levels = [
        RankerLevel(
            sp.random(n, n_features, density=0.05, random_state=rng, format="csr", dtype=np.float32),
            rng.normal(scale=0.1, size=n).astype(np.float32),
        )
        for n in (clusters, clusters * per_cluster)
    ]
    W1 = levels[0].W.tolil()
    W1[:, n_features - 50 :] = 0  # features no level-1 ranker uses: the index leaves them out
    levels[0] = RankerLevel(W1.tocsr(), levels[0].bias)
    return chain, levels


def queries(rng, n, n_features=400):
    return sp.random(n, n_features, density=0.05, random_state=rng, format="csr", dtype=np.float32)


def test_exact_index_gives_exact_beam_search(tmp_path):
    rng = np.random.default_rng(0)
    chain, levels = wide_model(rng)
    X = queries(rng, 60)
    shortlist = FaissShortlist.build(levels[0], X.shape[1])
    assert shortlist.info.index == "flat" and shortlist.info.columns < X.shape[1]
    shortlist.save(tmp_path / "shortlist")
    loaded = FaissShortlist.load(tmp_path / "shortlist")
    tree = TreeIndex(chain)
    # l3-hinge saturates (raw ≥ 1 → 1.0) and many level-1 nodes tie: both paths break ties by raw margin.
    for post in ("l3-hinge", "sigmoid"):
        for beam in (1, 5, 20):
            exact = beam_search(X, levels, tree, beam, 10, post)
            fast = beam_search(X, levels, tree, beam, 10, post, first_level=loaded)
            assert np.array_equal(exact.labels, fast.labels)
            assert np.allclose(exact.scores, fast.scores, atol=1e-5)
    assert level1_recall(loaded, X, levels[0], 10) == 1.0


def test_hnsw_index_recall_at_the_default_ef_search():
    rng = np.random.default_rng(1)
    chain, levels = wide_model(rng)
    X = queries(rng, 200)
    hnsw = FaissShortlist.build(levels[0], X.shape[1], ShortlistConfig(exact_max_nodes=100))
    assert hnsw.info.index == "hnsw"
    # Documented setting: efSearch 128 on a 300-node level finds every exact top-10 node here.
    assert level1_recall(hnsw, X, levels[0], 10) >= 0.99
    tree = TreeIndex(chain)
    exact = beam_search(X, levels, tree, 10, 5, "sigmoid")
    fast = beam_search(X, levels, tree, 10, 5, "sigmoid", first_level=hnsw)
    assert (exact.labels == fast.labels).all(axis=1).mean() >= 0.99
    hnsw.index.hnsw.efSearch = 1  # a starved search loses recall: the test can tell the difference
    assert level1_recall(hnsw, X, levels[0], 10) < 0.99


def test_bundle_shortlist_equals_exact_scoring(xr_bundle, corpus_files):
    import json

    from xtag.models.bundle.loader import load_bundle

    _, bundle = xr_bundle
    b = load_bundle(bundle)
    assert b.predictor.model.first_level is not None
    info = json.loads((bundle / "shortlist" / "config.json").read_text())
    assert info["index"] == "flat" and info["recall"] == 1.0
    texts = [json.loads(line)["text"] for line in corpus_files[1].read_text().splitlines()]
    X = b.predictor.featurizer.transform(texts)
    with_index = b.predictor.model.predict(X, k=5)
    b.predictor.model.first_level = None
    without = b.predictor.model.predict(X, k=5)
    assert np.array_equal(with_index.labels, without.labels)
    assert np.allclose(with_index.scores, without.scores, atol=1e-5)


def test_export_skips_the_index_when_level_1_is_small(xr_bundle, tmp_path):
    """By default (min_nodes) a small level 1 is scored exactly: the bundle has no shortlist and says why."""
    import shutil

    from xtag.models.bundle.loader import load_bundle
    from xtag.models.xlinear.shortlist import ShortlistConfig
    from xtag.training.config import TrainConfig
    from xtag.training.export.export_run import export_run

    run, _ = xr_bundle
    copy = tmp_path / "run"
    shutil.copytree(run, copy)
    config = TrainConfig.load(copy / "config.json")
    config.xr_transformer.export.shortlist_config = ShortlistConfig()
    config.save(copy / "config.json")
    manifest = export_run(copy, tmp_path / "bundle")
    assert not (tmp_path / "bundle" / "shortlist").exists()
    assert "min_nodes=4096" in manifest["export"]["shortlist"]["skipped"]
    assert load_bundle(tmp_path / "bundle").predictor.model.first_level is None

    from typer.testing import CliRunner

    from xtag.cli import app

    r = CliRunner().invoke(app, ["export", str(copy), "--out", str(tmp_path / "forced"), "--shortlist-min-nodes", "0"])
    assert r.exit_code == 0, r.output
    assert "shortlist: flat FAISS index" in r.output
    assert load_bundle(tmp_path / "forced").predictor.model.first_level is not None
