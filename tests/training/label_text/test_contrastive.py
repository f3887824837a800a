"""The label-text encoder's contrastive training on tiny corpora built here: the loss falls, a planted label
ranks first, a document is never its own label's positive, the tree's hard negatives are taken, the baseline
kind is untrained."""

from __future__ import annotations

import random

import numpy as np
import pytest
import scipy.sparse as sp
from xtag.models.errors import XtagError
from xtag.models.features.tfidf import TfidfConfig
from xtag.training.label_text.config import LabelTextConfig
from xtag.training.label_text.contrastive import fit_towers, own_labels, train_label_encoder

TOPICS = {
    "vehicle": "car truck engine wheel",
    "food": "bread cheese soup salad",
    "music": "guitar drum melody song",
    "weather": "rain snow storm cloud",
    "health": "doctor fever pill nurse",
    "money": "bank loan coin cash",
}
NAMES = sorted(TOPICS)
# A label's text shares one word with its documents; documents add filler and one word of a random other topic.
LABEL_TEXTS = [f"{name} {TOPICS[name].split()[0]}" for name in NAMES]
FILLER = "the a of and with for some".split()
CONFIG = dict(kind="tfidf-linear", dim=8, epochs=15, batch_size=16, lr=0.05, tfidf=TfidfConfig(ngram_max=1, min_df=1))


def corpus(n: int, seed: int) -> tuple[list[str], sp.csr_matrix, list[int]]:
    rng = random.Random(seed)
    texts, planted = [], []
    for _ in range(n):
        j = rng.randrange(len(NAMES))
        other = NAMES[(j + rng.randrange(1, len(NAMES))) % len(NAMES)]
        words = rng.sample(TOPICS[NAMES[j]].split(), 3) + rng.sample(TOPICS[other].split(), 1) + rng.sample(FILLER, 2)
        rng.shuffle(words)
        texts.append(" ".join(words))
        planted.append(j)
    Y = sp.csr_matrix((np.ones(n), (np.arange(n), planted)), shape=(n, len(NAMES)))
    return texts, Y, planted


def test_training_lowers_the_loss_and_ranks_the_planted_label_first():
    texts, Y, _ = corpus(240, seed=0)
    events: list[dict] = []
    encoder = train_label_encoder(texts, Y, LABEL_TEXTS, LabelTextConfig(**CONFIG), log=events.append)
    losses = [e["loss"] for e in events if e["event"] == "label_text_epoch"]
    assert len(losses) == 15 and losses[-1] < 0.5 * losses[0]
    test, _, planted = corpus(60, seed=1)
    scores = encoder.encode_documents(test) @ encoder.encode_labels(LABEL_TEXTS).T
    assert (scores.argmax(axis=1) == planted).mean() >= 0.95
    assert np.isfinite(encoder.encode_documents(["", "zzz"])).all()


def test_hard_negatives_from_the_shortlist_are_used():
    texts, Y, planted = corpus(240, seed=0)
    # every document's shortlist: its own label and the next one (the one it does not carry is the negative)
    nxt = (np.asarray(planted) + 1) % len(NAMES)
    rows = np.repeat(np.arange(len(texts)), 2)
    hard = sp.csr_matrix((np.ones(2 * len(texts)), (rows, np.ravel(np.c_[planted, nxt]))), shape=Y.shape)
    config = LabelTextConfig(**{**CONFIG, "hard_negatives": 1, "batch_size": 4})
    encoder = train_label_encoder(texts, Y, LABEL_TEXTS, config, hard_negatives=hard)
    test, _, truth = corpus(60, seed=1)
    scores = encoder.encode_documents(test) @ encoder.encode_labels(LABEL_TEXTS).T
    assert (scores.argmax(axis=1) == truth).mean() >= 0.95
    with pytest.raises(XtagError, match="hard negatives"):
        train_label_encoder(texts, Y, LABEL_TEXTS, config, hard_negatives=hard[:10])


def test_a_document_is_never_its_own_labels_positive():
    ids = ["a", "b", "c"]
    assert own_labels(["b", "x", "a"], ids, 3).tolist() == [1, -1, 0]
    assert own_labels(None, ids, 2).tolist() == [-1, -1]
    texts = ["alpha one", "beta two", "gamma three"]
    Y = sp.identity(3, format="csr")  # each document carries only the label that is itself
    with pytest.raises(XtagError, match="no \\(document, label\\) pair"):
        train_label_encoder(texts, Y, texts, LabelTextConfig(**CONFIG), doc_ids=ids, label_ids=ids)
    train_label_encoder(texts, Y, texts, LabelTextConfig(**{**CONFIG, "epochs": 1}))  # without ids: pairs


def test_the_tfidf_kind_is_the_untrained_cosine():
    texts, Y, _ = corpus(50, seed=0)
    encoder = train_label_encoder(texts, Y, LABEL_TEXTS, LabelTextConfig(**{**CONFIG, "kind": "tfidf"}))
    assert encoder.sparse and encoder.dim == len(encoder.tfidf.vocabulary)
    assert "weather" in encoder.tfidf.vocabulary  # fitted on the label texts too
    with pytest.raises(XtagError, match="do not match"):
        train_label_encoder(texts, Y, LABEL_TEXTS[:3], LabelTextConfig(**CONFIG))


@pytest.mark.parametrize("shared,balance", [(True, 0.0), (False, 0.5)])
def test_dense_features_shared_towers_and_balance_train(shared, balance):
    """The static kind's path (dense features × a tower), a siamese tower, and frequency-balanced pairs."""
    rng = np.random.default_rng(0)
    centres = rng.normal(size=(4, 16))
    planted = rng.integers(0, 4, 200)
    Xd = centres[planted] + 0.3 * rng.normal(size=(200, 16))
    Y = sp.csr_matrix((np.ones(200), (np.arange(200), planted)), shape=(200, 4))
    events: list[dict] = []
    config = LabelTextConfig(
        kind="static-linear", dim=8, epochs=10, batch_size=16, lr=0.02, shared=shared, balance=balance
    )
    doc, label = fit_towers(Xd, centres, Y, np.full(200, -1), config, log=events.append)
    assert doc.shape == label.shape == (16, 8) and np.array_equal(doc, label) == shared
    losses = [e["loss"] for e in events]
    assert losses[-1] < losses[0]
    assert ((Xd @ doc) @ (centres @ label).T).argmax(axis=1).tolist() == planted.tolist()
