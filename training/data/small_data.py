"""Warnings for a corpus too small to train on well, given when the run starts rather than found at serving.

On 30 documents TF-IDF keeps about 30 features and every family still returns k labels for any text,
related or not: nothing fails, so nothing would tell the user. The limits are orders of magnitude, not
tuned values: the bundled benchmark corpora (debtags, 23.5K documents, 175K features) are far above
them, the toy corpora of the tests far below.
"""

from __future__ import annotations

import numpy as np

MIN_DOCUMENTS = 1000
MIN_FEATURES = 1000
RARE_LABEL_DOCS = 3  # a label with fewer training documents than this is rare
MAX_RARE_SHARE = 0.5  # warn when more than this share of the labels is rare


def small_data_warnings(documents: int, features: int, label_docs: np.ndarray) -> list[str]:
    """One sentence per way in which the training data is small (documents, features, rare labels)."""
    out = []
    if documents < MIN_DOCUMENTS:
        out.append(
            f"only {documents} training documents (fewer than {MIN_DOCUMENTS}): the model will still return k "
            "labels for any text, related or not; measure it on held-out documents before trusting its scores"
        )
    if features < MIN_FEATURES:
        out.append(
            f"TF-IDF kept only {features} features (fewer than {MIN_FEATURES}): a text whose words are not among "
            "them is scored from the rankers' biases alone"
        )
    counts = np.asarray(label_docs)
    rare = int((counts < RARE_LABEL_DOCS).sum())
    if counts.size and rare > MAX_RARE_SHARE * counts.size:
        out.append(
            f"{rare} of {counts.size} labels have fewer than {RARE_LABEL_DOCS} training documents: their rankers "
            "see almost no positives"
        )
    return out
