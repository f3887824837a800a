"""Feedback writes under concurrency and at the edges of what a store can keep (issue 38, items 4-6), on SQLite
and on PostgreSQL alike: concurrent writers committed together (group commit) and never refused, each answered
with its own duplicates; a failing store still answers 503; NUL refused as 422 by both stores; ids exact."""

from __future__ import annotations

import sqlite3
import threading
import time

import pytest
from xtag.service.routes.annif import project_id
from xtag.service.state import feedback_store
from xtag.service.state.feedback_store import Feedback, FeedbackStore, Written

from tests.service.postgres_server import postgres_server, postgres_url  # noqa: F401  (pytest fixtures)
from tests.service.routes.test_svc_feedback import FEEDBACK, export
from tests.service.svc_support import ADMIN, ADMIN_KEY, bundles, client, make_client  # noqa: F401

BIG = 2**64


@pytest.fixture(params=["sqlite", "postgresql"])
def store_db(request, tmp_path) -> str:
    """An empty store of each kind (PostgreSQL where the server and the postgres extra are installed)."""
    if request.param == "sqlite":
        return str(tmp_path / "fb.sqlite3")
    return request.getfixturevalue("postgres_url")


def doc(i: object, text: str = "python script", labels: tuple = ("lang::python",)) -> dict:
    return {"id": i, "text": text, "labels": list(labels)}


class Transactions:
    """FeedbackStore.add wrapped: each call's group count recorded; `gate` (when set) holds calls until released,
    `fail` makes them raise as a broken disk would."""

    def __init__(self, monkeypatch, delay_s: float = 0.0):
        self.groups: list[int] = []
        self.gate: threading.Event | None = None
        self.fail = False
        self.delay_s = delay_s
        real = feedback_store.FeedbackStore.add

        def add(store, groups):
            self.groups.append(len(groups))
            if self.gate is not None:
                self.gate.wait(10)
            time.sleep(self.delay_s)  # a disk sync's worth: concurrent writes overlap
            if self.fail:
                raise sqlite3.OperationalError("disk I/O error")
            return real(store, groups)

        monkeypatch.setattr(feedback_store.FeedbackStore, "add", add)


def post_all(c, bodies: list[dict], after_start=lambda started: None) -> list:
    """POST every body at once, one thread each (`after_start(n)` is called once the n-th has started); the
    answers in the bodies' order."""
    answers: list = [None] * len(bodies)

    def send(i: int) -> None:
        answers[i] = c.post(FEEDBACK, json=bodies[i], headers=ADMIN)

    threads = [threading.Thread(target=send, args=(i,)) for i in range(len(bodies))]
    for n, t in enumerate(threads, 1):
        t.start()
        after_start(n)
    for t in threads:
        t.join(30)
    return answers


def wait_for(condition, seconds: float = 10.0) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.005)


# --- group commit (item 4) ---


def test_twenty_concurrent_writers_are_all_stored_in_shared_transactions(make_client, store_db, monkeypatch, tmp_path):
    txns = Transactions(monkeypatch, delay_s=0.02)
    c = make_client(admin_key=ADMIN_KEY, feedback_db=store_db)
    rounds, clients = 3, 20
    for r in range(rounds):
        answers = post_all(c, [{"documents": [doc(f"c{i}-r{r}", f"client {i} round {r}")]} for i in range(clients)])
        assert [a.status_code for a in answers] == [200] * clients, [a.text for a in answers if a.status_code != 200]
        assert all(a.json() == {"stored": 1, "duplicates": 0} for a in answers)
    assert len(export(store_db, tmp_path / "out.jsonl")) == rounds * clients
    assert len(txns.groups) < rounds * clients and max(txns.groups) > 1  # writes shared transactions


