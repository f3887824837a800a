"""/docs (Swagger UI) and /redoc that work offline: their scripts come from a package, not from a CDN.

The assets are the `fastapi-offline` package's (MIT; Swagger UI 5 and ReDoc 2 bundles, ~2.8 MB), served
at /static/docs. Its own page factory is not used: it builds the FastAPI app itself and, like FastAPI's
pages, starts the viewers from an inline <script>, which a strict Content-Security-Policy forbids. Our two
pages (static/docs.html, static/redoc.html) start them from same-origin scripts instead, under DOCS_CSP.
"""

from __future__ import annotations

from importlib.resources import files

from fastapi import FastAPI
from fastapi.staticfiles import StaticFiles
from starlette.responses import FileResponse
from xtag.service.http.security import DOCS_HEADERS

ASSETS = str(files("fastapi_offline") / "static")  # swagger-ui-bundle.js, swagger-ui.css, redoc.standalone.js


def install(app: FastAPI, static: str) -> None:
    """Serve the two reference pages and their assets (`static`: the folder holding docs.html and redoc.html)."""
    app.mount("/static/docs", StaticFiles(directory=ASSETS), name="docs-assets")  # before /static: more specific

    for path, page in (("/docs", "docs.html"), ("/redoc", "redoc.html")):
        app.add_api_route(path, _page(f"{static}/{page}"), methods=["GET", "HEAD"], include_in_schema=False)


def _page(file: str):
    async def reference() -> FileResponse:  # no parameters: nothing a request can point elsewhere
        return FileResponse(file, media_type="text/html", headers=DOCS_HEADERS)

    return reference
