"""The C a LaMP bundle serves, chosen at export on the run's own held-out texts (lamp.val_fraction), never on TEST.

The re-ranker's graph takes any C up to the trained one and its cost grows with C; fewer candidates keep the head
and lose tail labels. So the choice is a rule on validation alone (bench/lamp_candidates.py applies the same one):
the smallest C of the grid whose P@1 and PSP@5 stay within the tolerances of the trained C's. The held-out texts
are the ones training kept out (the same rows: training/lamp/selection.py); a run that held none out serves its
trained C.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from xtag.corpus.files import Corpus, load_corpus
from xtag.models.errors import XtagError
from xtag.models.lamp.model import LampModel, LampReranker
from xtag.models.metrics import evaluate
from xtag.models.propensity import jain_propensities
from xtag.training.config import TrainConfig

BATCH = 256  # texts per re-ranker call while scoring


def choose(val: dict[int, dict], full: int, p1_tol: float, psp_tol: float) -> int:
    """The smallest C whose validation P@1 and PSP@5 stay within the tolerances of the trained C (`full`)'s."""
    ok = [
        C
        for C, row in val.items()
        if row["P@1"] >= val[full]["P@1"] - p1_tol and row["PSP@5"] >= val[full]["PSP@5"] - psp_tol
    ]
    return min(ok)


def held_out(config: TrainConfig) -> tuple[Corpus | None, str]:
    """The run's held-out texts, read again from its corpus (the rows training kept out), or None and why not."""
    from xtag.training.lamp.selection import held_out_rows  # torch: export of a LaMP run has it

    lc = config.lamp
    if lc.val_fraction <= 0:
        return None, "the run held no texts out (lamp.val_fraction=0)"
    try:
        corpus = load_corpus(config.corpus, config.format, skip_bad=config.skip_bad_rows)
    except (OSError, XtagError) as exc:
        return None, f"its corpus cannot be read again ({exc})"
    rows = held_out_rows(len(corpus.texts), lc.val_fraction, lc.seed)
    if not len(rows):
        return None, "no text was held out"
    pick = [int(i) for i in rows]
    subset = Corpus(
        ids=[corpus.ids[i] for i in pick],
        texts=[corpus.texts[i] for i in pick],
        labels=[corpus.labels[i] for i in pick],
        source=corpus.source,
    )
    return subset, f"{len(pick):,} held-out texts (lamp.val_fraction={lc.val_fraction})"


def scored(model: LampModel, corpus: Corpus, Y, propensity: np.ndarray, C: int) -> dict:
    """P@1 and PSP@5 (points) of the re-ranked top 5 when the re-ranker scores the first stage's top-C."""
    model.reranker.config.candidates = C
    labels = np.concatenate(
        [model.predict(corpus.texts[lo : lo + BATCH], k=5).labels for lo in range(0, len(corpus.texts), BATCH)]
    )
    ranked = evaluate(labels, Y, (1, 5), propensity)
    return {m: round(float(ranked[m]), 2) for m in ("P@1", "PSP@5")}  # in points, as every report


def serving_candidates(config: TrainConfig, first, lamp_dir: Path) -> tuple[int | None, str]:
    """(the C to serve, why): lamp.export.candidates when given; else the validation choice; None keeps the
    trained C."""
    ex = config.lamp.export
    if ex.candidates is not None:
        return ex.candidates, f"C={ex.candidates} as given (--candidates)"
    reranker = LampReranker.load(lamp_dir)
    trained = reranker.config.candidates
    corpus, what = held_out(config)
    if corpus is None:
        return None, f"C={trained} as trained: {what}"
    vocab = first.predictor.vocab
    Y, _ = corpus.label_matrix(vocab)
    propensity = jain_propensities(vocab.frequency_array, max(vocab.n_train_docs, 2))
    model = LampModel(first.predictor, reranker)
    grid = sorted({c for c in ex.candidate_grid if 2 <= c < trained} | {trained})
    rows = {C: scored(model, corpus, Y, propensity, C) for C in grid}
    chosen = choose(rows, trained, ex.p1_tolerance, ex.psp_tolerance)
    at = ", ".join(f"C={C} {r['P@1']:.2f}/{r['PSP@5']:.2f}" for C, r in rows.items())
    return chosen, (
        f"C={chosen} chosen on {what}: the smallest within {ex.p1_tolerance} P@1 and {ex.psp_tolerance} PSP@5 "
        f"points of C={trained} (P@1/PSP@5: {at})"
    )
