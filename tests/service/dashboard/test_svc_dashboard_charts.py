"""The built-in page's last-hour charts (issue 27) in headless Chromium: after a scripted burst of requests and a
reload, the charts (uPlot, served from the package) have points and show the reload marker; the drift panel
names the labels a one-topic burst pushed up. The run saves a screenshot (dashboard.png in the test's tmp dir)."""

from __future__ import annotations

import subprocess
import time

import httpx
import pytest
from xtag.config.settings import Settings

from tests.service.dashboard.test_svc_dashboard import CHROMIUM, dump_dom
from tests.service.svc_support import ADMIN, ADMIN_KEY, LiveServer, bundles, tiny_corpus, wait_ready  # noqa: F401  (pytest fixtures)

pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed")


def screenshot(url: str, path, profile) -> None:
    out = subprocess.run(
        [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-dev-shm-usage",
         f"--user-data-dir={profile}", "--hide-scrollbars", "--window-size=1400,2200",
         "--virtual-time-budget=5000", f"--screenshot={path}", url],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert out.returncode == 0 and path.stat().st_size > 10_000, out.stderr[-2000:]


def test_the_page_charts_a_burst_and_marks_the_reload(bundles, tmp_path):
    settings = Settings(_env_file=None, bundle=bundles["a"], admin_key=ADMIN_KEY, reload_interval_s=0)
    with LiveServer(settings) as server, httpx.Client(base_url=server.url) as c:
        for row in tiny_corpus()[:40]:  # traffic like the training data, then a burst of one topic
            assert c.post("/v1/predict", json={"text": row["text"], "k": 2}).status_code == 200
        docs = [{"text": "game player level arcade puzzle fun"}] * 40
        assert c.post("/v1/predict/batch", json={"documents": docs, "k": 1}).status_code == 200
        assert c.post("/v1/predict", json={"text": " "}).status_code == 422
        before = dump_dom(server.url + "/", tmp_path / "profile0")
        r = c.post("/v1/admin/reload", json={"bundle": str(bundles["b"])}, headers=ADMIN)
        assert r.status_code == 200 and r.json()["status"] == "reloaded"
        page = dump_dom(server.url + "/", tmp_path / "profile")
        screenshot(server.url + "/", tmp_path / "dashboard.png", tmp_path / "profile2")

    f = page.by_id
    for chart in ("chart-qps", "chart-latency", "chart-errors", "chart-batch"):
        assert int(f[chart]["data-points"]) > 0, chart
        assert int(f[chart]["data-markers"]) >= 2, chart  # the first load and the reload
    assert "<canvas" in page.html  # drawn by uPlot, not text
    events = [e for e in page.html.split("data-event=")[1:]]
    assert any(e.startswith('"reload"') for e in events) and "(was " in f["events"]["text"]
    # the drift panel before the reload: the game burst made use::gaming the top riser
    assert float(before.by_id["drift-js"]["data-value"]) > 0
    assert [label for where, label in before.rows if where == "drift-risers"][0] == "use::gaming"
    # the reload started a new drift window: the panel shows what tiny-b served since (nothing yet)
    assert f["drift-window"]["text"] == "0"


def test_the_page_has_a_model_selector_and_shows_the_shadow(bundles, tmp_path):
    """Two models, the second the shadow of the default: the selector lists both (the default picked), and the
    shadow panel shows the pair with the documents it compared."""
    settings = Settings(_env_file=None, bundle=bundles["a"], models=f"tiny-b={bundles['b']}", shadow="tiny-b=tiny-a")
    with LiveServer(settings) as server, httpx.Client(base_url=server.url) as c:
        wait_ready(server.url, path="/v1/models/tiny-b/ready")
        for row in tiny_corpus()[:10]:
            assert c.post("/v1/predict", json={"text": row["text"], "k": 2}).status_code == 200
            assert c.post("/v1/models/tiny-b/predict", json={"text": row["text"], "k": 2}).status_code == 200
        scorer = server.app.state.shadows["tiny-a"]
        deadline = time.monotonic() + 30
        while scorer.counts["documents"] < 10 and time.monotonic() < deadline:
            time.sleep(0.05)
        page = dump_dom(server.url + "/", tmp_path / "profile")
    f = page.by_id
    assert f["model-select"]["text"] == "tiny-atiny-b"  # the two options, in order
    assert "hidden" not in f["shadow"]
    assert "primaryshadowcompared" in f["shadow-pairs"]["text"] and "tiny-atiny-b10" in f["shadow-pairs"]["text"]
    assert int(f["chart-qps"]["data-points"]) > 0  # the default model's series


def test_the_page_shows_each_versions_share_and_marks_a_traffic_change(bundles, tmp_path):
    """A model of two versions split 80/20 by the admin plane: the versions panel lists both with their weights and
    the stable one starred, and the change is an event of the charts."""
    import shutil

    for version, key in (("1", "a"), ("2", "b")):
        shutil.copytree(bundles[key], tmp_path / "tags" / version)
    (tmp_path / "models.toml").write_text('[models.tags]\nversions = {"1" = "tags/1", "2" = "tags/2"}\nstable = "1"\n')
    settings = Settings(_env_file=None, bundle_root=tmp_path, admin_key=ADMIN_KEY)
    with LiveServer(settings) as server, httpx.Client(base_url=server.url) as c:
        deadline = time.monotonic() + 60
        while "loading" in c.get("/v1/models").text and time.monotonic() < deadline:
            time.sleep(0.05)
        r = c.put("/v1/admin/models/tags/traffic", json={"weights": {"1": 80, "2": 20}}, headers=ADMIN)
        assert r.status_code == 200, r.text
        page = dump_dom(server.url + "/", tmp_path / "profile")
    f = page.by_id
    assert "hidden" not in f["versions"]
    assert "tags1 *80 %ready" in f["version-rows"]["text"] and "tags220 %ready" in f["version-rows"]["text"]
    assert 'data-event="traffic"' in page.html and "tags: weights (1 80%, 2 20%)" in f["events"]["text"]
