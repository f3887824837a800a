"""Explanations (models/explain/linear.py): words of the text only, and contributions that add up to the path's score."""

import re

import numpy as np
import pytest
from xtag.models.bundle.loader import load_bundle
from xtag.models.explain.linear import Explainer, ExplainUnavailable
from xtag.models.xlinear.readable import as_csr, pair_scores

from tests.conftest import make_rows

TEXTS = [row["text"] for row in make_rows(12, seed=7)] + ["A Compiler and GCC header library for genome DNA solvers"]


def explained(bundle, texts, k=4):
    predictor = load_bundle(bundle).predictor
    preds = predictor.predict(texts, k=k)
    labels = [[int(j) for j in row if j >= 0] for row in preds.labels]
    return predictor, labels, Explainer.for_predictor(predictor).explain(texts, labels)


def credited_terms(explanation: dict) -> list[str]:
    return [w["term"] for w in explanation["words"]] + [
        w["term"] for level in explanation["levels"] for w in level["terms"]
    ]


def test_explanations_name_only_words_and_ngrams_of_the_text(tiny_bundle):
    texts = [*TEXTS, "zzqx compiler wqqz gcc"]  # two words the featuriser never saw
    _, labels, out = explained(tiny_bundle, texts)
    seen = 0
    for text, row, explanations in zip(texts, labels, out):
        assert len(explanations) == len(row)
        tokens = re.findall(r"\b\w\w+\b", text.lower())
        ngrams = {" ".join(tokens[i : i + n]) for n in (1, 2) for i in range(len(tokens) - n + 1)}
        for e in explanations:
            terms = credited_terms(e)
            assert set(terms) <= ngrams, (text, terms)
            assert all(w["contribution"] > 0 for w in e["words"])  # words credited, not blamed
            seen += len(terms)
    assert seen > 50
    assert out[-1][0]["words"] and not {"zzqx", "wqqz"} & set(credited_terms(out[-1][0]))


def check_sums(predictor, texts, labels, out, dense: bool):
    """Per level: bias + shown terms + other terms (+ dense) = the margin the rankers compute for that node;
    the product of the post-processed margins = the engine's raw score of the label (before the display maps)."""
    model = predictor.model
    X = predictor.featurizer.transform(texts)
    engine = model.predict(X, k=max(len(row) for row in labels))
    Xc = as_csr(X)
    checked = 0
    for d, (row, explanations) in enumerate(zip(labels, out)):
        for slot, (label, e) in enumerate(zip(row, explanations)):
            assert [lv["level"] for lv in e["levels"]] == list(range(1, model.chain.depth + 1))
            for lv, level in zip(e["levels"], model.levels):
                assert lv["node"] == model.chain.ancestors(lv["level"])[label]
                assert (lv["dense"] is not None) == dense
                parts = (
                    lv["bias"] + sum(w["contribution"] for w in lv["terms"]) + lv["other_terms"] + (lv["dense"] or 0)
                )
                assert parts == pytest.approx(lv["margin"], abs=2e-5)
                reference = pair_scores(level.W, level.bias, Xc, np.array([d]), np.array([lv["node"]]))[0]
                assert lv["margin"] == pytest.approx(reference, abs=2e-5)
                checked += 1
            assert np.prod([lv["score"] for lv in e["levels"]]) == pytest.approx(e["path_score"], abs=1e-5)
            assert engine.labels[d, slot] == label
            assert e["path_score"] == pytest.approx(float(engine.scores[d, slot]), abs=1e-5)
    assert checked > 20


def test_contributions_add_up_to_each_level_margin_and_the_path_score(tiny_bundle):
    predictor, labels, out = explained(tiny_bundle, TEXTS)
    check_sums(predictor, TEXTS, labels, out, dense=False)
    # a term that helps a label at every level of its path is credited the sum of its per-level shares
    e = out[0][0]
    top = e["words"][0]
    per_level = [w["contribution"] for lv in e["levels"] for w in lv["terms"] if w["term"] == top["term"]]
    assert len(per_level) == len(e["levels"]) and top["contribution"] == pytest.approx(sum(per_level), abs=1e-5)


def test_phi_cat_bundles_explain_their_tfidf_part_and_credit_the_embedding_as_dense(xr_bundle):
    _, bundle = xr_bundle
    predictor, labels, out = explained(bundle, TEXTS)
    check_sums(predictor, TEXTS, labels, out, dense=True)
    assert any(lv["dense"] != 0 for row in out for e in row for lv in e["levels"])


def test_bundles_without_tfidf_features_cannot_be_explained(lightxml_bundle):
    _, bundle = lightxml_bundle
    with pytest.raises(ExplainUnavailable, match="no TF-IDF features"):
        Explainer.for_predictor(load_bundle(bundle).predictor)
