"""Feedback writes under concurrency (issue 38, item 4), on SQLite and on PostgreSQL alike: concurrent writers
committed together (group commit) and never refused, each answered with its own duplicates; a failing store
still answers 503."""

from __future__ import annotations

import sqlite3
import threading
import time

import pytest
from xtag.service import feedback_store
from xtag.service.feedback_store import Feedback, FeedbackStore, Written

from tests.service.postgres_server import postgres_server, postgres_url  # noqa: F401  (pytest fixtures)
from tests.service.svc_support import ADMIN, ADMIN_KEY, bundles, make_client  # noqa: F401
from tests.service.test_svc_feedback import FEEDBACK, export


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


def post_all(c, bodies: list[dict]) -> list:
    """POST every body at once, one thread each; the answers in the bodies' order."""
    answers: list = [None] * len(bodies)

    def send(i: int) -> None:
        answers[i] = c.post(FEEDBACK, json=bodies[i], headers=ADMIN)

    threads = [threading.Thread(target=send, args=(i,)) for i in range(len(bodies))]
    for t in threads:
        t.start()
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
    writer_of = lambda: c.app.state.feedback  # noqa: E731  (made on the first write)
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
    answers: list = [None] * len(bodies)

    def send(i: int) -> None:
        answers[i] = c.post(FEEDBACK, json=bodies[i], headers=ADMIN)

    threads = []
    for i in range(len(bodies)):  # in order: each queued before the next is sent
        threads.append(threading.Thread(target=send, args=(i,)))
        threads[-1].start()
        wait_for(lambda n=i + 1: len(writer_of().queue) == n)
    txns.gate.set()
    for t in [first, *threads]:
        t.join(30)
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
    held = threading.Thread(target=lambda: answers.extend(post_all(c, [{"documents": [doc(i)]} for i in range(3)])))
    answers: list = []
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
