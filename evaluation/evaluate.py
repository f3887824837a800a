"""Evaluate a bundle on a labelled corpus through the same predictor the service uses."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp
from tqdm.auto import tqdm
from xtag.models.bundle.loader import Bundle
from xtag.models.inference.beam_search import Predictions
from xtag.models.inference.reweighting import predict_reweighted
from xtag.models.labels import LabelVocab
from xtag.models.metrics import DEFAULT_CONVENTION, check_convention, evaluate, propensities_with_unseen
from xtag.training.data.corpus import Corpus

BATCH = 2048


@dataclass
class GroundTruth:
    """A test split's labels as the metrics need them under one convention (models/metrics.py).

    Under ``xmc`` the columns are the model's labels followed by the test labels it never saw in
    training (`names`, `frequencies` cover both, unseen ones with frequency 0), so those mentions
    count as misses; under ``known-labels`` they are dropped. Either way `unseen_*` count them.
    """

    Y: sp.csr_matrix
    names: list[str]
    frequencies: np.ndarray
    propensity: np.ndarray
    unseen_mentions: int
    unseen_labels: int
    convention: str


def ground_truth(
    corpus: Corpus, vocab: LabelVocab, convention: str = DEFAULT_CONVENTION, A: float = 0.55, B: float = 1.5
) -> GroundTruth:
    """Label matrix, names, training frequencies and propensities of `corpus` under `convention`."""
    missing = corpus.unseen_labels(vocab)
    unseen = missing if check_convention(convention) == "xmc" else []
    Y, _ = corpus.label_matrix(vocab, extra=unseen)
    mentions = sum(1 for names in corpus.labels for n in set(names) if n not in vocab.index)
    return GroundTruth(
        Y=Y,
        names=vocab.names + unseen,
        frequencies=np.concatenate([vocab.frequency_array, np.zeros(len(unseen))]),
        propensity=propensities_with_unseen(vocab.frequency_array, len(unseen), vocab.n_train_docs, A, B),
        unseen_mentions=mentions,
        unseen_labels=len(missing),
        convention=convention,
    )


def predict_corpus(
    bundle: Bundle,
    texts: list[str],
    k: int,
    beam_size: int | None = None,
    progress: bool = True,
    calibrated: bool = True,
    gains: np.ndarray | None = None,
) -> Predictions:
    """Batched prediction over many texts, with a progress bar (raw model scores with calibrated=False).

    `gains` (models/reweighting.gains_for) re-rank a widened beam exactly as the service's per-request
    `reweight` does (predict_reweighted); they need calibrated scores, the service's.
    """
    parts = list(_batches(bundle, texts, k, beam_size, progress, calibrated, gains))
    if not parts:
        return Predictions(np.empty((0, k), np.int64), np.empty((0, k), np.float32))
    return Predictions(np.vstack([p.labels for p in parts]), np.vstack([p.scores for p in parts]))


def _batches(bundle, texts, k, beam_size, progress, calibrated=True, gains=None) -> Iterator[Predictions]:
    p = bundle.predictor
    with tqdm(total=len(texts), desc="predict", unit="doc", disable=not progress) as bar:
        for lo in range(0, len(texts), BATCH):
            chunk = texts[lo : lo + BATCH]
            if gains is None:
                yield p.predict(chunk, k=k, beam_size=beam_size, calibrated=calibrated)
            else:
                beam = beam_size or int(p.model.config.beam_size)
                yield predict_reweighted(p, chunk, k, gains, beam, p.n_labels)
            bar.update(len(chunk))


def evaluate_bundle(
    bundle: Bundle,
    corpus: Corpus,
    ks: tuple[int, ...] = (1, 3, 5),
    beam_size: int | None = None,
    A: float = 0.55,
    B: float = 1.5,
    progress: bool = True,
    convention: str = DEFAULT_CONVENTION,
) -> tuple[dict[str, float], dict]:
    """Metrics (percent) plus facts about the run: convention, unseen test labels, documents."""
    truth = ground_truth(corpus, bundle.predictor.vocab, convention, A, B)
    preds = predict_corpus(bundle, corpus.texts, max(ks), beam_size, progress)
    metrics = evaluate(preds.labels, truth.Y, ks, truth.propensity, convention)
    info = {
        "documents": len(corpus),
        "convention": convention,
        "unknown_label_mentions": truth.unseen_mentions,
        "unknown_labels": truth.unseen_labels,
        "skipped_rows": corpus.skipped,
    }
    return metrics, info
