"""Browser-facing headers: CORS only for configured origins, a locked-down dashboard, nosniff everywhere."""

from __future__ import annotations

from tests.service.svc_support import bundles, client, make_client  # noqa: F401  (pytest fixtures)

PREDICT = {"text": "python script"}


def test_no_cors_headers_by_default(client):
    r = client.post("/v1/predict", json=PREDICT, headers={"Origin": "https://a.example"})
    assert r.status_code == 200 and "access-control-allow-origin" not in r.headers
    pre = client.options(
        "/v1/predict", headers={"Origin": "https://a.example", "Access-Control-Request-Method": "POST"}
    )
    assert "access-control-allow-origin" not in pre.headers


def test_cors_allows_only_the_configured_origins(make_client):
    c = make_client(cors_origins="https://a.example, https://b.example")
    ok = c.post("/v1/predict", json=PREDICT, headers={"Origin": "https://b.example"})
    assert ok.status_code == 200 and ok.headers["access-control-allow-origin"] == "https://b.example"
    other = c.post("/v1/predict", json=PREDICT, headers={"Origin": "https://evil.example"})
    assert "access-control-allow-origin" not in other.headers
    pre = c.options(
        "/v1/predict",
        headers={
            "Origin": "https://a.example",
            "Access-Control-Request-Method": "POST",
            "Access-Control-Request-Headers": "content-type,x-api-key",
        },
    )
    assert pre.status_code == 200 and pre.headers["access-control-allow-origin"] == "https://a.example"
    bad = c.options("/v1/predict", headers={"Origin": "https://evil.example", "Access-Control-Request-Method": "POST"})
    assert bad.status_code == 400 and "access-control-allow-origin" not in bad.headers


def test_the_dashboard_page_cannot_be_framed_or_inject_scripts(client):
    r = client.get("/")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/html")
    assert r.headers["x-frame-options"] == "DENY"
    assert r.headers["x-content-type-options"] == "nosniff"
    csp = r.headers["content-security-policy"]
    assert "script-src 'self'" in csp and "frame-ancestors 'none'" in csp and "unsafe-inline" not in csp


def test_every_response_says_nosniff(client):
    for r in (
        client.get("/health"),
        client.get("/metrics"),
        client.post("/v1/predict", json=PREDICT),
        client.post("/v1/predict", content=b"{", headers={"content-type": "application/json"}),
        client.get("/nope"),
        client.get("/static/app.js"),
    ):
        assert r.headers.get("x-content-type-options") == "nosniff", r.request.url


def test_dashboard_links_the_api_docs_and_offers_an_example_text(client):
    from html.parser import HTMLParser

    class Page(HTMLParser):
        links: list[str] = []
        example = ""
        _in_text = False

        def handle_starttag(self, tag, attrs):
            a = dict(attrs)
            if tag == "a":
                self.links.append(a.get("href"))
            self._in_text = tag == "textarea" and a.get("id") == "try-text"

        def handle_data(self, data):
            if self._in_text:
                self.example += data

    page = Page()
    page.feed(client.get("/").text)
    assert "/docs" in page.links and client.get("/docs").status_code == 200
    example = page.example.strip()
    assert example
    r = client.post("/v1/predict", json={"text": example})
    assert r.status_code == 200 and r.json()["labels"]
