"""The LaMP re-ranker at inference: a batch scores each text as it would alone, tokenized once."""

from __future__ import annotations

import numpy as np
from xtag.models.bundle.loader import load_bundle

TEXTS = [
    "shooter weapons arena frag multiplayer",
    "python module pip interpreter script with a long description of what the interpreter does here",
    "email smtp imap mailbox inbox http server",
    "mail",
    "a game",
    "image editor for photos and drawings, layers and brushes",
]


def test_batch_path_equals_one_text_at_a_time_and_tokenizes_once(lamp_bundle):
    """/v1/predict/batch must answer what /v1/predict answers text by text, whatever the batching (length-sorted
    batches smaller than the request here), and the tokenizer runs once for the whole request."""
    model = load_bundle(lamp_bundle[1]).predictor.model
    reranker = model.reranker
    reranker.onnx.batch_size = 4  # 6 texts: two length-sorted batches
    tokenizer, calls = reranker.onnx.tokenizer, []
    ids_of = tokenizer._ids
    tokenizer._ids = lambda texts: calls.append(len(texts)) or ids_of(texts)
    together = model.predict(TEXTS, k=4)
    assert calls == [len(TEXTS)]
    for i, text in enumerate(TEXTS):
        alone = model.predict([text], k=4)
        assert alone.labels[0].tolist() == together.labels[i].tolist()
        assert np.abs(alone.scores[0] - together.scores[i]).max() < 1e-5


def test_padded_token_arrays_hold_each_texts_ids(lamp_bundle):
    tokenizer = load_bundle(lamp_bundle[1]).predictor.model.reranker.onnx.tokenizer
    texts = [*TEXTS, ""]
    ids, mask = tokenizer(texts)
    for row, encoding in enumerate(tokenizer.tokenizer.encode_batch(texts)):
        n = len(encoding.ids)
        assert ids[row, :n].tolist() == encoding.ids and mask[row].sum() == n
        assert (ids[row, n:] == tokenizer.pad_id).all()


def test_a_lamp_bundle_declares_its_cost_profile_and_width(lamp_bundle, tiny_bundle):
    """Admission (service/http/cost.py) asks the model, not its internals: LaMP re-scores max(C, k) candidates
    with attention between them, which costs more than its first stage alone, and more the wider k is."""
    from xtag.service.http.cost import Work, tree_shape

    lamp = load_bundle(lamp_bundle[1]).predictor
    first = load_bundle(tiny_bundle).predictor
    hint = lamp.cost_hint()
    assert hint.family == "lamp" and hint.candidates == lamp.model.reranker.config.candidates
    assert first.cost_hint().family == "linear"
    shape = tree_shape(lamp)

    def work(predictor, k):
        return Work(8, 8 * 400, k, 10, shape, explain=True, hint=predictor.cost_hint())

    assert work(lamp, 4).cost() > work(first, 4).cost()
    assert work(lamp, 400).cost() > 4 * work(lamp, 40).cost()  # the pairs: quadratic in the width
