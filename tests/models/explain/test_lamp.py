"""A LaMP bundle's explanations: the words each returned label attended to, the returned labels it listened to,
beside its first stage's explanation; and a bundle exported before the graph had attention outputs."""

from __future__ import annotations

import re

import numpy as np
from xtag.models.bundle.loader import load_bundle
from xtag.models.explain.lamp import NO_ATTENTION, LampExplainer, text_words
from xtag.models.explain.linear import TOP_TERMS, Explainer
from xtag.models.explain.select import explainer_for

TEXTS = [
    "shooter weapons arena frag multiplayer, shooter!",
    "python module pip interpreter script",
    "email smtp imap mailbox inbox http server",
]


def text_word_set(text: str) -> set[str]:
    return {w.lower() for w in re.findall(r"\w+", text)}


def explained(bundle, texts=TEXTS, k=4, rerank=True):
    predictor = load_bundle(bundle).predictor
    preds = predictor.predict(texts, k=k, rerank=rerank)
    labels = [row[row >= 0].tolist() for row in preds.labels]
    return predictor, labels, explainer_for(predictor).explain(texts, labels, rerank=rerank)


def sorted_shares(items: list[dict]) -> list[float]:
    weights = [x["weight"] for x in items]
    assert all(0 < w <= 1 for w in weights)
    assert weights == sorted(weights, reverse=True)
    return weights


def test_word_pieces_merge_into_the_words_of_the_text(lamp_bundle):
    tokenizer = load_bundle(lamp_bundle[1]).predictor.model.reranker.onnx.tokenizer.tokenizer
    text = "Shootermultiplayer shooter, shooter!"
    encoding = tokenizer.encode(text)
    ids = encoding.word_ids
    pieces = [t for t, w in zip(encoding.tokens, ids) if w == 0]
    assert len(pieces) > 1 and "[UNK]" not in pieces, "the test needs a word the tokenizer splits"
    positions, owners, words = text_words(encoding, text)
    assert words == ["shootermultiplayer", "shooter"]  # lowercased, repeats one word, punctuation and specials none
    assert sorted(positions.tolist()) == [i for i, w in enumerate(ids) if w in (0, 1, 3)]
    assert (owners[np.isin(positions, [i for i, w in enumerate(ids) if w == 0])] == 0).all()
    assert np.sum(owners == 1) == sum(w in (1, 3) for w in ids)


def test_each_returned_label_gets_attended_words_and_supporting_labels(lamp_bundle, tiny_bundle):
    predictor, labels, explanations = explained(lamp_bundle[1])
    first = Explainer.for_predictor(load_bundle(tiny_bundle).predictor).explain(TEXTS, labels)
    for text, row, row_e, row_first in zip(TEXTS, labels, explanations, first):
        assert len(row_e) == len(row)
        for label, e, f in zip(row, row_e, row_first):
            # the first stage's explanation of the same label, as that bundle gives it
            assert {key: e[key] for key in ("words", "path_score", "levels")} == f
            words = [w["term"] for w in e["attended_words"]]
            assert words and set(words) <= text_word_set(text) and len(words) == len(set(words)) <= TOP_TERMS
            assert sum(sorted_shares(e["attended_words"])) <= 1 + 1e-6
            support = e["supporting_labels"]
            assert {s["id"] for s in support} <= set(row) - {label}
            assert all(predictor.vocab.names[s["id"]] == s["name"] for s in support)
            assert sum(sorted_shares(support)) <= 1 + 1e-6


def test_attention_is_that_of_the_candidates_the_prediction_scored(lamp_bundle):
    """The explainer's weights are the graph's on the prediction's own candidates: a label-to-label row is a
    distribution over them, and the LaMP_pr graph gives no weight to pairs that never co-occurred."""
    model = load_bundle(lamp_bundle[1]).predictor.model
    cand = model.candidates(TEXTS, 4, None)
    weights = model.reranker.attention(TEXTS, cand.labels, cand.scores)
    mask = model.reranker.inputs(cand.labels, cand.scores)["label_mask"]
    for (to_tokens, to_labels), allowed, labels in zip(weights, mask, cand.labels):
        real = labels >= 0
        assert np.allclose(to_tokens[real].sum(axis=1), 1, atol=1e-5)
        assert np.allclose(to_labels[real].sum(axis=1), 1, atol=1e-5)
        assert (to_labels[real][allowed[real] == 0] < 1e-6).all()


def test_rerank_false_explains_with_the_first_stage_alone(lamp_bundle, tiny_bundle):
    _, labels, explanations = explained(lamp_bundle[1], rerank=False)
    first = Explainer.for_predictor(load_bundle(tiny_bundle).predictor).explain(TEXTS, labels)
    assert explanations == first


def test_a_bundle_without_attention_outputs_predicts_as_before_and_explains_with_its_first_stage(
    old_lamp_bundle, lamp_bundle, tiny_bundle
):
    old, new = load_bundle(old_lamp_bundle).predictor, load_bundle(lamp_bundle[1]).predictor
    assert not old.model.reranker.has_attention and new.model.reranker.has_attention
    a, b = old.predict(TEXTS, k=4), new.predict(TEXTS, k=4)
    assert np.array_equal(a.labels, b.labels) and np.allclose(a.scores, b.scores, atol=1e-6)
    _, labels, explanations = explained(old_lamp_bundle)
    first = Explainer.for_predictor(load_bundle(tiny_bundle).predictor).explain(TEXTS, labels)
    assert explanations == [[{**f, "note": NO_ATTENTION} for f in row] for row in first]
    assert isinstance(explainer_for(old), LampExplainer)
