"""Batched prediction over a whole corpus: the one loop that evaluation, calibration, `xtag predict` and LaMP's
first-stage candidates share. It lives in models/ (torch-free, beside the Predictor it batches), so training reaches
it without importing evaluation."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import numpy as np
from tqdm.auto import tqdm
from xtag.models.bundle.loader import Bundle
from xtag.models.inference.label_filter import LabelFilter
from xtag.models.inference.reweighting import predict_reweighted
from xtag.models.inference.types import Predictions

BATCH = 2048


def predict_corpus(
    bundle: Bundle,
    texts: list[str],
    k: int,
    beam_size: int | None = None,
    progress: bool = True,
    calibrated: bool = True,
    gains: np.ndarray | None = None,
    filters: Sequence[LabelFilter | None] | None = None,
) -> Predictions:
    """Batched prediction over many texts, with a progress bar (raw model scores with calibrated=False).

    `gains` (models/inference/reweighting.gains_for) re-rank a widened beam exactly as the service's per-request
    `reweight` does (predict_reweighted); they need calibrated scores, the service's. `filters`, one per text
    (models/inference/label_filter.py): `--exclude-self`'s.
    """
    parts = list(_batches(bundle, texts, k, beam_size, progress, calibrated, gains, filters))
    if not parts:
        return Predictions(np.empty((0, k), np.int64), np.empty((0, k), np.float32))
    return Predictions(np.vstack([p.labels for p in parts]), np.vstack([p.scores for p in parts]))


def _batches(bundle, texts, k, beam_size, progress, calibrated=True, gains=None, filters=None) -> Iterator[Predictions]:
    p = bundle.predictor
    with tqdm(total=len(texts), desc="predict", unit="doc", disable=not progress) as bar:
        for lo in range(0, len(texts), BATCH):
            chunk = texts[lo : lo + BATCH]
            chunk_filters = None if filters is None else filters[lo : lo + BATCH]
            if gains is None:
                yield p.predict(chunk, k=k, beam_size=beam_size, calibrated=calibrated, filters=chunk_filters)
            else:
                beam = beam_size or int(p.model.config.beam_size)
                yield predict_reweighted(p, chunk, k, gains, beam, p.n_labels, filters=chunk_filters)
            bar.update(len(chunk))
