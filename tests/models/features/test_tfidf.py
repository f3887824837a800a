"""TF-IDF: the hand-written transform must give scikit-learn's matrix at every batch size, before and after a save."""

import numpy as np
import pytest
from xtag.models.features import tfidf
from xtag.models.features.tfidf import TfidfConfig, TfidfFeaturizer

from tests.conftest import make_rows

EDGE_TEXTS = [
    "",
    "zzz-unseen qqq",
    "Python PYTHON python script script script",
    "café naïve résumé python",
    "  audio\tsound\n\nmixer  ",
    "a",
]


@pytest.mark.parametrize("config", [TfidfConfig(min_df=1), TfidfConfig(min_df=2, ngram_max=1, sublinear_tf=False)])
def test_transform_equals_scikit_learn(config, tmp_path, monkeypatch):
    monkeypatch.setattr(tfidf, "CHUNK_TEXTS", 7)  # batches past it are counted in chunks and joined
    rows = make_rows(200, seed=3)
    featurizer, _ = TfidfFeaturizer.fit([r["text"] for r in rows], config)
    featurizer.save(tmp_path / "tfidf")
    loaded = TfidfFeaturizer.load(tmp_path / "tfidf")
    texts = EDGE_TEXTS + [r["text"] for r in make_rows(20, seed=4)]
    for f in (featurizer, loaded):
        for batch in ([texts[0]], texts[1:3], texts[:8], texts):
            fast, reference = f.transform(batch), f.vectorizer.transform(batch).tocsr()
            reference.sort_indices()
            assert fast.shape == reference.shape and fast.dtype == np.float32
            assert np.array_equal(fast.indptr, reference.indptr) and np.array_equal(fast.indices, reference.indices)
            np.testing.assert_allclose(fast.data, reference.data, rtol=1e-6, atol=1e-7)
        assert f.transform([]).shape == (0, f.dim)


def test_a_batch_agrees_with_its_texts_one_by_one():
    rows = make_rows(100, seed=5)
    featurizer, _ = TfidfFeaturizer.fit([r["text"] for r in rows], TfidfConfig(min_df=1))
    texts = [r["text"] for r in rows[:24]]
    whole = featurizer.transform(texts)
    pieces = [featurizer.transform([t]) for t in texts]
    for i, piece in enumerate(pieces):
        np.testing.assert_array_equal(piece.toarray(), whole[i].toarray())