def test_group_commit_answers_each_write_with_its_own_duplicates(make_client, store_db, monkeypatch, tmp_path):
    txns = Transactions(monkeypatch)
    c = make_client(admin_key=ADMIN_KEY, feedback_db=store_db)
    txns.gate = threading.Event()
    first = threading.Thread(
        target=c.post, args=(FEEDBACK,), kwargs={"json": {"documents": [doc("z")]}, "headers": ADMIN}
    )
    first.start()  # holds the writer thread: the next writes queue behind it, into one group
    wait_for(lambda: txns.groups == [1])
    bodies = [
        {"documents": [doc("same", labels=("first::wins",)), doc("only-a")]},
        {"documents": [doc("same", labels=("second::loses",))]},
        {"documents": [doc("z"), doc(None), doc("b1"), doc("b1")]},
    ]

    def queued(n: int) -> None:  # in order: each write queued before the next is sent; then the gate opens
        wait_for(lambda: len(c.app.state.feedback.queue) == n)
        if n == len(bodies):
            txns.gate.set()

    answers = post_all(c, bodies, queued)
    first.join(30)
    assert txns.groups == [1, 3]  # the three writes went in one transaction
    assert [a.json() for a in answers] == [
        {"stored": 2, "duplicates": 0},
        {"stored": 0, "duplicates": 1},
        {"stored": 2, "duplicates": 2},  # "z" stored by the earlier transaction, "b1" earlier in this write
    ]
    rows = {r["id"]: r["labels"] for r in export(store_db, tmp_path / "out.jsonl")}
    assert rows["same"] == ["first::wins"] and len(rows) == 5  # z, same, only-a, b1 and the one without an id


def test_the_store_counts_duplicates_per_group_within_one_transaction(store_db):
    store = FeedbackStore(store_db)
    try:
        groups = [
            [Feedback("a", ["x"], "1"), Feedback("a again", ["y"], "1")],
            [Feedback("b", ["x"], "1")],
            [Feedback("c", ["x"]), Feedback("d", ["x"])],
        ]
        assert store.add(groups) == [Written(1, 1), Written(0, 1), Written(2, 0)]
        assert [r["text"] for r in store.rows()] == ["a", "c", "d"]
    finally:
        store.close()


def test_a_failing_store_answers_every_write_503_and_frees_its_places(make_client, tmp_path, monkeypatch):
    txns = Transactions(monkeypatch)
    c = make_client(admin_key=ADMIN_KEY, feedback_db=str(tmp_path / "fb.sqlite3"), feedback_max_pending=3)
    txns.gate, txns.fail = threading.Event(), True
    answers: list = []
    held = threading.Thread(target=lambda: answers.extend(post_all(c, [{"documents": [doc(i)]} for i in range(3)])))
    held.start()
    wait_for(lambda: c.app.state.feedback is not None and c.app.state.feedback.pending == 3)
    busy = c.post(FEEDBACK, json={"documents": [doc("late")]}, headers=ADMIN)  # refused at once, not queued
    assert busy.status_code == 503 and "Retry-After" in busy.headers
    assert "XTAG_FEEDBACK_MAX_PENDING" in busy.json()["detail"]
    txns.gate.set()
    held.join(30)
    assert [a.status_code for a in answers] == [503] * 3 and all("Retry-After" in a.headers for a in answers)
    assert all("failed: OperationalError" in a.json()["detail"] for a in answers)
    assert c.app.state.feedback.pending == 0  # their places are free again
    txns.fail = False
    for i in range(4):  # more than XTAG_FEEDBACK_MAX_PENDING writes, one after another: none refused
        assert c.post(FEEDBACK, json={"documents": [doc(f"ok{i}")]}, headers=ADMIN).status_code == 200


# --- what both stores can keep: no NUL (item 5) ---


@pytest.mark.parametrize(
    "document, field",
    [
        (doc("n1", text="nul \x00 in text"), "documents[1].text"),
        (doc("nul \x00 in id"), "documents[1].id"),
        (doc("n3", labels=("ok", "nul\x00label")), "documents[1].labels[1]"),
    ],
)
def test_a_nul_character_is_refused_as_422_naming_the_field_by_both_stores(
    make_client, store_db, tmp_path, document, field
):
    c = make_client(admin_key=ADMIN_KEY, feedback_db=store_db)
    r = c.post(FEEDBACK, json={"documents": [doc("fine"), document]}, headers=ADMIN)
    assert r.status_code == 422 and r.headers["content-type"] == "application/problem+json"
    assert f"body.{field}: " in r.json()["detail"] and "NUL" in r.json()["detail"]
    assert c.post(FEEDBACK, json={"documents": [doc("after")]}, headers=ADMIN).status_code == 200
    assert [row["id"] for row in export(store_db, tmp_path / "out.jsonl")] == ["after"]  # nothing of the refused one


