"""The TF-IDF rows of a run's training corpus, kept in the run so `xtag update` does not featurise it again.

An update keeps the run's featuriser as fitted, so an old row whose text did not change has the features
the run computed for it; featurising every document again was the largest fixed part of an update (2.9 s
of 17.8 s on debdeps). A run writes `checkpoints/tfidf_rows.npz` (CSR, float32, one row per corpus row)
when it finishes; an update uses it only when the run's corpus.json (the fingerprint of the rows it was
trained on) is that of its training corpus as read now and the matrix has one row per row, of the
featuriser's width, and featurises only the rows that are new or whose text changed. Otherwise it
featurises everything and its log says why.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import scipy.sparse as sp
from xtag.corpus.files import Corpus
from xtag.models.features.tfidf import TfidfFeaturizer
from xtag.models.files.atomic import write_atomic

FILE = "tfidf_rows.npz"  # under a run's checkpoints/


def save_rows(checkpoints: Path, X: sp.csr_matrix) -> None:
    """The corpus's TF-IDF rows, uncompressed (a later update reads them in a fraction of a second)."""
    checkpoints.mkdir(parents=True, exist_ok=True)
    X = sp.csr_matrix(X, dtype=np.float32)
    write_atomic(checkpoints / FILE, lambda fh: sp.save_npz(fh, X, compressed=False))


def load_rows(run: Path, n_rows: int, dim: int) -> tuple[sp.csr_matrix | None, str]:
    """The run's kept rows if they have this shape, else None and why (the caller has checked the fingerprint)."""
    path = run / "checkpoints" / FILE
    if not path.is_file():
        return None, f"{path} missing (a run from before kept TF-IDF rows)"
    try:
        X = sp.load_npz(path).tocsr()
    except (OSError, ValueError) as exc:  # a damaged file costs the featurising time, not the update
        return None, f"{path}: unreadable: {exc}"
    if X.shape != (n_rows, dim):
        return None, f"{path}: {X.shape[0]} × {X.shape[1]} rows for {n_rows} rows of width {dim}"
    return X, str(path)


def same_texts(old: Corpus, merged: Corpus) -> np.ndarray:
    """Per row of the run's corpus `old`: whether its row in `merged` (merge_corpora: same position) has the same
    text, so that what the run kept of it (TF-IDF rows, XR-Transformer's embeddings) still holds."""
    return np.array([a == b for a, b in zip(merged.texts, old.texts)], dtype=bool)


def combined_rows(
    featurizer: TfidfFeaturizer, merged: Corpus, same_text: np.ndarray, kept: sp.csr_matrix | None
) -> tuple[sp.csr_matrix, int]:
    """TF-IDF of `merged` (the run's rows first, in order; `same_text`: same_texts): kept
    rows where the text is the run's, the rest featurised; returns it and how many rows were featurised."""
    if kept is None:
        return featurizer.transform(merged.texts), len(merged)
    n_old = len(same_text)
    todo = [*np.flatnonzero(~same_text).tolist(), *range(n_old, len(merged))]
    fresh = featurizer.transform([merged.texts[i] for i in todo]) if todo else sp.csr_matrix((0, kept.shape[1]))
    pick = np.arange(len(merged))
    pick[todo] = n_old + np.arange(len(todo))
    return sp.vstack([kept, fresh], format="csr")[pick], len(todo)
