"""`"explain": true` on a LaMP bundle: attended words and supporting labels beside the first stage's words;
the plain payload unchanged; a bundle exported before the graph had attention outputs still serves."""

from __future__ import annotations

import re

import pytest
from xtag.models.explain.lamp import NO_ATTENTION
from xtag.service.schemas import Explanation

from tests.service.svc_support import bundles, make_client  # noqa: F401  (pytest fixtures)

TEXT = "shooter weapons arena frag multiplayer"
DOCS = [{"text": TEXT}, {"text": "python module pip interpreter script"}]
strip_time = lambda r: re.sub(rb'"took_ms":[0-9.e-]+', b"", r.content)  # noqa: E731


def test_lamp_explanations_name_words_of_the_text_and_other_returned_labels(make_client, lamp_bundle):
    c = make_client(bundle=lamp_bundle[1])
    plain = c.post("/v1/predict", json={"text": TEXT, "k": 4})
    off = c.post("/v1/predict", json={"text": TEXT, "k": 4, "explain": False})
    assert strip_time(plain) == strip_time(off)  # explain off: the payload, byte for byte
    assert all(set(x) == {"id", "name", "score"} for x in plain.json()["labels"])
    r = c.post("/v1/predict", json={"text": TEXT, "k": 4, "explain": True})
    assert r.status_code == 200, r.text
    labels = r.json()["labels"]
    assert [{k: x[k] for k in ("id", "name", "score")} for x in labels] == plain.json()["labels"]
    ids = {x["id"] for x in labels}
    for label in labels:
        e = label["explanation"]
        Explanation.model_validate(e)  # the documented schema
        assert {"words", "levels", "attended_words", "supporting_labels"} <= set(e) and "note" not in e
        assert e["attended_words"] and {w["term"] for w in e["attended_words"]} <= set(TEXT.split())
        assert {s["id"] for s in e["supporting_labels"]} <= ids - {label["id"]}
    batch = c.post("/v1/predict/batch", json={"documents": DOCS, "k": 4, "explain": True}).json()["results"]
    # a batch explains each document as a single request does (up to float noise: the graph runs padded)
    assert [x["id"] for x in batch[0]["labels"]] == [x["id"] for x in labels]
    for got, want in zip(batch[0]["labels"], labels):
        for field in ("attended_words", "supporting_labels"):
            a, b = got["explanation"][field], want["explanation"][field]
            assert [x["weight"] for x in a] == pytest.approx([x["weight"] for x in b], abs=1e-4)


def test_rerank_false_explains_the_first_stage_answer(make_client, lamp_bundle):
    c = make_client(bundle=lamp_bundle[1])
    r = c.post("/v1/predict", json={"text": TEXT, "k": 3, "explain": True, "rerank": False}).json()["labels"]
    assert r and all(set(x["explanation"]) == {"words", "path_score", "levels"} for x in r)


def test_a_bundle_without_attention_outputs_serves_and_explains_with_a_note(make_client, old_lamp_bundle):
    c = make_client(bundle=old_lamp_bundle)
    plain = c.post("/v1/predict", json={"text": TEXT, "k": 3})
    assert plain.status_code == 200 and len(plain.json()["labels"]) == 3
    r = c.post("/v1/predict", json={"text": TEXT, "k": 3, "explain": True})
    assert r.status_code == 200, r.text
    for label in r.json()["labels"]:
        e = label["explanation"]
        assert e["note"] == NO_ATTENTION and "words" in e and "attended_words" not in e
