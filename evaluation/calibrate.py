"""Fit a bundle's score calibration on a validation corpus and store it in the bundle (calibration.json).

Why a separate step on the bundle rather than a training option: calibration needs documents the
model has not seen, and it is a property of the exported model as served (post-processor, beam,
FAISS shortlist); fitting it on the bundle measures exactly the scores clients receive. The file is
added to the manifest's checksums (models/manifest.write_manifest), so an edited calibration is
refused like any other modified file, and the bundle's version changes when it is (re)calibrated.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from xtag.corpus.files import Corpus
from xtag.models.bundle.loader import Bundle, load_bundle
from xtag.models.bundle.manifest import write_manifest
from xtag.models.errors import XtagError
from xtag.models.inference.calibration import (
    CALIBRATION_FILE,
    Calibration,
    expected_calibration_error,
    fit_isotonic,
    scored_pairs,
)
from xtag.models.inference.reweighting import candidate_budget
from xtag.models.metrics import relevance
from xtag.models.tagging.batches import predict_corpus

# Fit on the candidates macro-aware inference sees (reweighting's widened shortlist for k ≤ 10).
CALIBRATION_K = 10
_MANIFEST_CORE = {
    "format",
    "format_version",
    "name",
    "model_kind",
    "created",
    "label_count",
    "components",
    "versions",
    "files",
}


def candidate_pairs(
    bundle: Bundle, corpus: Corpus, beam_size: int | None = None, progress: bool = False, calibrated: bool = False
) -> tuple[np.ndarray, np.ndarray, int]:
    """(score, relevant) over each document's widened candidate list; also the list length used."""
    p = bundle.predictor
    beam = beam_size or p.model.config.beam_size
    k_cand, wide = candidate_budget(CALIBRATION_K, beam, p.n_labels)
    Y, _ = corpus.label_matrix(p.vocab)
    preds = predict_corpus(bundle, corpus.texts, k_cand, wide, progress, calibrated=calibrated)
    s, r = scored_pairs(preds.labels, preds.scores, relevance(preds.labels, Y))
    return s, r, k_cand


def fit_bundle_calibration(
    bundle: Bundle, corpus: Corpus, beam_size: int | None = None, progress: bool = False
) -> Calibration:
    """Isotonic calibration of the bundle's raw scores on `corpus` (a validation split, never test)."""
    if len(corpus) == 0:
        raise XtagError("the calibration corpus is empty")
    s, r, k_cand = candidate_pairs(bundle, corpus, beam_size, progress)
    if r.sum() == 0 or r.all():
        raise XtagError("calibration needs both relevant and irrelevant candidates in the validation corpus")
    info = {
        "corpus": corpus.source,
        "documents": len(corpus),
        "pairs": int(s.size),
        "candidates_per_doc": k_cand,
        "positive_rate": float(r.mean()),
        "ece_bins": 15,
        "ece_before_fit": expected_calibration_error(s, r),
    }
    cal = fit_isotonic(s, r, info)
    cal.fitted_on["ece_after_fit"] = expected_calibration_error(cal.apply(s), r)
    return cal


def write_calibration(folder: Path, calibration: Calibration | None) -> dict:
    """Store (or, with None, remove) calibration.json and rewrite the manifest, keeping its other entries."""
    manifest = json.loads((folder / "manifest.json").read_text())
    target = folder / CALIBRATION_FILE
    if calibration is None:
        target.unlink(missing_ok=True)
    else:
        tmp = target.with_suffix(".json.tmp")
        calibration.save(tmp)
        tmp.replace(target)
    extra = {k: v for k, v in manifest.items() if k not in _MANIFEST_CORE and k != "calibration"}
    if calibration is not None:
        extra["calibration"] = {"file": CALIBRATION_FILE, "method": calibration.method, **calibration.fitted_on}
    new = write_manifest(folder, manifest["model_kind"], manifest["name"], extra)
    load_bundle(folder)  # the bundle must still verify and load
    return new
