"""ONNX export: dynamic axes, parity with torch (and refusal beyond tolerance), int8, torch-free serving."""

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import NO_TORCH, add_drift

ROOT = Path(__file__).resolve().parents[3]


def test_bundle_layout_and_dynamic_axes(xr_bundle):
    import onnx
    from xtag.models.features.onnx_encoder import OnnxEncoder

    _, bundle = xr_bundle
    manifest = json.loads((bundle / "manifest.json").read_text())
    assert {
        "encoder/model.onnx",
        "encoder/tokenizer.json",
        "encoder/config.json",
        "shortlist/faiss.index",
        "shortlist/config.json",
    } <= set(manifest["files"])
    assert {"onnxruntime", "tokenizers", "faiss-cpu"} <= set(manifest["versions"])
    graph = onnx.load(str(bundle / "encoder" / "model.onnx")).graph
    for value in [*graph.input, *graph.output]:
        dims = value.type.tensor_type.shape.dim
        assert dims[0].dim_param and dims[1].dim_param, f"{value.name} has a fixed batch or sequence axis"
    config = json.loads((bundle / "encoder" / "config.json").read_text())
    assert config["opset"] == manifest["export"]["opset"] == 18 and config["pooling"] == "mean"
    encoder = OnnxEncoder.load(bundle / "encoder")
    for texts in (["x"], ["a much longer text about shooter weapons arena multiplayer games"] * 3):
        assert encoder.encode(texts).shape == (len(texts), config["dim"])


def test_onnx_matches_torch_on_real_texts(xr_bundle, corpus_files):
    import torch
    from xtag.models.features.onnx_encoder import OnnxEncoder
    from xtag.training.deep.encoder import encode_texts, load_trained

    run, bundle = xr_bundle
    report = json.loads((bundle / "manifest.json").read_text())["export"]["parity"]
    assert report["max_abs_diff"] <= 1e-4 and report["mean_cosine"] > 0.9999
    texts = [json.loads(line)["text"] for line in corpus_files[1].read_text().splitlines()][:50]
    onnx = OnnxEncoder.load(bundle / "encoder")
    encoder, _ = load_trained(run / "model" / "encoder")
    reference = encode_texts(encoder, onnx.tokenizer, texts, 7, torch.device("cpu"))
    assert np.abs(onnx.encode(texts) - reference).max() <= 1e-4
    single = np.vstack([onnx.encode([t]) for t in texts[:5]])  # unpadded single texts = padded batch rows
    assert np.abs(single - reference[:5]).max() <= 1e-4


def test_export_refuses_an_encoder_that_drifts_from_torch(xr_bundle, tmp_path, monkeypatch):
    import xtag.training.onnx.graph as onnx_export
    from xtag.models.errors import XtagError
    from xtag.training.export.export_run import export_run

    run, bundle = xr_bundle

    def drifting_export(module, ids, mask, path, opset, output_names):  # the real graph, plus 0.01 on every output
        add_drift(bundle / "encoder" / "model.onnx", path, "last_hidden_state", 0.01)

    monkeypatch.setattr(onnx_export, "export_graph", drifting_export)
    with pytest.raises(XtagError, match="differs from torch by 0.01"):
        export_run(run, tmp_path / "bundle")
    assert not (tmp_path / "bundle").exists()


TORCH_FREE = (
    NO_TORCH
    + """
try:
    import torch
    raise SystemExit("torch was importable")
except ImportError:
    pass
from xtag.models.bundle.loader import load_bundle
b = load_bundle(sys.argv[1])
print(b.predictor.named(b.predictor.predict(["shooter weapons arena frag multiplayer"], k=1))[0][0][1])
print(sorted(m for m in sys.modules if m.split(".")[0] in ("torch", "transformers")))
"""
)


def test_bundle_serves_with_torch_unimportable(xr_bundle):
    _, bundle = xr_bundle
    result = subprocess.run(
        [sys.executable, "-c", TORCH_FREE, str(bundle)], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == ["game::fps", "[]"]


def test_int8_quantisation_keeps_onnxruntimes_root_warning_and_basic_config_out():
    import logging

    from xtag.training.onnx.optimize import _root_log_quiet

    seen = []
    root = logging.getLogger()
    catcher = logging.Handler()
    catcher.emit = seen.append
    root.addHandler(catcher)
    before = (list(root.handlers), root.level)
    try:
        with _root_log_quiet():
            logging.warning("Please consider pre-processing before quantization.")  # onnxruntime's call
        assert seen == [] and (list(root.handlers), root.level) == before
        logging.warning("after")  # and the root logger works as before once it is done
        assert [r.getMessage() for r in seen] == ["after"]
    finally:
        root.removeHandler(catcher)
