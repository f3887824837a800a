"""Device selection (issue 17): `cpu | cuda[:N]` parsed and checked up front, CUDA never silently served from the
CPU, `/v1/model` and `/metrics` saying where each component runs, and the fused / int8 / fp16 export options.
The CUDA runs themselves are in tests/test_cuda_serving.py (skipped without a GPU)."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from prometheus_client.parser import text_string_to_metric_families
from typer.testing import CliRunner
from xtag.config.settings import Settings
from xtag.models.bundle.loader import load_bundle
from xtag.models.errors import XtagError
from xtag.models.features.device import Device
from xtag.models.features.onnx_encoder import EncoderConfig, OnnxEncoder

from xtag.cli import app

runner = CliRunner()


def test_device_specs_parse_and_bad_ones_are_refused():
    assert str(Device.parse(None)) == "cpu" and str(Device.parse("CUDA")) == "cuda:0"
    assert Device.parse("cuda:2").index == 2 and Device.parse("cuda:1", tensorrt=True).tensorrt
    for bad in ("gpu", "cuda:", "cuda:x", "cpu:1"):
        with pytest.raises(XtagError, match="expected cpu, cuda or cuda:N"):
            Device.parse(bad)
    with pytest.raises(XtagError, match="TensorRT needs a CUDA device"):
        Device.parse("cpu", tensorrt=True)


def test_device_setting_validates_and_switches_the_batch_default(monkeypatch):
    monkeypatch.setenv("XTAG_DEVICE", "cuda:1")
    gpu = Settings(_env_file=None)
    assert gpu.models.device == "cuda:1" and gpu.effective_batch_max_documents == gpu.server.gpu_batch_max_documents
    assert Settings(_env_file=None, batch_max_documents=8).effective_batch_max_documents == 8  # explicit wins
    monkeypatch.delenv("XTAG_DEVICE")
    assert Settings(_env_file=None).effective_batch_max_documents == 64
    with pytest.raises(ValueError, match="expected cpu, cuda or cuda:N"):
        Settings(_env_file=None, device="gpu0")


def _cuda_in_onnxruntime() -> bool:
    import onnxruntime as ort

    return "CUDAExecutionProvider" in ort.get_available_providers()


@pytest.mark.skipif(_cuda_in_onnxruntime(), reason="this onnxruntime has CUDA: the refusal cannot be shown")
def test_cuda_without_a_gpu_build_is_an_error_not_a_cpu_fallback(xr_bundle):
    _, bundle = xr_bundle
    with pytest.raises(XtagError, match="no CUDA provider"):
        load_bundle(bundle, "cuda")


@pytest.mark.skipif(_cuda_in_onnxruntime(), reason="this onnxruntime has CUDA: the fallback cannot be provoked")
@pytest.mark.filterwarnings("ignore:Specified provider")  # the warning is the fallback this test provokes
def test_a_session_onnxruntime_quietly_put_on_the_cpu_is_refused(xr_bundle, monkeypatch):
    """onnxruntime drops a provider it cannot start and runs on the CPU with a warning: that must fail."""
    import onnxruntime as ort

    _, bundle = xr_bundle
    real = ort.get_available_providers()
    monkeypatch.setattr(ort, "get_available_providers", lambda: ["CUDAExecutionProvider", *real])
    with pytest.raises(XtagError, match="refusing to serve from the CPU"):
        OnnxEncoder.load(bundle / "encoder", device="cuda:0")


def test_faiss_without_gpu_support_refuses_cuda(xr_bundle):
    import faiss
    from xtag.models.xlinear.shortlist import FaissShortlist

    if hasattr(faiss, "StandardGpuResources"):
        pytest.skip("faiss has GPU support here")
    _, bundle = xr_bundle
    shortlist = FaissShortlist.load(bundle / "shortlist")
    assert shortlist.to_device("cpu").placement == "cpu"
    with pytest.raises(XtagError, match="no GPU support"):
        shortlist.to_device("cuda")


def test_model_info_and_metrics_say_where_each_component_runs(xr_bundle):
    from fastapi.testclient import TestClient
    from xtag.service.app import create_app

    _, bundle = xr_bundle
    with TestClient(create_app(Settings(_env_file=None, bundle=bundle, load_in_background=False))) as client:
        runtime = client.get("/v1/model").json()["runtime"]
        metrics = client.get("/metrics").text
    assert runtime["device"] == "cpu"
    assert runtime["placement"] == {"text-encoder": "CPUExecutionProvider", "rankers": "cpu", "shortlist": "cpu"}
    served = {
        (sample.labels["component"], sample.labels["provider"])
        for family in text_string_to_metric_families(metrics)
        for sample in family.samples
        if sample.name == "xtag_model_placement" and sample.value == 1
    }
    assert ("text-encoder", "CPUExecutionProvider") in served and ("shortlist", "cpu") in served


def test_export_fuses_the_graph_and_parity_holds_after_fusion(xr_bundle):
    _, bundle = xr_bundle
    config = EncoderConfig.model_validate_json((bundle / "encoder" / "config.json").read_text())
    ops = {n.op_type for n in onnx.load(str(bundle / "encoder" / "model.onnx")).graph.node}
    assert config.optimized and config.precision == "fp32"
    assert {"SkipLayerNormalization", "BiasGelu"} <= ops  # onnxruntime's fused kernels
    report = json.loads((bundle / "manifest.json").read_text())["export"]
    assert report["parity"]["max_abs_diff"] <= report["parity_tolerance"]  # measured on the fused graph


def test_legacy_quantized_flag_reads_as_int8():
    old = EncoderConfig.model_validate({"dim": 8, "quantized": True})
    assert old.precision == "int8" and old.quantized
    assert not EncoderConfig.model_validate({"dim": 8, "precision": "fp16"}).quantized


def test_fp16_export_is_checked_on_cpu_and_serves(xr_bundle, tmp_path):
    run, fp32_bundle = xr_bundle
    out = tmp_path / "fp16"
    result = runner.invoke(app, ["export", str(run), "--out", str(out), "--fp16", "--no-progress"])
    assert result.exit_code == 0, result.output
    report = json.loads((out / "manifest.json").read_text())["export"]["fp16"]
    assert report["checked_on"] == "CPUExecutionProvider" and report["vs_fp32"]["mean_cosine"] > 0.999
    assert 0.5 <= report["top5_agreement_vs_fp32"] <= 1.0
    assert json.loads((out / "encoder" / "config.json").read_text())["precision"] == "fp16"
    assert "fp16: top-5 agreement with the fp32 graph" in result.output
    graph = onnx.load(str(out / "encoder" / "model.onnx")).graph
    assert any(t.data_type == onnx.TensorProto.FLOAT16 for t in graph.initializer)
    texts = ["email smtp imap mailbox", "image editor for photos"]
    half, full = (load_bundle(b).predictor.predict(texts, k=3) for b in (out, fp32_bundle))
    assert np.isfinite(half.scores).all() and (half.labels[:, 0] == full.labels[:, 0]).all()


def test_export_precision_options_are_checked(xr_bundle, tiny_bundle, tmp_path):
    run, _ = xr_bundle
    result = runner.invoke(app, ["export", str(run), "--out", str(tmp_path / "a"), "--quantize", "int4"])
    assert result.exit_code == 2 and "the one quantisation offered is int8" in result.output
    result = runner.invoke(app, ["export", str(run), "--out", str(tmp_path / "b"), "--quantize", "int8", "--fp16"])
    assert result.exit_code == 2 and "exclude each other" in result.output
    xlinear_run = tiny_bundle.parent / "run"
    result = runner.invoke(app, ["export", str(xlinear_run), "--out", str(tmp_path / "c"), "--quantize", "int8"])
    assert result.exit_code == 2 and "--quantize int8: model xlinear does not support int8 weights" in result.output
    result = runner.invoke(
        app, ["export", str(xlinear_run), "--out", str(tmp_path / "d"), "--shortlist-min-nodes", "0"]
    )
    assert result.exit_code == 2 and "--shortlist-min-nodes: model xlinear does not support" in result.output


def test_a_large_batch_reaches_the_encoder_in_length_sorted_batches(xr_bundle):
    """/v1/predict/batch and micro-batches: padding, not text, would dominate a batch of mixed lengths."""
    _, bundle = xr_bundle
    encoder = OnnxEncoder.load(bundle / "encoder", batch_size=2)
    texts = ["mail", "a long text about image editors for photos and drawings", "smtp", "photo editor tool"]
    widths, forward = [], encoder.forward
    encoder.forward = lambda names, ids, mask: widths.append(ids.shape[1]) or forward(names, ids, mask)
    together = encoder.encode(texts)
    assert widths == sorted(widths, reverse=True) and widths[-1] < widths[0]
    alone = np.vstack([encoder.encode([t]) for t in texts])
    assert np.abs(together - alone).max() < 1e-4  # same rows, in the caller's order
