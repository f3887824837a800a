"""The dashboard at / in headless Chromium: it shows live figures from /v1/stats, model info, and tags a text."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from html.parser import HTMLParser
from urllib.parse import quote_plus

import httpx
import pytest
from xtag.config.settings import Settings

from tests.service.svc_support import LiveServer, bundles, live_server  # noqa: F401  (pytest fixtures)

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
IN_CI = os.environ.get("CI") == "true"  # CI installs chromium (scripts/chromium.sh): there a skip would hide a failure
pytestmark = pytest.mark.skipif(
    CHROMIUM is None and not IN_CI, reason="Debian's chromium is not installed (apt-get install chromium)"
)


@pytest.fixture(autouse=True)
def _chromium_present_in_ci():
    if CHROMIUM is None:
        pytest.fail("CI=true but Debian's chromium is not installed: scripts/chromium.sh installs it", pytrace=False)


class Figures(HTMLParser):
    """Text and data-* attributes of elements with an id, plus data-label rows in document order."""

    def __init__(self):
        super().__init__()
        self.by_id: dict[str, dict] = {}
        self.rows: list[tuple[str | None, str]] = []  # (id of the enclosing list/table, data-label)
        self._open: list[str] = []
        self._container: str | None = None

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if a.get("id"):
            self.by_id[a["id"]] = {**a, "text": ""}
            self._open.append(a["id"])
            if tag in ("ol", "table"):
                self._container = a["id"]
        else:
            self._open.append("")
        if "data-label" in a:
            self.rows.append((self._container, a["data-label"]))

    def handle_endtag(self, tag):
        if self._open:
            self._open.pop()

    def handle_data(self, data):
        for i in self._open:
            if i:
                self.by_id[i]["text"] += data


def dump_dom(url: str, profile) -> Figures:
    out = subprocess.run(
        [
            CHROMIUM,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--no-first-run",
            "--disable-dev-shm-usage",
            f"--user-data-dir={profile}",
            "--virtual-time-budget=5000",
            "--dump-dom",
            url,
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    parser = Figures()
    parser.feed(out.stdout)
    parser.html = out.stdout
    return parser


def test_dashboard_shows_live_figures_and_tags_a_text(live_server, tmp_path):
    with httpx.Client(base_url=live_server.url) as c:
        for _ in range(5):
            assert c.post("/v1/predict", json={"text": "sql database query", "k": 1}).status_code == 200
        assert c.post("/v1/predict", json={"text": " "}).status_code == 422

    page = dump_dom(f"{live_server.url}/?q={quote_plus('game player arcade puzzle')}&k=3", tmp_path / "profile")
    f = page.by_id
    assert f["m-name"]["text"] == "tiny-a" and f["m-labels"]["data-value"] == "9" and f["m-kind"]["text"] == "xlinear"
    assert "tiny-a" in f["model-name"]["text"] and f["status"]["text"] == "serving"
    # at least the 6 requests above, plus the page's own /v1/predict (and /v1/model) — polling is not counted
    assert int(f["requests"]["data-value"]) >= 6
    assert float(f["qps"]["data-value"]) > 0
    p50, p99 = float(f["p50"]["data-value"]), float(f["p99"]["data-value"])
    assert 0 < p50 <= p99
    rate = float(f["error-rate"]["data-value"])
    assert 0 < rate < 0.5 and "4xx 1" in f["errors"]["text"]
    top = [label for where, label in page.rows if where == "top-labels"]
    assert top[0] == "works-with::db"
    tried = [label for where, label in page.rows if where == "try-results"]
    expected = httpx.post(live_server.url + "/v1/predict", json={"text": "game player arcade puzzle", "k": 3}).json()
    assert tried == [x["name"] for x in expected["labels"]]
    assert f["try-results"]["data-count"] == "3" and "tiny-a" in f["try-took"]["text"]


def test_dashboard_shows_an_error_for_a_bad_try(live_server, tmp_path):
    page = dump_dom(f"{live_server.url}/?q=%20%20&k=3", tmp_path / "profile")
    err = page.by_id["try-error"]
    assert "hidden" not in err and "empty" in err["text"]


def test_dashboard_highlights_the_words_that_raised_the_best_labels_score(live_server, tmp_path):
    text = "A Python interpreter, with a game player for arcade puzzles"
    page = dump_dom(f"{live_server.url}/?q={quote_plus(text)}&k=3", tmp_path / "profile")
    asked = {"text": text, "k": 3, "explain": True}
    expected = httpx.post(live_server.url + "/v1/predict", json=asked).json()["labels"]
    best = expected[0]
    f = page.by_id
    assert "hidden" not in f["try-why"] and f["try-why-label"]["text"] == best["name"]
    assert f["try-highlight"]["data-label"] == best["name"]
    # the shown text is the tagged text, and what is marked are its words the explanation credits, as written
    assert f["try-highlight"]["text"] == text
    marks = re.findall(r'<mark data-term="([^"]+)" class="w([123])" title="[^"]*">([^<]+)</mark>', page.html)
    assert marks and int(f["try-highlight"]["data-marks"]) == len(marks)
    credited = {w["term"] for w in best["explanation"]["words"]}
    for term, _, shown in marks:
        assert term in credited and shown.lower() in term.split(" ") and shown in text
    # every word of the text that a credited term covers is marked, once
    words = re.findall(r"\w\w+", text.lower())
    covered = [
        i + j
        for t in credited
        for i in range(len(words))
        for j in range(len(t.split()))
        if words[i : i + len(t.split())] == t.split()
    ]
    assert len(marks) == len(set(covered)) and {shown.lower() for _, _, shown in marks} == {words[i] for i in covered}
    assert any(strength == "3" for _, strength, _ in marks)  # the top word is marked strongest
    cells = re.findall(r'<td class="words">([^<]*)</td>', page.html)
    assert len(cells) == 3 and best["explanation"]["words"][0]["term"] in cells[0]


def test_dashboard_tags_without_explanations_on_a_bundle_that_has_none(lightxml_bundle, tmp_path):
    _, bundle = lightxml_bundle
    with LiveServer(Settings(_env_file=None, bundle=bundle)) as server:
        page = dump_dom(f"{server.url}/?q={quote_plus('python game')}&k=2", tmp_path / "profile")
    f = page.by_id
    assert f["try-results"]["data-count"] == "2" and "hidden" in f["try-error"]
    assert "no TF-IDF features" in f["try-explain-note"]["text"] and "hidden" in f["try-why"]
