"""LaMP over a first stage with the label-text stage (a fused bundle): it re-ranks the fused shortlist, which can
hold a label no training document carries; each cross-fitting fold retrains XR-Linear + the stage with the
documents' ids; the bundle keeps the first stage's label texts and serves torch-free; filters and the related
labels work through it; lamp.init=text starts those labels from their texts."""

from __future__ import annotations

import json

import numpy as np
import pytest

from tests.conftest import assert_serves_without_torch, lamp_config, train_and_export
from tests.label_text_support import NEW_LABEL, NEW_WORDS, fused_bundle, label_file  # noqa: F401  (fixtures)

TEXTS = [NEW_WORDS, "python module pip interpreter script", "email smtp imap mailbox inbox http server"]


@pytest.fixture(scope="module")
def fused_lamp(corpus_files, fused_bundle, tiny_bert, tmp_path_factory):  # noqa: F811
    """(run, bundle, the document ids each fold copy's fusion fit was given)."""
    from xtag.training.label_text import stage

    own_ids = []

    def recording(doc_ids, names):
        own_ids.append(doc_ids)
        return real(doc_ids, names)

    real = stage.own_columns
    config = lamp_config(
        corpus_files[0], fused_bundle, tiny_bert, heads=2, dim=16, encoder_layers=0, cross_fit=2, init="text"
    )
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(stage, "own_columns", recording)
        run, bundle = train_and_export(config, tmp_path_factory.mktemp("fused-lamp"))
    return run, bundle, own_ids


def test_lamp_reranks_the_fused_shortlist_and_a_label_with_text_alone_comes_out(fused_lamp, fused_bundle):  # noqa: F811
    from xtag.models.bundle.loader import load_bundle
    from xtag.models.label_text.model import FusedModel

    run, bundle, own_ids = fused_lamp
    events = [json.loads(line) for line in (run / "train_log.jsonl").read_text().splitlines()]
    assert [e["held_out"] for e in events if e["event"] == "lamp_cross_fit"] == [200, 200]
    # each fold copy trained XR-Linear + the stage, its fusion fitted with the documents' own ids known
    assert len(own_ids) == 2 and all(ids and set(ids) <= {f"doc{i}" for i in range(400)} for ids in own_ids)
    setup = next(e for e in events if e["event"] == "lamp")
    assert setup["label_init"] == "text" and setup["labels_from_text"] == 13 and setup["labels_from_name"] == 0

    lamp, first = load_bundle(bundle).predictor, load_bundle(fused_bundle).predictor
    assert isinstance(lamp.model.first.model, FusedModel) and lamp.n_labels == first.n_labels == 13
    assert lamp.vocab.names == first.vocab.names and lamp.label_texts.get(NEW_LABEL).description == NEW_WORDS
    astro = lamp.vocab.index[NEW_LABEL]
    plain, alone = lamp.predict(TEXTS, k=5, rerank=False), first.predict(TEXTS, k=5)
    assert np.array_equal(plain.labels, alone.labels)
    reranked = lamp.predict(TEXTS, k=3)
    assert reranked.labels[0, 0] == astro  # no training document carries it: its text found it, LaMP kept it
    candidates = first.predict(TEXTS, k=6, calibrated=False).labels
    for row, cand in zip(reranked.labels, candidates):
        assert set(row[row >= 0]) <= set(cand)


def test_lamp_over_a_fused_first_stage_serves_without_torch_and_its_threads_do_not_spin(fused_lamp):
    """Between two re-ranker runs the stage's encoder and index search run on the same cores: its onnxruntime
    threads sleep after each run instead of spinning (models/lamp/loaders.py)."""
    from xtag.models.bundle.loader import load_bundle

    options = load_bundle(fused_lamp[1]).predictor.model.reranker.onnx.session.get_session_options()
    assert options.get_session_config_entry("session.intra_op.allow_spinning") == "0"
    assert_serves_without_torch(fused_lamp[1], TEXTS)


def test_filters_and_related_labels_work_through_lamp_over_a_fused_first_stage(fused_lamp):
    from fastapi.testclient import TestClient
    from xtag.config.settings import Settings
    from xtag.models.bundle.loader import load_bundle
    from xtag.models.inference.label_filter import self_filters
    from xtag.service.app import create_app

    from tests.service.svc_support import wait_ready

    bundle = fused_lamp[1]
    predictor = load_bundle(bundle).predictor
    astro = predictor.vocab.index[NEW_LABEL]
    own = predictor.predict(TEXTS[:1], k=3, filters=self_filters([NEW_LABEL], predictor.vocab))  # --exclude-self
    assert astro not in own.labels[0] and (own.labels[0] >= 0).all()
    with TestClient(create_app(Settings(_env_file=None, bundle=bundle))) as client:
        wait_ready(client)
        ask = lambda **body: client.post("/v1/predict", json={"text": TEXTS[0], "k": 3, **body})  # noqa: E731
        assert ask().json()["labels"][0]["id"] == astro
        assert astro not in [g["id"] for g in ask(exclude=[NEW_LABEL]).json()["labels"]]
        assert [g["id"] for g in ask(include=[NEW_LABEL, "lang::c"]).json()["labels"]][0] == astro
        related = client.get(f"/v1/labels/{astro}/related", params={"k": 3})
        assert related.status_code == 200 and len(related.json()["related"]) == 3