def test_annif_learn_refuses_a_nul_character_as_422_on_both_stores(make_client, store_db, tmp_path):
    c = make_client(admin_key=ADMIN_KEY, feedback_db=store_db)
    learn = f"/v1/projects/{project_id(c.app.state.registry.current)}/learn"
    for body, field in [
        ([{"text": "a\x00b", "subjects": [{"label": "x"}]}], "body[0].text"),
        ([{"text": "ab", "subjects": [{"label": "x\x00"}]}], "body[0].subjects[0].label"),
        ([{"text": "ab", "subjects": [{"uri": "u\x00"}]}], "body[0].subjects[0].uri"),
        ([{"text": "ab", "subjects": [{"label": "x"}], "document_id": "d\x00"}], "body[0].document_id"),
    ]:
        r = c.post(learn, json=body, headers=ADMIN)
        assert r.status_code == 422 and f"{field}: " in r.json()["detail"], (field, r.text)
    assert c.post(learn, json=[{"text": "ab", "subjects": [{"label": "x"}]}], headers=ADMIN).status_code == 204
    assert len(export(store_db, tmp_path / "out.jsonl")) == 1


# --- ids: strings or exact integers, never floats (item 6) ---


def test_integer_ids_beyond_64_bits_stay_distinct_documents(make_client, store_db, tmp_path):
    c = make_client(admin_key=ADMIN_KEY, feedback_db=store_db)
    for i in (BIG + 1, BIG + 2, -(BIG + 1)):
        raw = f'{{"documents": [{{"id": {i}, "text": "doc {i}", "labels": ["x"]}}]}}'  # as a client writes it
        r = c.post(FEEDBACK, content=raw, headers={**ADMIN, "Content-Type": "application/json"})
        assert r.json() == {"stored": 1, "duplicates": 0}, i
    rows = export(store_db, tmp_path / "out.jsonl")
    assert [r["id"] for r in rows] == [str(BIG + 1), str(BIG + 2), str(-(BIG + 1))]


@pytest.mark.parametrize("raw_id", ["1e3", "1000.0", "18446744073709551617.0", "true"])
def test_a_float_or_boolean_id_is_refused_naming_the_field(make_client, tmp_path, raw_id):
    c = make_client(admin_key=ADMIN_KEY, feedback_db=str(tmp_path / "fb.sqlite3"))
    raw = f'{{"documents": [{{"id": {raw_id}, "text": "python", "labels": ["x"]}}]}}'
    r = c.post(FEEDBACK, content=raw, headers={**ADMIN, "Content-Type": "application/json"})
    assert r.status_code == 422 and r.json()["detail"].startswith("body.documents[0].id: ")
    batch = f'{{"documents": [{{"id": {raw_id}, "text": "python"}}]}}'
    r = c.post("/v1/predict/batch", content=batch, headers={"Content-Type": "application/json"})
    assert r.status_code == 422 and r.json()["detail"].startswith("body.documents[0].id: ")


def test_plain_integer_and_string_ids_are_accepted(make_client, tmp_path):
    db = str(tmp_path / "fb.sqlite3")
    c = make_client(admin_key=ADMIN_KEY, feedback_db=db)
    r = c.post(FEEDBACK, json={"documents": [doc(7), doc("a-7"), doc(-3)]}, headers=ADMIN)
    assert r.json() == {"stored": 3, "duplicates": 0}
    assert [row["id"] for row in export(db, tmp_path / "out.jsonl")] == ["7", "a-7", "-3"]


def test_batch_echoes_integer_ids_beyond_64_bits_exactly(client):
    raw = f'{{"documents": [{{"id": {BIG + 1}, "text": "python"}}, {{"id": {BIG + 2}, "text": "game"}}, {{"id": 5, "text": "c"}}]}}'
    r = client.post("/v1/predict/batch", content=raw, headers={"Content-Type": "application/json"})
    assert r.status_code == 200 and [x["id"] for x in r.json()["results"]] == [str(BIG + 1), str(BIG + 2), "5"]


