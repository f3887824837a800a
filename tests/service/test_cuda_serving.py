"""Serving on a GPU (issue 17): the ONNX encoder on onnxruntime's CUDA provider and the FAISS shortlist on faiss-gpu
give what the CPU gives. They skip unless onnxruntime-gpu sees a CUDA device (the `gpu` extra on the lent GPU
machine: `python -m pytest tests/test_cuda_serving.py`); the CPU side of device selection is in test_device.py."""

from __future__ import annotations

import json

import numpy as np
import pytest

ort = pytest.importorskip("onnxruntime")
pytestmark = pytest.mark.skipif(
    "CUDAExecutionProvider" not in ort.get_available_providers(), reason="needs onnxruntime-gpu and a CUDA device"
)

TEXTS = ["email smtp imap mailbox", "image editor for photos", "a command line tool to convert images"] * 20


def test_encoder_on_cuda_matches_the_cpu_and_says_so(xr_bundle):
    from xtag.models.features.onnx_encoder import OnnxEncoder

    _, bundle = xr_bundle
    gpu, cpu = OnnxEncoder.load(bundle / "encoder", device="cuda"), OnnxEncoder.load(bundle / "encoder")
    assert gpu.provider == "CUDAExecutionProvider" and gpu.batch_size > cpu.batch_size
    a, b = gpu.encode(TEXTS), cpu.encode(TEXTS)
    assert np.abs(a - b).max() < 1e-3


def test_bundle_on_cuda_tags_like_the_cpu_with_its_shortlist_on_the_gpu(xr_bundle):
    if not hasattr(pytest.importorskip("faiss"), "StandardGpuResources"):
        pytest.skip("needs faiss-gpu")
    from xtag.models.bundle.loader import load_bundle

    _, bundle = xr_bundle
    gpu, cpu = load_bundle(bundle, "cuda:0"), load_bundle(bundle)
    assert gpu.runtime["placement"]["text-encoder"] == "CUDAExecutionProvider"
    assert gpu.runtime["placement"]["shortlist"].startswith("faiss-gpu:0")
    assert gpu.runtime["placement"]["rankers"] == "cpu"
    a, b = gpu.predictor.predict(TEXTS, k=5), cpu.predictor.predict(TEXTS, k=5)
    assert (a.labels[:, 0] == b.labels[:, 0]).all() and np.allclose(a.scores, b.scores, atol=1e-3)


def test_fp16_bundle_on_cuda_keeps_parity_with_fp32(xr_bundle, tmp_path):
    from xtag.models.bundle.loader import load_bundle
    from xtag.training.export.export_run import export_run

    run, fp32 = xr_bundle
    export_run(run, tmp_path / "fp16", precision="fp16")
    assert json.loads((tmp_path / "fp16" / "encoder" / "config.json").read_text())["precision"] == "fp16"
    half, full = load_bundle(tmp_path / "fp16", "cuda"), load_bundle(fp32, "cuda")
    ea = half.predictor.featurizer.encoder.encode(TEXTS)
    eb = full.predictor.featurizer.encoder.encode(TEXTS)
    cos = (ea * eb).sum(1) / (np.linalg.norm(ea, axis=1) * np.linalg.norm(eb, axis=1))
    assert cos.min() > 0.999


def test_service_reports_the_cuda_provider(xr_bundle):
    from fastapi.testclient import TestClient
    from xtag.config.settings import Settings
    from xtag.service.app import create_app

    _, bundle = xr_bundle
    settings = Settings(_env_file=None, bundle=bundle, device="cuda", load_in_background=False)
    with TestClient(create_app(settings)) as client:
        runtime = client.get("/v1/model").json()["runtime"]
        assert client.post("/v1/predict", json={"text": TEXTS[0], "k": 3}).status_code == 200
        assert 'provider="CUDAExecutionProvider"' in client.get("/metrics").text
    assert runtime["device"] == "cuda:0"
