"""XTAG_EVICT=lru (service/state/eviction.py): models load on their first request and the least recently used one
is evicted to make room, never one with requests in flight; the default still refuses and never evicts.

The process's memory is simulated: each loaded model adds MODEL_MB to a BASE_MB resident, so that "room for two"
means the same on every machine."""

from __future__ import annotations

import threading
import time

import pytest
from prometheus_client.parser import text_string_to_metric_families
from pydantic import ValidationError
from xtag.config.settings import Settings
from xtag.service import app as app_module
from xtag.service.state import eviction, memory, model_slot
from xtag.service.state.model_repository import ModelRepository

from tests.service.svc_support import bundles, make_client, tiny_corpus, wait_ready  # noqa: F401

BASE_MB, MODEL_MB = 100.0, 10.0
ROOM_FOR_TWO = BASE_MB + 2.5 * MODEL_MB
TEXT = {"text": tiny_corpus()[0]["text"], "k": 3}


@pytest.fixture
def simulated_memory(monkeypatch):
    """RSS = BASE_MB + MODEL_MB per model loaded in any app made meanwhile; every bundle needs MODEL_MB."""
    registries: list[ModelRepository] = []

    class Recorded(ModelRepository):
        def __init__(self, *args, **kwargs):
            registries.append(self)
            super().__init__(*args, **kwargs)

    def rss() -> float:
        return BASE_MB + MODEL_MB * sum(s.current is not None for r in registries for s in r.slots.values())

    monkeypatch.setattr(app_module, "ModelRepository", Recorded)
    for module in (memory, eviction):
        monkeypatch.setattr(module, "resident_mb", rss)
        monkeypatch.setattr(module, "bundle_bytes", lambda path: int(MODEL_MB * 2**20))
    return rss


def three_models(make_client, bundles, **settings):
    """tiny-a (the default, pinned), tiny-b and tiny-c, XTAG_EVICT=lru with room for two."""
    settings = {"max_memory_mb": ROOM_FOR_TWO, "evict": "lru", **settings}
    return make_client(models=f"tiny-b={bundles['b']},tiny-c={bundles['b']}", **settings)


def states(c) -> dict[str, tuple[str, bool]]:
    return {m["name"]: (m["state"], m["loaded"]) for m in c.get("/v1/models").json()["models"]}


def series(c, name: str) -> dict[str, float]:
    text = c.get("/metrics").text
    return {
        s.labels.get("model"): s.value
        for f in text_string_to_metric_families(text)
        for s in f.samples
        if s.name == name
    }


def slow_loads(monkeypatch, seconds: float) -> None:
    real = model_slot.load_and_warm

    def slow(*args, **kwargs):
        time.sleep(seconds)
        return real(*args, **kwargs)

    monkeypatch.setattr(model_slot, "load_and_warm", slow)


def test_lru_needs_a_memory_limit():
    with pytest.raises(ValidationError, match="XTAG_EVICT=lru evicts to stay under XTAG_MAX_MEMORY_MB"):
        Settings(_env_file=None, evict="lru")


def test_by_default_a_model_that_does_not_fit_is_refused_and_nothing_is_evicted(make_client, bundles, simulated_memory):
    c = make_client(models=f"tiny-b={bundles['b']},tiny-c={bundles['b']}", max_memory_mb=ROOM_FOR_TWO)
    wait_ready(c)
    deadline = time.monotonic() + 60
    while states(c)["tiny-c"][0] == "loading" and time.monotonic() < deadline:
        time.sleep(0.05)
    assert states(c) == {"tiny-a": ("ready", True), "tiny-b": ("ready", True), "tiny-c": ("failed", False)}
    r = c.post("/v1/models/tiny-c/predict", json=TEXT)
    assert r.status_code == 503 and "XTAG_MAX_MEMORY_MB" in r.json()["detail"]
    assert c.post("/v1/models/tiny-b/predict", json=TEXT).status_code == 200  # still served: nothing evicted
    assert c.app.state.lazy is None and "xtag_model_evictions_total" not in c.get("/metrics").text


def test_models_load_on_first_request_and_the_least_recently_used_makes_room(make_client, bundles, simulated_memory):
    c = three_models(make_client, bundles)
    assert states(c) == {"tiny-a": ("ready", True), "tiny-b": ("idle", False), "tiny-c": ("idle", False)}
    assert c.get("/v1/models/tiny-b/ready").json() == {"status": "idle"}
    assert c.post("/v1/models/tiny-b/predict", json=TEXT).status_code == 200
    assert states(c)["tiny-b"] == ("ready", True)
    assert (
        c.post("/v1/models/tiny-c/predict/batch", json={"documents": [{"text": TEXT["text"]}], "k": 3}).status_code
        == 200
    )
    assert states(c) == {"tiny-a": ("ready", True), "tiny-b": ("idle", False), "tiny-c": ("ready", True)}
    assert c.post("/v1/predict", json=TEXT).status_code == 200  # the default is pinned: never evicted
    assert c.post("/v1/models/tiny-b/predict", json=TEXT).status_code == 200  # c was used last: c goes
    assert states(c)["tiny-c"] == ("idle", False)
    assert series(c, "xtag_model_loads_total") == {"tiny-b": 2, "tiny-c": 1}
    assert series(c, "xtag_model_evictions_total") == {"tiny-b": 1, "tiny-c": 1}
    assert series(c, "xtag_model_load_wait_seconds_count") == {"tiny-b": 2, "tiny-c": 1}
    assert c.app.state.lazy.in_flight == {"tiny-b": 0, "tiny-c": 0}  # every request let its model go


