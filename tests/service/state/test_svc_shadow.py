"""Shadow scoring (service/state/shadow.py): a second model scores the primary's requests after they were answered,
bounded (a slow shadow sheds), never changing the primary's answer, and exported as agreement and live P@k."""

from __future__ import annotations

import json
import logging
import os
import threading
import time

import httpx
import numpy as np
import pytest
import scipy.sparse as sp
from prometheus_client.parser import text_string_to_metric_families
from typer.testing import CliRunner
from xtag.config.settings import Settings
from xtag.models.metrics import evaluate
from xtag.service.observability.agreement import AgreementWindow, compare, rank_correlation
from xtag.service.state import shadow as shadow_module
from xtag.service.state.model_slot import ServedModel, load_and_warm

from tests.service.svc_support import ADMIN, ADMIN_KEY, LiveServer, bundles, make_client, tiny_corpus, wait_ready  # noqa: F401
from xtag.cli import app as cli
from xtag.cli.shadow import pairs_from_metrics, render

DOCS = tiny_corpus()[:24]


def with_shadow(c, model: ServedModel):
    """Declare `model` the shadow of the served tiny-a (as the models configuration does)."""
    scorer = shadow_module.declare(c.app, "tiny-a", model.bundle.name, lambda: model)
    c.app.state.registry.current.shadow = scorer
    return scorer


def wait_for(condition, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.01)


def series(text: str, name: str) -> dict[tuple, float]:
    return {
        tuple(sorted(s.labels.items())): s.value
        for f in text_string_to_metric_families(text)
        for s in f.samples
        if s.name == name
    }


def test_agreement_figures_of_two_lists():
    assert compare(["a", "b", "c"], ["a", "b", "c"], 3) == (True, 1.0, 1.0)
    assert compare(["a", "b", "c"], ["c", "b", "a"], 3) == (False, 1.0, -1.0)
    top1, overlap, tau = compare(["a", "b", "c"], ["a", "x", "y"], 3)
    assert top1 and overlap == pytest.approx(1 / 3) and -1 < tau < 1
    w = AgreementWindow(capacity=2)
    for row in (["a"], ["b"]), (["a"], ["a"]), (["c"], ["c"]):
        w.add(None, *row, 1)
    assert w.means()["top1_agreement"] == 1.0 and w.means()["window_documents"] == 2  # the first one fell out


def test_rank_correlation_is_scipys_kendall_tau_b_over_the_lists_union():
    from scipy.stats import kendalltau

    rng = np.random.default_rng(0)
    names = [f"l{i}" for i in range(12)]
    for _ in range(200):
        k = int(rng.integers(1, 10))
        a, b = (list(rng.choice(names, size=k, replace=False)) for _ in range(2))
        union = list(dict.fromkeys(a + b))
        if len(union) < 2:
            continue
        rank = [[lst.index(n) if n in lst else len(lst) for n in union] for lst in (a, b)]
        want = kendalltau(*rank).statistic
        assert rank_correlation(a, b) == pytest.approx(1.0 if np.isnan(want) else want, abs=1e-12)


def test_a_shadow_scores_every_request_after_it_and_exports_agreement(make_client, bundles):
    c = make_client()
    other = load_and_warm(bundles["b"], "warm up")
    scorer = with_shadow(c, other)
    answers = []
    for d in DOCS:
        r = c.post("/v1/predict", json={"text": d["text"], "k": 3})
        assert r.status_code == 200
        answers.append([x["name"] for x in r.json()["labels"]])
    wait_for(lambda: scorer.counts["documents"] == len(DOCS))
    expected = AgreementWindow(100)
    for d, mine in zip(DOCS, answers):
        theirs = [other.names[j] for j in other.predict([d["text"]], 3, None, None).labels[0] if j >= 0]
        expected.add(None, mine, theirs, 3)
    got = c.get("/v1/shadow").json()["pairs"]
    assert len(got) == 1 and got[0]["model"] == "tiny-a" and got[0]["shadow"] == "tiny-b"
    want = expected.means()
    for key in ("top1_agreement", "overlap_at_k", "rank_correlation"):
        assert got[0][key] == want[key]
    assert 0 < want["overlap_at_k"] < 1  # two different models: the numbers say something
    pair = (("model", "tiny-a"), ("shadow", "tiny-b"))
    metrics = c.get("/metrics").text
    assert series(metrics, "xtag_shadow_documents_total")[pair] == len(DOCS)
    assert series(metrics, "xtag_shadow_top1_agreement")[pair] == pytest.approx(want["top1_agreement"])
    assert series(metrics, "xtag_shadow_overlap_at_k")[pair] == pytest.approx(want["overlap_at_k"])
    assert series(metrics, "xtag_shadow_rank_correlation")[pair] == pytest.approx(want["rank_correlation"])


