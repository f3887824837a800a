"""A bundle whose vocabulary names a column out of range (issue 38) is refused when the server loads it: /ready
stays 503 with the reason, where it turned 200 and every text with that word then got a 500; a reload to it is
refused and the old bundle keeps serving that word."""

from __future__ import annotations

import shutil
import time

import pytest

from tests.conftest import edit_bundle
from tests.service.svc_support import (  # noqa: F401  (pytest fixtures)
    ADMIN,
    ADMIN_KEY,
    STARTUP_S,
    bundles,
    make_client,
)

WORD = "python"


@pytest.fixture(scope="module")
def column_bundle(bundles, tmp_path_factory):
    folder = shutil.copytree(bundles["a"], tmp_path_factory.mktemp("column") / "column-50m")
    return edit_bundle(folder, "features/tfidf/vocabulary.json", lambda vocab: vocab | {WORD: 50_000_000})


def test_a_bundle_with_an_out_of_range_vocabulary_column_never_becomes_ready(make_client, column_bundle):
    c = make_client(wait=False, bundle=column_bundle)
    deadline = time.time() + STARTUP_S
    while "vocabulary.json" not in c.get("/ready").text and time.time() < deadline:
        time.sleep(0.05)
    r = c.get("/ready")
    assert r.status_code == 503, r.text
    assert f"term '{WORD}' has column 50000000" in r.json()["detail"], r.text


def test_a_reload_to_it_is_refused_and_the_old_bundle_serves_the_word(make_client, column_bundle):
    c = make_client(admin_key=ADMIN_KEY, bundle_root=column_bundle.parent)
    r = c.post("/v1/admin/reload", json={"bundle": str(column_bundle)}, headers=ADMIN)
    assert r.status_code == 422 and "vocabulary.json" in r.json()["detail"], r.text
    p = c.post("/v1/predict", json={"text": f"{WORD} script interpreter"})
    assert p.status_code == 200 and p.json()["model"]["name"] == "tiny-a" and p.json()["labels"], p.text
