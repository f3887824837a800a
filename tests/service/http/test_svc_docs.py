"""/docs and /redoc work offline (issue 27): their pages name only this server's assets, those are served, the
pages keep a CSP, and headless Chromium (which has no CDN to reach here) renders the API reference from them."""

from __future__ import annotations

import re

import pytest

from tests.service.dashboard.test_svc_dashboard import CHROMIUM, dump_dom
from tests.service.svc_support import bundles, live_server, make_client  # noqa: F401  (pytest fixtures)

PAGES = ("/docs", "/redoc")


@pytest.mark.parametrize("page", PAGES)
def test_the_reference_pages_load_only_local_assets_under_a_csp(make_client, page):
    c = make_client(wait=False)
    r = c.get(page)
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/html")
    assert "script-src 'self';" in r.headers["content-security-policy"]  # no inline or foreign scripts
    assert "frame-ancestors 'none'" in r.headers["content-security-policy"]
    assets = re.findall(r'(?:src|href)="([^"]+)"', r.text)
    assert len(assets) >= 3
    for url in assets:
        assert "//" not in url and ":" not in url, url  # relative: this server, whatever its path prefix
        asset = c.get("/" + url)
        assert asset.status_code == 200 and len(asset.content) > 0, url
    assert "<script>" not in r.text


@pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed")
@pytest.mark.parametrize("page", PAGES)
def test_the_reference_renders_offline_in_chromium(live_server, tmp_path, page):
    dom = dump_dom(live_server.url + page, tmp_path / "profile")
    assert "/v1/predict/batch" in dom.html and "Extreme multi-label tagging" in dom.html, dom.html[-2000:]