def test_a_slow_shadow_sheds_work_instead_of_queueing(make_client, bundles, monkeypatch):
    c = make_client(shadow_queue=2)
    other = load_and_warm(bundles["b"], "warm up")
    scorer = with_shadow(c, other)
    entered, release = threading.Event(), threading.Event()
    slow_predict = other.predict

    def slow(*args, **kwargs):
        entered.set()
        release.wait(30)
        return slow_predict(*args, **kwargs)

    monkeypatch.setattr(other, "predict", slow)
    body = {"documents": [{"text": DOCS[0]["text"]}], "k": 2}
    assert c.post("/v1/predict/batch", json=body).status_code == 200
    assert entered.wait(30)  # the shadow now scores that one request, and takes long
    for d in DOCS[1:11]:
        start = time.perf_counter()
        assert c.post("/v1/predict/batch", json={"documents": [{"text": d["text"]}], "k": 2}).status_code == 200
        assert time.perf_counter() - start < 5  # the primary never waits for its shadow
    # two wait in the queue (XTAG_SHADOW_QUEUE=2), the other eight are shed, none queues beyond
    assert scorer.queue.qsize() == 2 and scorer.counts["shed_documents"] == 8
    release.set()
    wait_for(lambda: scorer.counts["documents"] == 3)  # every document not shed is compared
    pair = (("model", "tiny-a"), ("shadow", "tiny-b"))
    assert series(c.get("/metrics").text, "xtag_shadow_shed_documents_total")[pair] == 8


def test_a_failing_or_stuck_shadow_leaves_the_primary_unchanged_and_is_counted(make_client, bundles, monkeypatch):
    c = make_client(shadow_timeout_s=0.2)
    plain = c.post("/v1/predict", json={"text": "python script module", "k": 3}).json()["labels"]
    other = load_and_warm(bundles["b"], "warm up")
    scorer = with_shadow(c, other)

    def broken(*args, **kwargs):
        raise RuntimeError("shadow exploded")

    monkeypatch.setattr(other, "predict", broken)
    r = c.post("/v1/predict", json={"text": "python script module", "k": 3})
    assert r.status_code == 200 and r.json()["labels"] == plain
    wait_for(lambda: scorer.counts["errors"] == 1)
    stuck = threading.Event()
    monkeypatch.setattr(other, "predict", lambda *a, **kw: stuck.wait(30))
    r = c.post("/v1/predict", json={"text": "python script module", "k": 3})
    assert r.status_code == 200 and r.json()["labels"] == plain
    wait_for(lambda: scorer.counts["errors"] == 2)  # the timeout, not the end of the call
    stuck.set()
    errors = series(c.get("/metrics").text, "xtag_shadow_errors_total")
    assert errors[(("model", "tiny-a"), ("shadow", "tiny-b"))] == 2
    assert scorer.counts["documents"] == 0


