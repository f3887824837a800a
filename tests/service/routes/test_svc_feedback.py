"""The feedback store: documents with corrected labels written durably (SQLite, PostgreSQL), idempotent by
client id, admin-only, never in the way of predictions, and exported as a corpus by `xtag feedback export`."""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from pathlib import Path

from typer.testing import CliRunner
from xtag.service.routes.annif import project_id
from xtag.service.state import feedback_store

from tests.service.postgres_server import postgres_server, postgres_url  # noqa: F401  (pytest fixtures)
from tests.service.svc_support import ADMIN, ADMIN_KEY, bundles, make_client  # noqa: F401
from xtag.cli import app as cli

FEEDBACK = "/v1/feedback"
DOCS = [
    {"id": "a1", "text": "rust compiler borrow checker", "labels": ["lang::rust", "devel::compiler"]},
    {"text": "python interpreter script", "labels": ["lang::python"]},
]


def export(db: str, out: Path) -> list[dict]:
    result = CliRunner().invoke(cli, ["feedback", "export", "--out", str(out), "--db", db])
    assert result.exit_code == 0, result.output
    return [json.loads(line) for line in out.read_text().splitlines()]


def round_trip(c, db: str, out: Path) -> None:
    r = c.post(FEEDBACK, json={"documents": DOCS}, headers=ADMIN)
    assert r.status_code == 200 and r.json() == {"stored": 2, "duplicates": 0}
    rows = export(db, out)
    assert [(row["text"], row["labels"]) for row in rows] == [(d["text"], d["labels"]) for d in DOCS]
    assert rows[0]["id"] == "a1" and rows[1]["id"]  # the second got an id of its own


def test_feedback_round_trip_through_sqlite_in_wal_mode(make_client, tmp_path):
    db = str(tmp_path / "state" / "fb.sqlite3")
    c = make_client(admin_key=ADMIN_KEY, feedback_db=db)
    round_trip(c, db, tmp_path / "fb.jsonl")
    with sqlite3.connect(db) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_a_client_id_makes_a_write_idempotent(make_client, tmp_path):
    db = str(tmp_path / "fb.sqlite3")
    c = make_client(admin_key=ADMIN_KEY, feedback_db=db)
    doc = {"id": 7, "text": "game arcade puzzle", "labels": ["use::gaming"]}
    assert c.post(FEEDBACK, json={"documents": [doc]}, headers=ADMIN).json() == {"stored": 1, "duplicates": 0}
    again = {**doc, "labels": ["use::other"]}  # a retry (even a changed one) keeps the first write
    assert c.post(FEEDBACK, json={"documents": [again, DOCS[1]]}, headers=ADMIN).json() == {
        "stored": 1,
        "duplicates": 1,
    }
    rows = export(db, tmp_path / "out.jsonl")
    assert [(r["id"], r["labels"]) for r in rows][0] == ("7", ["use::gaming"]) and len(rows) == 2


def test_feedback_is_admin_only(make_client, tmp_path):
    db = tmp_path / "fb.sqlite3"
    open_server = make_client(api_key="api-s3cret", feedback_db=str(db))  # no admin key: writing is refused
    r = open_server.post(FEEDBACK, json={"documents": DOCS}, headers={"X-API-Key": "api-s3cret"})
    assert r.status_code == 403 and "XTAG_ADMIN_KEY" in r.json()["detail"]
    c = make_client(admin_key=ADMIN_KEY, api_key="api-s3cret", feedback_db=str(db))
    for headers in ({}, {"X-API-Key": "api-s3cret"}, {"X-Admin-Key": "wrong"}):
        assert c.post(FEEDBACK, json={"documents": DOCS}, headers=headers).status_code == 401, headers
        pid = project_id(c.app.state.registry.current)
        learn = c.post(f"/v1/projects/{pid}/learn", json=[{"text": "x", "subjects": [{"label": "y"}]}], headers=headers)
        assert learn.status_code == 401
    assert not db.exists()  # nothing was written, nor even opened
    assert c.post(FEEDBACK, json={"documents": DOCS}, headers=ADMIN).status_code == 200


