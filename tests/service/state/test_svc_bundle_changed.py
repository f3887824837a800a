"""A bundle file changed in place under a running server (issue 47): `truncate -s 128` of a mapped engine array
killed the process with SIGBUS (exit 135, no log line), and a truncated shadow killed its primary with it. The server
serves a private read-only copy (models/bundle/snapshot.py): it keeps answering, and the changed model's readiness
fails with the file's name until it is reloaded."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import httpx

from tests.service.svc_support import ADMIN, ADMIN_KEY, STARTUP_S, bundles, free_port, make_client, synthetic_bundle  # noqa: F401

XTAG = Path(sys.executable).with_name("xtag")


def largest_engine_file(bundle: Path) -> Path:
    return max((bundle / "rankers" / "engine").glob("*.npy"), key=lambda p: p.stat().st_size)


def test_a_truncated_served_bundle_and_shadow_never_kill_the_server(bundles, tmp_path):
    c = synthetic_bundle(tmp_path, "c", labels=600, features=6000, density=0.05)  # engine arrays of MBs: many pages
    target = largest_engine_file(c)
    assert target.stat().st_size > 1 << 20
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("XTAG_", "PROMETHEUS_MULTIPROC_DIR"))}
    env.update(XTAG_LOG_LEVEL="warning", XTAG_SNAPSHOT_DIR=str(tmp_path / "copies"))
    log = tmp_path / "serve.log"
    proc = subprocess.Popen(
        [str(XTAG), "serve", str(bundles["a"]), "--model", f"c={c}", "--shadow", "c=tiny-a"]
        + ["--host", "127.0.0.1", "--port", str(port)],
        env=env,
        cwd=tmp_path,
        stderr=log.open("w"),
    )
    try:
        deadline = time.time() + STARTUP_S
        while time.time() < deadline:
            try:
                if httpx.get(url + "/v1/models/c/ready", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert proc.poll() is None, log.read_text()[-3000:]
            time.sleep(0.1)
        copies = list((tmp_path / "copies").glob(f"*/c-*/rankers/engine/{target.name}"))
        assert len(copies) == 1 and copies[0].stat().st_mode & 0o777 == 0o400  # private and read-only

        os.truncate(target, 128)  # truncate -s 128 rankers/engine/<largest>.npy
        text = " ".join(f"w{j}" for j in range(0, 6000, 7))
        for _ in range(5):  # c directly, and as tiny-a's shadow (scored on its own thread after each answer)
            assert httpx.post(url + "/v1/models/c/predict", json={"text": text}, timeout=30).status_code == 200
            assert httpx.post(url + "/v1/predict", json={"text": "python script"}, timeout=30).status_code == 200
        deadline = time.time() + 30
        while httpx.get(url + "/v1/shadow", timeout=5).json()["pairs"][0]["documents"] < 5 and time.time() < deadline:
            time.sleep(0.1)
        assert httpx.get(url + "/v1/shadow", timeout=5).json()["pairs"][0]["documents"] == 5
        assert proc.poll() is None, log.read_text()[-3000:]

        r = httpx.get(url + "/v1/models/c/ready", timeout=5)
        assert r.status_code == 503
        assert f"bundle file rankers/engine/{target.name} changed on disk since load: reload it" in r.json()["detail"]
        assert httpx.get(url + "/ready", timeout=5).status_code == 200  # tiny-a's readiness is its own
        states = {
            m["name"]: (m["state"], m["error"]) for m in httpx.get(url + "/v1/models", timeout=5).json()["models"]
        }
        assert states["tiny-a"] == ("ready", None) and states["c"][0] == "failed" and target.name in states["c"][1]
        assert log.read_text().count(f"{target.name} changed on disk since load") == 1  # logged once, not per poll
    finally:
        proc.terminate()
        proc.wait(20)
    assert proc.returncode == 0, log.read_text()[-3000:]
    assert not (tmp_path / "copies" / str(proc.pid)).exists()  # its copies go with it


def test_a_changed_bundle_is_reloaded_from_disk_and_ready_again(make_client, bundles, tmp_path):
    import shutil

    folder = shutil.copytree(bundles["a"], tmp_path / "a")
    c = make_client(bundle=folder, snapshot_dir=tmp_path / "copies", admin_key=ADMIN_KEY)
    (folder / "labels.json").write_bytes((folder / "labels.json").read_bytes() + b" ")  # changed in place
    r = c.get("/ready")
    assert r.status_code == 503 and "bundle file labels.json changed on disk since load" in r.json()["detail"]
    assert c.post("/v1/predict", json={"text": "python script"}).status_code == 200  # still answers, from its copy
    r = c.post("/v1/admin/reload", json={}, headers=ADMIN)
    assert r.status_code == 422 and "checksum mismatch for labels.json" in r.json()["detail"], r.text  # as it is now
    (folder / "labels.json").write_bytes((bundles["a"] / "labels.json").read_bytes())  # put back: a new inode/mtime
    assert c.post("/v1/admin/reload", json={}, headers=ADMIN).status_code == 200
    assert c.get("/ready").status_code == 200
    assert len([p for p in (tmp_path / "copies").rglob("manifest.json")]) == 1  # the replaced copy was removed