def test_a_shadow_that_is_not_served_is_logged_once_and_counted_not_per_batch(make_client, bundles, caplog):
    c = make_client()
    other = load_and_warm(bundles["b"], "warm up")
    now: list[ServedModel | None] = [None]  # the shadow as served: not at first (loading, failed or unloaded)
    scorer = shadow_module.declare(c.app, "tiny-a", "tiny-b", lambda: now[0])
    c.app.state.registry.current.shadow = scorer
    said = lambda: [r for r in caplog.records if "tiny-b of tiny-a is not served" in r.getMessage()]  # noqa: E731
    with caplog.at_level(logging.WARNING, logger="xtag.service"):
        for i in range(3):  # three batches: each request waits until the one before was handled
            assert c.post("/v1/predict", json={"text": "python script", "k": 3}).status_code == 200
            wait_for(lambda i=i: scorer.counts["unserved_documents"] == i + 1)
        assert len(said()) == 1 and scorer.counts["errors"] == 0
        pair = (("model", "tiny-a"), ("shadow", "tiny-b"))
        metrics = c.get("/metrics").text
        assert series(metrics, "xtag_shadow_unserved_documents_total")[pair] == 3
        assert "0 shed, 3 while the shadow was not served, 0 errors" in render(pairs_from_metrics(metrics)[0])
        now[0] = other  # served again: compared; a later absence is said again, once
        assert c.post("/v1/predict", json={"text": "python script", "k": 3}).status_code == 200
        wait_for(lambda: scorer.counts["documents"] == 1)
        now[0] = None
        for i in range(2):
            assert c.post("/v1/predict", json={"text": "python script", "k": 3}).status_code == 200
            wait_for(lambda i=i: scorer.counts["unserved_documents"] == 4 + i)
        assert len(said()) == 2


def test_live_precision_of_both_models_from_feedback(make_client, bundles, tmp_path):
    c = make_client(admin_key=ADMIN_KEY, feedback_db=str(tmp_path / "fb.sqlite3"))
    other = load_and_warm(bundles["b"], "warm up")
    scorer = with_shadow(c, other)
    docs = [{"id": d["id"], "text": d["text"]} for d in DOCS]
    assert c.post("/v1/predict/batch", json={"documents": docs, "k": 3}).status_code == 200
    assert c.post("/v1/predict/batch", json={"documents": [{"text": "no id: not joined"}], "k": 3}).status_code == 200
    wait_for(lambda: scorer.counts["documents"] == len(DOCS) + 1)
    corrected = DOCS[:12]  # the store holds labels for half of them
    feedback = [{"id": d["id"], "text": d["text"], "labels": d["labels"]} for d in corrected]
    assert c.post("/v1/feedback", json={"documents": feedback}, headers=ADMIN).status_code == 200
    live = c.get("/v1/shadow").json()["pairs"][0]["live"]
    assert live["documents"] == 12
    names = sorted(
        {n for d in corrected for n in d["labels"]} | set(other.names) | set(c.app.state.registry.current.names)
    )
    Y = sp.csr_matrix([[n in d["labels"] for n in names] for d in corrected], dtype=np.float64)
    for model, name in ((c.app.state.registry.current, "tiny-a"), (other, "tiny-b")):
        preds = model.predict([d["text"] for d in corrected], 3, None, None).labels
        pred = np.array([[names.index(model.names[j]) for j in row] for row in preds])
        want = evaluate(pred, Y, (1, 3))
        assert live[name]["P@1"] == pytest.approx(want["P@1"], abs=1e-3)
        assert live[name]["P@3"] == pytest.approx(want["P@3"], abs=1e-3)
    metrics = series(c.get("/metrics").text, "xtag_shadow_live_precision")
    key = (("k", "1"), ("model", "tiny-a"), ("scored", "tiny-b"), ("shadow", "tiny-b"))
    assert metrics[key] == pytest.approx(live["tiny-b"]["P@1"])


