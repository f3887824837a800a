"""The label-text encoder's training, interim: TF-IDF over the documents and label texts, projected onto the label
texts' top singular directions (the untrained baseline's shape; the contrastive encoder replaces it)."""

from __future__ import annotations

import time

import numpy as np
from xtag.models.features.tfidf import TfidfConfig, TfidfFeaturizer
from xtag.models.label_text.encoder import LabelTextEncoder
from xtag.training.label_text.config import EncoderConfig


def train_label_encoder(
    texts: list[str],
    Y,
    label_texts: list[str],
    config: EncoderConfig,
    hard_negatives: np.ndarray | None = None,
    doc_ids: list[str] | None = None,
    log=lambda event: None,
) -> LabelTextEncoder:
    from sklearn.decomposition import TruncatedSVD

    start = time.perf_counter()
    tfidf, _ = TfidfFeaturizer.fit(list(texts) + list(label_texts), TfidfConfig(ngram_max=1, min_df=1))
    L = tfidf.transform(list(label_texts))
    dim = max(2, min(config.dim, L.shape[0] - 1, L.shape[1] - 1))
    svd = TruncatedSVD(dim, random_state=0).fit(L)
    encoder = LabelTextEncoder(tfidf, svd.components_.T.astype(np.float32))
    log({"event": "label_encoder", "kind": "tfidf-svd", "dim": encoder.dim, "seconds": time.perf_counter() - start})
    return encoder
