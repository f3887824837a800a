"""Annif compatibility, checked with the real `annif-client` package against a live xtag server on loopback."""

from __future__ import annotations

import pytest

from tests.service.svc_support import bundles, live_server  # noqa: F401  (pytest fixtures)

annif_client = pytest.importorskip("annif_client", reason="annif-client is a dev extra: pip install -e .[dev]")


def test_annif_client_talks_to_xtag(live_server):
    annif = annif_client.AnnifClient(api_base=live_server.url + "/v1/")
    assert "xtag" in annif.api_info["title"]

    projects = annif.projects
    assert [p["project_id"] for p in projects] == ["tiny-a"]
    project = annif.get_project("tiny-a")
    assert project["name"] == "tiny-a" and project["language"] == "en" and project["is_trained"] is True
    with pytest.raises(ValueError, match="not found"):
        annif.get_project("yso-en")

    results = annif.suggest("tiny-a", "sql database query table", limit=3)
    assert len(results) == 3 and results[0]["label"] == "works-with::db"
    assert results[0]["uri"] == "works-with::db" and {"uri", "label", "notation", "score"} <= set(results[0])
    assert [r["score"] for r in results] == sorted((r["score"] for r in results), reverse=True)
    cut = results[1]["score"]
    assert [r["label"] for r in annif.suggest("tiny-a", "sql database query table", threshold=cut)] == [
        r["label"] for r in results if r["score"] >= cut
    ]

    class File:  # the client also accepts a file-like object
        def read(self):
            return "game player arcade"

    assert annif.suggest("tiny-a", File(), limit=1)[0]["label"] == "use::gaming"

    docs = [
        {"document_id": "d1", "text": "python script module"},
        {"text": "audio music player"},
        {"document_id": "d3", "text": ""},
        {"document_id": 4, "text": "sql database"},
    ]
    batch = annif.suggest_batch("tiny-a", docs, limit=2)
    assert [d["document_id"] for d in batch] == ["d1", None, "d3", "4"]  # Annif's ids are strings
    assert batch[0]["results"][0]["label"] == "lang::python" and len(batch[0]["results"]) == 2
    assert batch[1]["results"] == annif.suggest("tiny-a", "audio music player", limit=2)
    assert batch[2]["results"] == []  # Annif answers a blank text with no suggestions
    with pytest.raises(ValueError, match="not found"):
        annif.suggest("nope", "text")
