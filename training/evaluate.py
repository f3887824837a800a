"""Evaluate a bundle on a labelled corpus through the same predictor the service uses."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
from tqdm.auto import tqdm

from models.beam_search import Predictions
from models.bundle import Bundle
from models.metrics import evaluate, jain_propensities
from training.data import Corpus

BATCH = 2048


def predict_corpus(
    bundle: Bundle,
    texts: list[str],
    k: int,
    beam_size: int | None = None,
    progress: bool = True,
    calibrated: bool = True,
) -> Predictions:
    """Batched prediction over many texts, with a progress bar (raw model scores with calibrated=False)."""
    parts = list(_batches(bundle, texts, k, beam_size, progress, calibrated))
    if not parts:
        return Predictions(np.empty((0, k), np.int64), np.empty((0, k), np.float32))
    return Predictions(np.vstack([p.labels for p in parts]), np.vstack([p.scores for p in parts]))


def _batches(bundle, texts, k, beam_size, progress, calibrated=True) -> Iterator[Predictions]:
    with tqdm(total=len(texts), desc="predict", unit="doc", disable=not progress) as bar:
        for lo in range(0, len(texts), BATCH):
            yield bundle.predictor.predict(texts[lo : lo + BATCH], k=k, beam_size=beam_size, calibrated=calibrated)
            bar.update(min(BATCH, len(texts) - lo))


def evaluate_bundle(
    bundle: Bundle,
    corpus: Corpus,
    ks: tuple[int, ...] = (1, 3, 5),
    beam_size: int | None = None,
    A: float = 0.55,
    B: float = 1.5,
    progress: bool = True,
) -> tuple[dict[str, float], dict]:
    """Metrics (percent) plus facts about the run: unknown test labels, documents, timing."""
    vocab = bundle.predictor.vocab
    Y, unknown = corpus.label_matrix(vocab)
    preds = predict_corpus(bundle, corpus.texts, max(ks), beam_size, progress)
    propensity = jain_propensities(vocab.frequency_array, vocab.n_train_docs, A, B)
    metrics = evaluate(preds.labels, Y, ks, propensity)
    info = {"documents": len(corpus), "unknown_label_mentions": unknown, "skipped_rows": corpus.skipped}
    return metrics, info