def test_shadow_report_prints_the_comparison_from_a_servers_metrics(bundles, tmp_path):
    settings = Settings(_env_file=None, bundle=bundles["a"], admin_key=ADMIN_KEY, feedback_db=str(tmp_path / "f.db"))
    with LiveServer(settings) as server:
        other = load_and_warm(bundles["b"], "warm up")
        scorer = shadow_module.declare(server.app, "tiny-a", "tiny-b", lambda: other)
        server.app.state.registry.current.shadow = scorer
        docs = [{"id": d["id"], "text": d["text"]} for d in DOCS]
        assert httpx.post(server.url + "/v1/predict/batch", json={"documents": docs, "k": 3}).status_code == 200
        wait_for(lambda: scorer.counts["documents"] == len(DOCS))
        feedback = [{"id": d["id"], "text": d["text"], "labels": d["labels"]} for d in DOCS[:6]]
        assert httpx.post(server.url + "/v1/feedback", json={"documents": feedback}, headers=ADMIN).status_code == 200
        expected = httpx.get(server.url + "/v1/shadow").json()["pairs"][0]
        text = CliRunner().invoke(cli, ["shadow", "report", "--url", server.url])
        as_json = CliRunner().invoke(cli, ["shadow", "report", "--url", server.url, "--json"])
    assert text.exit_code == 0, text.output
    assert "tiny-b shadowing tiny-a: 24 documents compared, 0 shed, 0 errors" in text.output
    assert f"top-1 agreement {expected['top1_agreement']:.3f}" in text.output
    assert "live, on 6 documents with feedback: P@1  P@3" in text.output
    row = json.loads(as_json.output)[0]
    assert row["live"]["tiny-b"]["P@1"] == pytest.approx(expected["live"]["tiny-b"]["P@1"])
    assert row["overlap_at_k"] == pytest.approx(expected["overlap_at_k"], abs=1e-4)
    gone = CliRunner().invoke(cli, ["shadow", "report", "--url", server.url])  # the server has stopped
    assert gone.exit_code == 2 and gone.output.startswith("error: ") and "Traceback" not in gone.output


def test_a_shadow_declared_in_the_configuration_scores_every_route_to_its_primary(make_client, bundles):
    """--shadow NEW=OLD (XTAG_SHADOW): requests to OLD on the default and named routes are scored by NEW, requests
    to NEW are not; the shadow reloaded is the one that scores next."""
    c = make_client(models=f"tiny-b={bundles['b']}", shadow="tiny-b=tiny-a", admin_key=ADMIN_KEY)
    wait_ready(c, path="/v1/models/tiny-b/ready")
    scorer = c.app.state.shadows["tiny-a"]
    assert c.app.state.registry.current.shadow is scorer and scorer.shadow == "tiny-b"
    text = {"text": DOCS[0]["text"], "k": 3}
    assert c.post("/v1/predict", json=text).status_code == 200
    assert c.post("/v1/models/tiny-a/predict", json=text).status_code == 200
    assert (
        c.post("/v1/models/tiny-a/predict/batch", json={"documents": [{"text": text["text"]}] * 2, "k": 3}).status_code
        == 200
    )
    assert c.post("/v1/models/tiny-b/predict", json=text).status_code == 200  # the shadow's own traffic
    wait_for(lambda: scorer.counts["documents"] == 4)
    before = c.app.state.registry.slots["tiny-b"].current
    r = c.post("/v1/admin/models/tiny-b/reload", headers=ADMIN)
    assert r.status_code == 200 and c.app.state.registry.slots["tiny-b"].current is not before
    assert c.post("/v1/predict", json=text).status_code == 200
    wait_for(lambda: scorer.counts["documents"] == 5)
    assert scorer.resolve() is c.app.state.registry.slots["tiny-b"].current
    assert c.get("/v1/shadow").json()["pairs"][0]["top1_agreement"] is not None


def test_a_shadow_fraction_samples_documents_by_their_id_and_at_random_without_one():
    keys = [f"doc-{i}" for i in range(20_000)]
    chosen = [shadow_module.sampled(key, 0.25) for key in keys]
    assert chosen == [shadow_module.sampled(key, 0.25) for key in keys]  # the same documents every time
    assert abs(sum(chosen) / len(keys) - 0.25) < 0.01
    assert all(shadow_module.sampled(key, 1.0) for key in keys[:100])
    by_chance = sum(shadow_module.sampled(None, 0.25) for _ in range(20_000)) / 20_000
    assert abs(by_chance - 0.25) < 0.02


