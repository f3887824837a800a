"""`xtag serve` with several workers: every worker serves, /metrics aggregates them, SIGHUP rolls them safely."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
from prometheus_client.parser import text_string_to_metric_families

from tests.service.svc_support import ADMIN, ADMIN_KEY, STARTUP_S, bundles, free_port  # noqa: F401  (pytest fixtures)

XTAG = Path(sys.executable).with_name("xtag")


def model_info(url: str) -> dict[str, str]:
    """pid → model version, from the aggregated xtag_model_info series that are 1."""
    out = {}
    for family in text_string_to_metric_families(httpx.get(url + "/metrics", timeout=5).text):
        for s in family.samples:
            if s.name == "xtag_model_info" and s.value == 1:
                out[s.labels["pid"]] = s.labels["version"]
    return out


def wait_for(predicate, timeout: float = STARTUP_S) -> bool:
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            if predicate():
                return True
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    return False


def test_multi_worker_serve_and_rolling_sighup(bundles, tmp_path):
    from xtag.models.bundle.loader import load_bundle

    va, vb = load_bundle(bundles["a"]).version, load_bundle(bundles["b"]).version
    link = tmp_path / "current"
    link.symlink_to(bundles["a"])
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("XTAG_", "PROMETHEUS_MULTIPROC_DIR"))}
    env["XTAG_LOG_LEVEL"] = "warning"
    env["XTAG_ADMIN_KEY"] = ADMIN_KEY
    log = tmp_path / "serve.log"
    proc = subprocess.Popen(
        [str(XTAG), "serve", str(link), "--host", "127.0.0.1", "--port", str(port), "--workers", "2"],
        env=env,
        cwd=tmp_path,
        stderr=log.open("w"),
    )
    try:
        assert wait_for(lambda: len(model_info(url)) == 2), log.read_text()[-3000:]
        assert set(model_info(url).values()) == {va}
        for _ in range(20):
            assert httpx.post(url + "/v1/predict", json={"text": "python script"}).status_code == 200
        total = sum(
            s.value
            for f in text_string_to_metric_families(httpx.get(url + "/metrics").text)
            for s in f.samples
            if s.name == "xtag_predicted_documents_total"
        )
        assert total == 20  # counted across both workers

        # a bundle switch by path needs a single worker
        r = httpx.post(url + "/v1/admin/reload", json={"bundle": str(bundles["b"])}, headers=ADMIN)
        assert r.status_code == 409 and r.headers["content-type"] == "application/problem+json"

        # SIGHUP with a broken bundle behind the path: the rolling restart is refused, old workers serve on
        link.unlink()
        link.symlink_to(bundles["broken"])
        before = model_info(url)
        proc.send_signal(signal.SIGHUP)
        assert wait_for(lambda: "aborting the restart" in log.read_text()), log.read_text()[-3000:]
        assert "checksum mismatch" in log.read_text()
        assert proc.poll() is None
        assert model_info(url) == before
        assert httpx.post(url + "/v1/predict", json={"text": "python script"}).json()["model"]["version"] == va

        # SIGHUP with a good bundle: every worker is replaced by one serving it
        link.unlink()
        link.symlink_to(bundles["b"])
        proc.send_signal(signal.SIGHUP)
        assert wait_for(lambda: set(model_info(url).values()) == {vb} and len(model_info(url)) == 2), log.read_text()[
            -3000:
        ]
        assert not set(model_info(url)) & set(before), "workers were not replaced"
        assert httpx.post(url + "/v1/predict", json={"text": "python script"}).json()["model"]["version"] == vb
    finally:
        proc.terminate()
        proc.wait(20)
