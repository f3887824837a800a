"""The GPU training paths (AMP autocast, NCCL under torchrun) on the fixture corpus and the tiny BERT.

CI has no GPU, so these skip there; they run wherever torch sees a CUDA device (the lent GPU machine:
`python -m pytest tests/training/deep/test_cuda.py`). The CPU versions of the same behaviours are in the other tests.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import torchrun_launcher, train_command

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")

ROOT = Path(__file__).resolve().parents[3]


def no_faiss_export():
    """An export config without a FAISS index: these tests are about training, and the GPU image lacks faiss."""
    from xtag.models.xlinear.shortlist import ShortlistConfig
    from xtag.training.xr_transformer.config import XRExportConfig

    return XRExportConfig(shortlist_config=ShortlistConfig(min_nodes=1 << 30))


def events_of(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "train_log.jsonl").read_text().splitlines()]


def test_amp_is_bf16_or_scaled_fp16_on_cuda_and_off_on_cpu():
    from xtag.training.deep.optim import Amp

    gpu, cpu = Amp(True, torch.device("cuda")), Amp(True, torch.device("cpu"))
    assert gpu.enabled and not cpu.enabled
    assert gpu.dtype in (torch.bfloat16, torch.float16)
    assert gpu.scaler.is_enabled() == (gpu.dtype == torch.float16)
    with gpu.autocast():
        out = torch.nn.Linear(8, 8).cuda()(torch.randn(4, 8, device="cuda"))
    assert out.dtype == gpu.dtype


def test_xr_transformer_fine_tunes_on_cuda_with_amp_and_exports_a_cpu_bundle(
    corpus_files, tiny_bert, xr_config, tmp_path
):
    from xtag.corpus.files import load_corpus
    from xtag.evaluation.evaluate import evaluate_bundle
    from xtag.models.bundle.loader import load_bundle

    from tests.conftest import train_and_export

    config = xr_config(corpus_files[0], tiny_bert, device="cuda", amp=True, epochs=2, export=no_faiss_export())
    run, bundle = train_and_export(config, tmp_path)
    events = events_of(run)
    assert next(e for e in events if e["event"] == "encoder")["device"].startswith("cuda")
    steps = [e for e in events if e["event"] == "step"]
    assert steps and all(np.isfinite(e["loss"]) for e in steps)
    # The export's parity check (torch on CPU vs onnxruntime) passed inside export_run; the bundle tags well.
    metrics, _ = evaluate_bundle(load_bundle(bundle), load_corpus(corpus_files[1]), progress=False)
    assert metrics["P@1"] >= 90.0, metrics  # TF-IDF alone reaches this; the encoder is judged below


def test_cuda_fine_tuning_is_what_makes_the_embedding_tag(corpus_files, tiny_bert, tmp_path):
    """As the CPU test: rankers on the [CLS] vector alone, frozen vs fine-tuned on CUDA with AMP."""
    from test_xr_transformer import dense_only_p_at_1

    frozen = dense_only_p_at_1(
        corpus_files, tiny_bert, tmp_path / "frozen", epochs=0, device="cpu", export=no_faiss_export()
    )
    tuned = dense_only_p_at_1(
        corpus_files,
        tiny_bert,
        tmp_path / "tuned",
        epochs=2,
        lr_encoder=2e-3,
        device="cuda",
        amp=True,
        export=no_faiss_export(),
    )
    assert frozen < 30 and tuned > frozen + 15, (frozen, tuned)


def test_lightxml_learns_on_cuda_with_amp(corpus_files, tiny_bert, lightxml_config, tmp_path):
    from xtag.corpus.files import load_corpus
    from xtag.evaluation.evaluate import evaluate_bundle
    from xtag.models.bundle.loader import load_bundle

    from tests.conftest import train_and_export

    run, bundle = train_and_export(lightxml_config(corpus_files[0], tiny_bert, device="cuda", amp=True), tmp_path)
    b = load_bundle(bundle)
    test = load_corpus(corpus_files[1])
    Y, _ = test.label_matrix(b.predictor.vocab)
    chance = 100 * float(np.mean(np.diff(Y.indptr))) / Y.shape[1]
    metrics, _ = evaluate_bundle(b, test, progress=False)
    assert metrics["P@1"] > 2 * chance, (metrics["P@1"], chance)
    assert all(np.isfinite(e["loss"]) for e in events_of(run) if e["event"] == "step")


@pytest.mark.skipif(
    shutil.which("torchrun", path=str(Path(sys.executable).parent)) is None and shutil.which("torchrun") is None,
    reason="torchrun not installed",
)
def test_torchrun_on_cuda_uses_nccl(corpus_files, tiny_bert, xr_config, tmp_path):
    """Every visible GPU as one process (one GPU: a world of 1, which still goes through torchrun's env)."""
    gpus = torch.cuda.device_count()
    config = xr_config(
        corpus_files[0], tiny_bert, device="cuda", epochs=1, max_steps=3, batch_size=8, export=no_faiss_export()
    )
    (tmp_path / "config.json").write_text(config.model_dump_json())
    result = subprocess.run(
        train_command(tmp_path / "config.json", tmp_path / "run", torchrun_launcher(gpus)),
        cwd=ROOT,
        env={**os.environ},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    encoder = next(e for e in events_of(tmp_path / "run") if e["event"] == "encoder")
    assert encoder["world_size"] == gpus and encoder["device"].startswith("cuda")
    assert (tmp_path / "run" / "model" / "encoder" / "model.safetensors").is_file()
