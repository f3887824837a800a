"""`xtag serve` that cannot serve exits (issue 27): a corrupt bundle or an unusable GPU ends the process non-zero
within seconds, with the reason on stderr, so an orchestrator sees a failed start instead of a process that stays
unready forever."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.service.svc_support import free_port

XTAG = Path(sys.executable).with_name("xtag")
DEADLINE_S = 90  # a deadline, not a wait: a start on a loaded 2-core machine takes seconds, not this


def serve(bundle: Path, *flags: str) -> tuple[int, str, float]:
    """Run `xtag serve` to its end: (exit status, stderr, seconds)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("XTAG_", "PROMETHEUS_MULTIPROC_DIR"))}
    start = time.monotonic()
    cmd = [str(XTAG), "serve", str(bundle), "--host", "127.0.0.1", "--port", str(free_port()), *flags]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=DEADLINE_S)
    return done.returncode, done.stderr, time.monotonic() - start


@pytest.fixture
def corrupt_bundle(tiny_bundle, tmp_path) -> Path:
    bundle = tmp_path / "corrupt"
    shutil.copytree(tiny_bundle, bundle)
    (bundle / "labels.json").write_text('{"names": ["x"], "frequencies": [1], "n_train_docs": 1}')
    return bundle


@pytest.mark.parametrize("workers", ["1", "2"])
def test_serve_on_a_corrupt_bundle_exits_non_zero_with_the_reason(corrupt_bundle, workers):
    code, err, seconds = serve(corrupt_bundle, "--workers", workers)
    assert code != 0, err[-2000:]
    assert "not serving" in err and "checksum mismatch for labels.json" in err, err[-2000:]
    assert seconds < 60


def test_serve_with_cuda_but_no_gpu_exits_non_zero(xr_bundle):
    ort = pytest.importorskip("onnxruntime")
    if "CUDAExecutionProvider" in ort.get_available_providers():
        pytest.skip("this machine can run the encoder on CUDA")
    code, err, _ = serve(xr_bundle[1], "--device", "cuda")
    assert code != 0
    assert "not serving" in err and "no CUDA provider" in err, err[-2000:]


def test_a_missing_model_path_is_named_before_anything_binds_or_loads(tiny_bundle, tmp_path):
    """Issue 47 (first hour 3): `--model lamp=bundles/missing` was found only after the server had bound and loaded
    the other model, and the error named neither the model nor the path."""
    missing = tmp_path / "missing"
    code, err, _ = serve(tiny_bundle, "--model", f"lamp={missing}")
    assert code == 2, err[-2000:]
    assert err.strip().splitlines() == [f"error: model lamp: {missing}: no such bundle directory"]


def test_serve_on_a_training_run_suggests_an_export_that_works(tiny_bundle, tmp_path, monkeypatch):
    """`xtag serve runs/debtags-xl` suggested `xtag export debtags-xl ...` (the path cut to its name), which failed:
    the suggestion keeps the path as typed, and running it gives a bundle."""
    from typer.testing import CliRunner

    from xtag.cli import app

    shutil.copytree(tiny_bundle.parent / "run", tmp_path / "runs" / "debtags-xl")  # the fixture's training run
    monkeypatch.chdir(tmp_path)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("XTAG_", "PROMETHEUS_MULTIPROC_DIR"))}
    cmd = [str(XTAG), "serve", "runs/debtags-xl", "--host", "127.0.0.1", "--port", str(free_port())]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=DEADLINE_S, cwd=tmp_path)
    assert done.returncode != 0, done.stderr[-2000:]
    suggested = "xtag export runs/debtags-xl --out bundles/debtags-xl"
    assert f"`{suggested}`" in done.stderr, done.stderr[-2000:]
    result = CliRunner().invoke(app, suggested.split()[1:])
    assert result.exit_code == 0, result.output
    assert (tmp_path / "bundles" / "debtags-xl" / "manifest.json").is_file()


def test_serve_prints_the_dashboard_and_docs_urls_once_ready(tiny_bundle):
    """main.sh ends in `xtag serve`, which never said where the dashboard was: once the model has loaded it logs
    one `ready:` line with the dashboard's and the API docs' URLs, and both answer."""
    import urllib.request

    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("XTAG_", "PROMETHEUS_MULTIPROC_DIR"))}
    cmd = [str(XTAG), "serve", str(tiny_bundle), "--host", "127.0.0.1", "--port", str(port)]
    server = subprocess.Popen(cmd, env=env, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + DEADLINE_S
        line = ""
        while "ready:" not in line and time.monotonic() < deadline and server.poll() is None:
            line = server.stderr.readline()
        base = f"http://127.0.0.1:{port}"
        assert f"dashboard {base}/ " in line and f"API docs {base}/docs" in line, line
        for url in (f"{base}/", f"{base}/docs"):
            with urllib.request.urlopen(url, timeout=10) as answer:
                assert answer.status == 200 and b"<html" in answer.read().lower()
    finally:
        server.terminate()
        server.wait(timeout=30)
