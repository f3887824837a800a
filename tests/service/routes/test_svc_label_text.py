"""The label-text stage served: GET /v1/labels/{id}/related, and labels added from their text alone
(`xtag update RUN --labels FILE`, no documents) answered after export and an admin reload."""

from __future__ import annotations

import json

from typer.testing import CliRunner
from xtag.training.export.export_run import export_run

from tests.label_text_support import (  # noqa: F401  (pytest fixtures)
    LATER_WORDS,
    NEW_LABEL,
    fused_bundle,
    label_file,
)
from tests.service.svc_support import ADMIN, ADMIN_KEY, bundles, client, make_client  # noqa: F401  (pytest fixtures)
from xtag.cli import app as cli

OCEAN = {"id": "sci::ocean", "name": "oceanography", "description": LATER_WORDS}


def test_related_labels_by_text(make_client, fused_bundle):
    c = make_client(bundle=fused_bundle)
    names = [label["name"] for label in c.get("/v1/labels", params={"limit": 1000}).json()["labels"]]
    astro = names.index(NEW_LABEL)
    answer = c.get(f"/v1/labels/{astro}/related", params={"k": 3})
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert body["id"] == astro and body["name"] == NEW_LABEL
    assert len(body["related"]) <= 3 and astro not in [r["id"] for r in body["related"]]
    scores = [r["score"] for r in body["related"]]
    assert scores == sorted(scores, reverse=True)
    missing = c.get(f"/v1/labels/{len(names)}/related")
    assert missing.status_code == 404 and str(len(names)) in missing.json()["detail"]


def test_related_on_a_bundle_without_the_stage_is_a_clear_409(client):
    answer = client.get("/v1/labels/0/related")
    assert answer.status_code == 409 and "--labels" in answer.json()["detail"]


def test_labels_added_from_text_alone_are_served_after_export_and_reload(make_client, fused_bundle, tmp_path):
    run = fused_bundle.parent / "run"
    new = tmp_path / "new.jsonl"
    new.write_text(json.dumps(OCEAN) + "\n")
    result = CliRunner().invoke(cli, ["update", str(run), "--labels", str(new), "--out", str(tmp_path / "run2")])
    assert result.exit_code == 0, result.output
    summary = json.loads((tmp_path / "run2" / "summary.json").read_text())
    assert summary["update"]["added_labels"] == 1 and summary["total_seconds"] < 30
    export_run(tmp_path / "run2", tmp_path / "bundle2")

    c = make_client(bundle=fused_bundle, admin_key=ADMIN_KEY, bundle_root=tmp_path.parent.parent)
    text = {"text": LATER_WORDS, "k": 3}
    before = c.post("/v1/predict", json={"text": "python module pip", "k": 3}).json()["labels"]
    assert OCEAN["id"] not in [label["name"] for label in c.post("/v1/predict", json=text).json()["labels"]]
    reload = c.post("/v1/admin/reload", json={"bundle": str(tmp_path / "bundle2")}, headers=ADMIN)
    assert reload.status_code == 200, reload.text
    assert c.post("/v1/predict", json=text).json()["labels"][0]["name"] == OCEAN["id"]
    after = c.post("/v1/predict", json={"text": "python module pip", "k": 3}).json()["labels"]
    assert [(x["id"], x["score"]) for x in after] == [(x["id"], x["score"]) for x in before]  # the others kept


def test_labels_from_text_alone_need_a_run_with_the_stage(tmp_path):
    result = CliRunner().invoke(
        cli, ["update", str(tmp_path / "nowhere"), "--labels", str(tmp_path / "x.jsonl"), "--out", str(tmp_path / "o")]
    )
    assert result.exit_code != 0 and "not a finished run" in result.output