@pytest.mark.parametrize("digits", [310, 400, 5000, 1_000_000])
def test_integer_ids_of_any_size_are_echoed_exactly(client, digits):
    # orjson refuses 310 digits or more (a float's range) and int() past 4,300 (its digit limit): neither may
    # bound an id, only the body limit does (1,000,000 digits fit XTAG_MAX_BODY_BYTES' 2 MiB)
    big = "9" * digits
    raw = f'{{"documents": [{{"id": {big}, "text": "python"}}, {{"id": -{big}, "text": "game"}}]}}'
    r = client.post("/v1/predict/batch", content=raw, headers={"Content-Type": "application/json"})
    assert r.status_code == 200, r.text[:300]
    assert [x["id"] for x in r.json()["results"]] == [big, "-" + big]


def test_an_integer_id_and_its_string_are_two_documents(make_client, store_db, tmp_path):
    c = make_client(admin_key=ADMIN_KEY, feedback_db=store_db)
    huge = "7" * 5000  # past int()'s digit limit: still an integer id, not its string
    for raw_id in ("123", '"123"', huge, f'"{huge}"'):
        raw = f'{{"documents": [{{"id": {raw_id}, "text": "doc", "labels": ["x"]}}]}}'
        for answer in ({"stored": 1, "duplicates": 0}, {"stored": 0, "duplicates": 1}):  # a retry is a duplicate
            r = c.post(FEEDBACK, content=raw, headers={**ADMIN, "Content-Type": "application/json"})
            assert r.json() == answer, raw_id[:10]
    learn = f"/v1/projects/{project_id(c.app.state.registry.current)}/learn"
    both = [{"document_id": i, "text": "doc", "subjects": [{"label": "x"}]} for i in (8, "8", 8)]
    assert c.post(learn, json=both, headers=ADMIN).status_code == 204
    assert [r["id"] for r in export(store_db, tmp_path / "out.jsonl")] == ["123", "123", huge, huge, "8", "8"]


def untyped_store(store_db: str, ids: list[str | None]) -> None:
    """A store as written before ids had a type: client_id UNIQUE alone."""
    create = (
        "CREATE TABLE feedback (seq {} PRIMARY KEY, client_id TEXT UNIQUE, received REAL NOT NULL, source TEXT NOT "
        "NULL, text TEXT NOT NULL, labels TEXT NOT NULL)"
    )
    insert = "INSERT INTO feedback (client_id, received, source, text, labels) VALUES ({0}, 0, 'xtag', {0}, '[\"x\"]')"
    if store_db.startswith("postgresql"):
        import psycopg

        with psycopg.connect(store_db, autocommit=True) as conn:
            conn.execute(create.format("BIGSERIAL"))
            for i in ids:
                conn.execute(insert.format("%s"), [i, i or "no id"])
    else:
        with sqlite3.connect(store_db) as conn:
            conn.execute(create.format("INTEGER"))
            conn.executemany(insert.format("?"), [(i, i or "no id") for i in ids])


def test_a_store_from_before_typed_ids_is_migrated_and_still_idempotent(make_client, store_db, tmp_path):
    untyped_store(store_db, ["123", "abc", None, "-0", "7"])
    c = make_client(admin_key=ADMIN_KEY, feedback_db=store_db)
    sent = [123, "123", "abc", "-0", -0, 7, "7", 8, "8", None]
    r = c.post(FEEDBACK, json={"documents": [doc(i) for i in sent]}, headers=ADMIN)
    # "123" and "7" might have been either kind: a duplicate of both; "abc" and "-0" were strings (str() of no
    # integer gives "-0"): the integer 0 (-0 in JSON) is new; 8, "8" and None are new
    assert r.json() == {"stored": 4, "duplicates": 6}
    rows = export(store_db, tmp_path / "out.jsonl")
    assert [r["id"] for r in rows][:5] == ["123", "abc", "feedback-3", "-0", "7"]  # old rows first, in order
    assert [r["id"] for r in rows][5:8] == ["0", "8", "8"] and len(rows) == 9
    assert c.post(FEEDBACK, json={"documents": [doc(8), doc("8")]}, headers=ADMIN).json() == {
        "stored": 0,
        "duplicates": 2,
    }
