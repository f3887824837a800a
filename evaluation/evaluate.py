"""Evaluate a bundle on a labelled corpus through the same predictor the service uses."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp
from xtag.corpus.files import Corpus
from xtag.models.bundle.loader import Bundle
from xtag.models.inference.label_filter import self_filters
from xtag.models.labels import LabelVocab
from xtag.models.metrics import DEFAULT_CONVENTION, check_convention, evaluate, propensities_with_unseen
from xtag.models.tagging.batches import predict_corpus


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


def evaluate_bundle(
    bundle: Bundle,
    corpus: Corpus,
    ks: tuple[int, ...] = (1, 3, 5),
    beam_size: int | None = None,
    A: float = 0.55,
    B: float = 1.5,
    progress: bool = True,
    convention: str = DEFAULT_CONVENTION,
    exclude_self: bool = False,
) -> tuple[dict[str, float], dict]:
    """Metrics (percent) plus facts about the run: convention, unseen test labels, documents. `exclude_self`: a
    document whose id is a label's name never gets that label (`xtag evaluate --exclude-self`)."""
    vocab = bundle.predictor.vocab
    truth = ground_truth(corpus, vocab, convention, A, B)
    filters = self_filters(corpus.ids, vocab) if exclude_self else None
    preds = predict_corpus(bundle, corpus.texts, max(ks), beam_size, progress, filters=filters)
    metrics = evaluate(preds.labels, truth.Y, ks, truth.propensity, convention)
    info = {
        "documents": len(corpus),
        "convention": convention,
        "unknown_label_mentions": truth.unseen_mentions,
        "unknown_labels": truth.unseen_labels,
        "skipped_rows": corpus.skipped,
    }
    return metrics, info