def test_a_shadow_at_a_fraction_scores_only_the_sampled_documents(make_client, bundles):
    """XTAG_SHADOW_FRACTION: the documents with an id are scored when their hash falls in the sample, the others
    cost their request nothing; /v1/shadow counts both."""
    c = make_client(
        models=f"tiny-b={bundles['b']}", shadow="tiny-b=tiny-a", shadow_fraction="tiny-b=0.5", admin_key=ADMIN_KEY
    )
    wait_ready(c, path="/v1/models/tiny-b/ready")
    scorer = c.app.state.shadows["tiny-a"]
    assert scorer.fraction == 0.5
    docs = [{"id": d["id"], "text": d["text"]} for d in DOCS]
    wanted = [d for d in docs if shadow_module.sampled(str(d["id"]), 0.5)]
    assert 0 < len(wanted) < len(docs)
    assert c.post("/v1/predict/batch", json={"documents": docs, "k": 3}).status_code == 200
    for d in docs:  # one a request: the unsampled ones make no shadow job at all
        assert c.post("/v1/predict/batch", json={"documents": [d], "k": 3}).status_code == 200
    wait_for(lambda: scorer.counts["documents"] == 2 * len(wanted))
    pair = c.get("/v1/shadow").json()["pairs"][0]
    assert pair["unsampled_documents"] == 2 * (len(docs) - len(wanted)) and pair["documents"] == 2 * len(wanted)
    assert {key for key, *_ in scorer.window.answers} == {str(d["id"]) for d in wanted}


def test_annif_suggestions_of_a_shadowed_project_are_scored_too(make_client, bundles):
    c = make_client(models=f"tiny-b={bundles['b']}", shadow="tiny-b=tiny-a")
    wait_ready(c, path="/v1/models/tiny-b/ready")
    scorer = c.app.state.shadows["tiny-a"]
    form = c.post("/v1/projects/tiny-a/suggest", data={"text": DOCS[0]["text"], "limit": "3"})
    assert form.status_code == 200 and form.json()["results"]
    docs = [{"document_id": d["id"], "text": d["text"]} for d in DOCS[:3]] + [{"text": "  "}]  # a blank one: no answer
    batch = c.post("/v1/projects/tiny-a/suggest-batch", json={"documents": docs})
    assert batch.status_code == 200 and len(batch.json()) == 4
    wait_for(lambda: scorer.counts["documents"] == 4)
    assert [doc_id for doc_id, _, _ in scorer.window.answers] == ["d0", "d1", "d2"]  # ids kept for live P@k


def test_a_shadow_runs_on_one_core_so_its_batches_leave_the_others_to_the_primary(tmp_path):
    from xtag.config.model_set import ModelSet, ModelSpec
    from xtag.models.features.device import RuntimeOptions
    from xtag.service.state.model_repository import ModelRepository

    models = ModelSet(
        models=[ModelSpec(name="old", path=tmp_path / "old"), ModelSpec(name="new", path=tmp_path / "new")],
        default="old",
        shadows={"new": "old"},
    )
    registry = ModelRepository(models, "warm", options=RuntimeOptions(encoder_threads=4))
    assert registry.slots["new"].options.encoder_threads == 1  # its graphs: one intra-op thread
    assert registry.slots["old"].options.encoder_threads == 4  # the primary keeps the configured threads
    assert ModelRepository(models, "warm").slots["new"].options.encoder_threads == 1
    import numba

    seen = {}

    def shadow_thread() -> None:  # a thread of its own: numba's count and the nice value are the thread's
        shadow_module._one_core()
        seen["numba"] = numba.get_num_threads()
        seen["nice"] = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())

    thread = threading.Thread(target=shadow_thread)
    thread.start()
    thread.join()
    # the shadow thread's engine calls: one core's share of numba's threads, at the lowest priority (Linux)
    assert seen["numba"] == max(1, numba.config.NUMBA_NUM_THREADS // (os.cpu_count() or 1))
    assert seen["nice"] == shadow_module.SHADOW_NICE
    assert os.getpriority(os.PRIO_PROCESS, threading.get_native_id()) < shadow_module.SHADOW_NICE  # not this one
