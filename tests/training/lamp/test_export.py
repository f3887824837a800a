"""LaMP's int8 re-ranker: exported only when it ranks as the fp32 graph does (the parity gate's int8 part)."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
from xtag.models.bundle.loader import load_bundle
from xtag.models.errors import XtagError
from xtag.training.export.export_run import export_run
from xtag.training.lamp.export import onnx_outputs
from xtag.training.onnx.optimize import set_precision

TEXTS = ["shooter weapons arena frag multiplayer", "python module pip interpreter script", "email smtp imap server"]


def test_int8_reranker_is_exported_with_its_agreement_and_serves(lamp_bundle, tmp_path):
    run, fp32 = lamp_bundle
    bundle = tmp_path / "int8"
    export_run(run, bundle, precision="int8")
    report = json.loads((bundle / "manifest.json").read_text())["export"]["int8"]
    assert report["top5_agreement_vs_fp32"] >= 0.95
    assert json.loads((bundle / "lamp" / "config.json").read_text())["precision"] == "int8"
    got = load_bundle(bundle).predictor.predict(TEXTS, k=3)
    want = load_bundle(fp32).predictor.predict(TEXTS, k=3)
    assert got.labels.shape == want.labels.shape and np.isfinite(got.scores).all()


def test_a_quantized_graph_that_ranks_otherwise_is_refused(lamp_bundle, tmp_path):
    """The gate reads the reduced graph's outputs: one whose ranking left fp32's (here its logits reversed, as a
    broken quantisation would give) is refused (export_run then publishes nothing); one that ranks as fp32 passes."""
    folder = tmp_path / "lamp"
    shutil.copytree(lamp_bundle[1] / "lamp", folder)
    model = load_bundle(lamp_bundle[1]).predictor.model
    cand = model.candidates(TEXTS, 5, None)
    fp32 = onnx_outputs(model.reranker, TEXTS, cand.labels, cand.scores)

    def top5(outputs):
        logits = np.where(cand.labels >= 0, outputs["logits"], -np.inf)
        return np.take_along_axis(cand.labels, np.argsort(-logits, axis=1, kind="stable")[:, :5], 1)

    def reversed_ranking():
        return {**fp32, "logits": -fp32["logits"]}

    with pytest.raises(XtagError, match="refusing to export"):
        set_precision(folder, "int8", reversed_ranking, fp32, fp32, top5, min_top5=0.95)
    shutil.copytree(lamp_bundle[1] / "lamp", tmp_path / "again")
    report = set_precision(tmp_path / "again", "int8", lambda: fp32, fp32, fp32, top5, min_top5=0.95)
    assert report["top5_agreement_vs_fp32"] == 1.0