def test_no_eviction_while_the_model_has_requests_in_flight(make_client, bundles, simulated_memory):
    c = three_models(make_client, bundles)
    lazy = c.app.state.lazy
    assert c.post("/v1/models/tiny-b/predict", json=TEXT).status_code == 200
    c.portal.call(lazy.hold, "tiny-b")  # a request on tiny-b, still running
    answers = []
    waiting = threading.Thread(target=lambda: answers.append(c.post("/v1/models/tiny-c/predict", json=TEXT)))
    waiting.start()
    time.sleep(0.5)
    assert answers == [] and states(c)["tiny-b"] == ("ready", True) and states(c)["tiny-c"] == ("idle", False)
    c.portal.call(lazy.release, "tiny-b")  # its request ends: now it may go
    waiting.join(30)
    assert answers[0].status_code == 200
    assert states(c)["tiny-b"] == ("idle", False) and states(c)["tiny-c"] == ("ready", True)


def test_a_model_that_cannot_fit_gets_503_with_retry_after(make_client, bundles, simulated_memory):
    c = three_models(make_client, bundles, max_memory_mb=BASE_MB + 1.5 * MODEL_MB)  # room for the default alone
    r = c.post("/v1/models/tiny-b/predict", json=TEXT)
    assert r.status_code == 503 and r.headers["retry-after"] == "1"
    assert "pinned" in r.json()["detail"] and states(c)["tiny-b"] == ("idle", False)
    assert c.post("/v1/models/nope/predict", json=TEXT).status_code == 404


def test_concurrent_first_requests_share_one_load_and_wait_for_it(make_client, bundles, simulated_memory, monkeypatch):
    c = three_models(make_client, bundles)
    slow_loads(monkeypatch, 0.5)
    answers = []
    clients = [
        threading.Thread(target=lambda: answers.append(c.post("/v1/models/tiny-b/predict", json=TEXT)))
        for _ in range(8)
    ]
    for t in clients:
        t.start()
    for t in clients:
        t.join(60)
    assert [r.status_code for r in answers] == [200] * 8
    assert series(c, "xtag_model_loads_total") == {"tiny-b": 1}
    assert series(c, "xtag_model_load_wait_seconds_count") == {"tiny-b": 8}
    assert series(c, "xtag_model_load_wait_seconds_sum")["tiny-b"] >= 8 * 0.4


def test_a_request_waits_for_a_load_at_most_load_wait_s(make_client, bundles, simulated_memory, monkeypatch):
    c = three_models(make_client, bundles, load_wait_s=0.2)
    slow_loads(monkeypatch, 1.0)
    r = c.post("/v1/models/tiny-b/predict", json=TEXT)
    assert r.status_code == 503 and "XTAG_LOAD_WAIT_S" in r.json()["detail"] and r.headers["retry-after"] == "1"
    deadline = time.monotonic() + 60
    while states(c)["tiny-b"] != ("ready", True):  # the load went on
        assert time.monotonic() < deadline
        time.sleep(0.05)
    assert c.post("/v1/models/tiny-b/predict", json=TEXT).status_code == 200


def test_two_models_that_evict_each_other_under_concurrent_clients_answer_every_request(
    make_client, bundles, simulated_memory, monkeypatch
):
    """A load's waiting requests are served before another load may evict the model again: without that, b's and
    c's loads evicted each other for ever and no request got either (seen in bench/lazy_models.py)."""
    c = three_models(make_client, bundles)
    slow_loads(monkeypatch, 0.05)
    answers = []

    def client(i: int) -> None:
        for j in range(6):
            answers.append(c.post(f"/v1/models/tiny-{'bc'[(i + j) % 2]}/predict", json=TEXT).status_code)

    clients = [threading.Thread(target=client, args=(i,)) for i in range(6)]
    for t in clients:
        t.start()
    for t in clients:
        t.join(120)
    assert answers == [200] * 36
    loads = series(c, "xtag_model_loads_total")
    assert series(c, "xtag_model_load_wait_seconds_count")["tiny-b"] >= 1 and loads["tiny-b"] >= 1
    assert c.app.state.lazy.in_flight == {"tiny-b": 0, "tiny-c": 0} and not c.app.state.lazy.draining
