"""The server's log (issue 27): a line per bundle load and reload read from a real server, JSON lines with their
fields, an optional access log, and a word when --device cuda has nothing to place on a GPU."""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx

from tests.service.svc_support import STARTUP_S, bundles, free_port, make_client, wait_ready  # noqa: F401  (fixtures)

XTAG = Path(sys.executable).with_name("xtag")


def json_lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def wait_for_line(path: Path, predicate, timeout: float = STARTUP_S) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = [x for x in json_lines(path) if predicate(x)]
        if found:
            return found[0]
        time.sleep(0.1)
    raise AssertionError(path.read_text()[-3000:])


def test_a_real_server_logs_load_reload_and_access_as_json_lines(bundles, tmp_path):
    from xtag.models.bundle.loader import load_bundle

    va, vb = load_bundle(bundles["a"]).version, load_bundle(bundles["b"]).version
    link = tmp_path / "current"
    link.symlink_to(bundles["a"])
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("XTAG_", "PROMETHEUS_MULTIPROC_DIR"))}
    env.update(XTAG_LOG_FORMAT="json", XTAG_ACCESS_LOG="true")
    log = tmp_path / "serve.log"
    cmd = [str(XTAG), "serve", str(link), "--host", "127.0.0.1", "--port", str(port)]
    proc = subprocess.Popen(cmd, env=env, cwd=tmp_path, stderr=log.open("w"))
    try:
        url = f"http://127.0.0.1:{port}"
        wait_ready(url)
        assert httpx.post(url + "/v1/predict", json={"text": "python script"}).status_code == 200
        link.unlink()
        link.symlink_to(bundles["b"])
        proc.send_signal(signal.SIGHUP)
        reload = wait_for_line(log, lambda x: x.get("event") == "bundle_reloaded")
        lines = json_lines(log)  # every line is JSON, uvicorn's own included
    finally:
        proc.terminate()
        proc.wait(30)
    loaded = next(x for x in lines if x.get("event") == "bundle_loaded")
    assert loaded["version"] == va and loaded["bundle"] == "tiny-a" and loaded["seconds"] > 0 and loaded["rss_mb"] > 0
    assert reload["previous"] == f"tiny-a {va}" and reload["version"] == vb and reload["rss_mb"] > 0
    assert f"{va} → tiny-b {vb}" in reload["message"] and reload["level"] == "info"
    access = [x for x in lines if x["logger"] == "xtag.access" and x["path"] == "/v1/predict" and x["status"] == 200]
    assert len(access) == 1 and access[0]["method"] == "POST" and access[0]["ms"] > 0
    uvicorn = [x for x in lines if x["logger"].startswith("uvicorn")]
    assert uvicorn and all(x["logger"] == "uvicorn" for x in uvicorn)  # not "uvicorn.error" on INFO lines
    assert any("Uvicorn running" in x["message"] and x["level"] == "info" for x in uvicorn)


def test_the_access_log_is_off_unless_asked_for(make_client, caplog):
    for access, expected in ((False, 0), (True, 2)):
        c = make_client(access_log=access)
        caplog.clear()
        with caplog.at_level(logging.INFO, logger="xtag.access"):
            c.post("/v1/predict", json={"text": "python script"})
            c.get("/v1/projects/nothing-like-this")
        lines = [r for r in caplog.records if r.name == "xtag.access"]
        assert len(lines) == expected
    assert [(r.endpoint, r.status) for r in lines] == [("/v1/predict", 200), ("/v1/projects/{project_id}", 404)]


def test_cuda_with_a_bundle_that_has_nothing_for_the_gpu_says_so(make_client, caplog):
    with caplog.at_level(logging.WARNING, logger="xtag.service"):
        c = make_client(device="cuda")
    assert c.get("/ready").status_code == 200
    said = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any("nothing to place on a GPU" in m and "xlinear" in m for m in said), said
