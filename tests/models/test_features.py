"""TF-IDF: the few-texts fast path must give exactly scikit-learn's matrix, before and after a save."""

import numpy as np
import pytest
from xtag.models.features import FEW_TEXTS, TfidfConfig, TfidfFeaturizer

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
def test_few_texts_path_equals_scikit_learn(config, tmp_path):
    rows = make_rows(200, seed=3)
    featurizer, _ = TfidfFeaturizer.fit([r["text"] for r in rows], config)
    featurizer.save(tmp_path / "tfidf")
    loaded = TfidfFeaturizer.load(tmp_path / "tfidf")
    texts = EDGE_TEXTS + [r["text"] for r in make_rows(20, seed=4)]
    for f in (featurizer, loaded):
        for lo in range(0, len(texts), FEW_TEXTS):
            batch = texts[lo : lo + FEW_TEXTS]
            fast, reference = f.transform(batch), f.vectorizer.transform(batch).tocsr()
            reference.sort_indices()
            assert fast.shape == reference.shape and fast.dtype == np.float32
            assert np.array_equal(fast.indptr, reference.indptr) and np.array_equal(fast.indices, reference.indices)
            np.testing.assert_allclose(fast.data, reference.data, rtol=1e-6, atol=1e-7)


def test_large_batches_use_scikit_learn_and_agree_with_small_ones():
    rows = make_rows(100, seed=5)
    featurizer, _ = TfidfFeaturizer.fit([r["text"] for r in rows], TfidfConfig(min_df=1))
    texts = [r["text"] for r in rows[: FEW_TEXTS * 3]]
    whole = featurizer.transform(texts)
    pieces = [featurizer.transform([t]) for t in texts]
    for i, piece in enumerate(pieces):
        np.testing.assert_allclose(piece.toarray(), whole[i].toarray(), rtol=1e-6, atol=1e-7)