def test_annif_learn_stores_subjects_by_label_or_uri(make_client, tmp_path):
    db = str(tmp_path / "fb.sqlite3")
    c = make_client(admin_key=ADMIN_KEY, feedback_db=db, annif_uri_prefix="http://ex.org/")
    pid = project_id(c.app.state.registry.current)
    body = [
        {"text": "astronomy telescope", "subjects": [{"uri": "http://ex.org/science::astro"}, {"label": "new::tag"}]},
        {"text": "   ", "subjects": [{"label": "ignored"}]},  # Annif skips blank documents
    ]
    r = c.post(f"/v1/projects/{pid}/learn", json=body, headers=ADMIN)
    assert r.status_code == 204, r.text
    assert c.post("/v1/projects/nope/learn", json=body, headers=ADMIN).status_code == 404
    bad = c.post(f"/v1/projects/{pid}/learn", json=[{"text": "t", "subjects": [{}]}], headers=ADMIN)
    assert bad.status_code == 400
    rows = export(db, tmp_path / "out.jsonl")
    assert [(r["text"], r["labels"]) for r in rows] == [("astronomy telescope", ["science::astro", "new::tag"])]


def test_a_failing_store_answers_503_and_predictions_go_on(make_client, tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    c = make_client(admin_key=ADMIN_KEY, feedback_db=str(blocker / "fb.sqlite3"))  # its folder cannot exist
    r = c.post(FEEDBACK, json={"documents": DOCS}, headers=ADMIN)
    assert r.status_code == 503 and r.json()["type"].endswith("feedback-unavailable") and "Retry-After" in r.headers
    assert str(tmp_path) not in r.text  # no server paths in answers
    assert c.post("/v1/predict", json={"text": "python script"}).status_code == 200


def test_a_slow_store_answers_503_in_time_while_predictions_answer(make_client, tmp_path, monkeypatch):
    release = threading.Event()
    real_add = feedback_store.FeedbackStore.add

    def stuck(self, items):
        release.wait(30)
        return real_add(self, items)

    monkeypatch.setattr(feedback_store.FeedbackStore, "add", stuck)
    c = make_client(admin_key=ADMIN_KEY, feedback_db=str(tmp_path / "fb.sqlite3"), feedback_timeout_s=0.5)
    answers: dict[str, object] = {}

    def write() -> None:
        start = time.perf_counter()
        answers["status"] = c.post(FEEDBACK, json={"documents": DOCS}, headers=ADMIN).status_code
        answers["seconds"] = time.perf_counter() - start

    writer = threading.Thread(target=write)
    writer.start()
    time.sleep(0.1)
    start = time.perf_counter()
    assert c.post("/v1/predict", json={"text": "python script"}).status_code == 200
    predicted_in = time.perf_counter() - start
    writer.join(30)
    release.set()
    assert answers["status"] == 503 and answers["seconds"] < 10
    assert predicted_in < answers["seconds"]  # the prediction did not wait for the write's deadline


# --- PostgreSQL: a real server, started for the test, when Debian's postgresql package is installed ---


def test_feedback_round_trip_through_postgresql(make_client, postgres_url, tmp_path):
    c = make_client(admin_key=ADMIN_KEY, feedback_db=postgres_url)
    round_trip(c, postgres_url, tmp_path / "fb.jsonl")
    # a second replica on the same database sees the same ids: a retry through it is a duplicate
    other = make_client(admin_key=ADMIN_KEY, feedback_db=postgres_url)
    r = other.post(FEEDBACK, json={"documents": DOCS[:1]}, headers=ADMIN)
    assert r.json() == {"stored": 0, "duplicates": 1}
    assert len(export(postgres_url, tmp_path / "again.jsonl")) == 2


def test_feedback_to_update_to_reload_serves_the_new_label(make_client, bundles, tmp_path):
    """The loop the issue asks for: corrections stored, exported, a run updated, exported and reloaded live."""
    from xtag.training.export.export_run import export_run
    from xtag.training.update_run import update_run

    db = str(tmp_path / "fb.sqlite3")
    c = make_client(admin_key=ADMIN_KEY, feedback_db=db, bundle_root=tmp_path)
    words = "quasar nebula telescope galaxy orbit"
    docs = [
        {
            "id": f"astro{i}",
            "text": f"{words} {['image photo', 'picture pixel'][i % 2]} tool",
            "labels": ["science::astronomy", "works-with::image"],
        }
        for i in range(12)
    ]
    assert c.post(FEEDBACK, json={"documents": docs}, headers=ADMIN).json()["stored"] == 12
    corpus = tmp_path / "feedback.jsonl"
    export(db, corpus)
    update_run(bundles["a"].parent / "run-tiny-a", corpus, tmp_path / "run-updated", progress=False)
    export_run(tmp_path / "run-updated", tmp_path / "updated", "tiny-a-updated")
    r = c.post("/v1/admin/reload", json={"bundle": str(tmp_path / "updated")}, headers=ADMIN)
    assert r.status_code == 200 and r.json()["model"]["name"] == "tiny-a-updated"
    names = [label["name"] for label in c.post("/v1/predict", json={"text": words, "k": 3}).json()["labels"]]
    assert "science::astronomy" in names
