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
