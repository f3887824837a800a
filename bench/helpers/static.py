"""The static encoder benchmarks' corpus subset (from static_debtags.py)."""

from __future__ import annotations

import numpy as np
from xtag.corpus.files import Corpus


def subset(corpus: Corpus, mask: np.ndarray) -> Corpus:
    pick = np.flatnonzero(mask)
    return Corpus([corpus.ids[i] for i in pick], [corpus.texts[i] for i in pick], [corpus.labels[i] for i in pick])
