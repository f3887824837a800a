"""LightXML bundles: one ONNX graph with parity, label index (numpy = FAISS), service and torch-free serving."""

import json

import numpy as np
import pytest

from tests.conftest import add_drift, assert_serves_without_torch

TEXTS = [
    "shooter weapons arena frag multiplayer",
    "python module pip interpreter script",
    "email smtp imap mailbox inbox http server",
]


def test_bundle_layout_graph_and_parity(lightxml_bundle, corpus_files):
    import onnx
    from xtag.models.lightxml.model import OUTPUTS, LightXMLEncoder
    from xtag.training.lightxml.result import LIGHTXML_NET
    from xtag.training.lightxml.validation import net_outputs

    run, bundle = lightxml_bundle
    manifest = json.loads((bundle / "manifest.json").read_text())
    assert manifest["model_kind"] == "lightxml"
    assert {
        "encoder/model.onnx",
        "encoder/tokenizer.json",
        "encoder/config.json",
        "tree/chain.npz",
        "lightxml/config.json",
        "lightxml/label_embeddings.npy",
        "labels.json",
    } <= set(manifest["files"])
    assert not any(f.startswith("features/") or f.endswith((".pkl", ".pt", ".bin")) for f in manifest["files"])
    report = manifest["export"]
    assert all(report["parity"][o]["max_abs_diff"] <= 1e-4 for o in OUTPUTS) and report["opset"] == 18
    graph = onnx.load(str(bundle / "encoder" / "model.onnx")).graph
    assert [o.name for o in graph.output] == list(OUTPUTS) and [i.name for i in graph.input] == [
        "input_ids",
        "attention_mask",
    ]
    for value in graph.input:
        dims = value.type.tensor_type.shape.dim
        assert dims[0].dim_param and dims[1].dim_param, f"{value.name} has a fixed batch or sequence axis"
    texts = [json.loads(line)["text"] for line in corpus_files[1].read_text().splitlines()][:40]
    onnx_out = LightXMLEncoder.load(bundle / "encoder").transform(texts)
    net, _ = LIGHTXML_NET.load_run_net(run / "model" / "encoder")
    import torch

    ref = net_outputs(net, LightXMLEncoder.load(bundle / "encoder").onnx.tokenizer, texts, torch.device("cpu"), False)
    for name in OUTPUTS:
        assert np.abs(getattr(onnx_out, name) - getattr(ref, name)).max() <= 1e-4, name
    single = LightXMLEncoder.load(bundle / "encoder").transform(texts[:1])  # unpadded single text = batch row
    assert np.abs(single.cluster_scores - ref.cluster_scores[:1]).max() <= 1e-4


def test_export_refuses_a_graph_that_drifts_from_torch(lightxml_bundle, tmp_path, monkeypatch):
    import xtag.training.onnx.graph as lightxml_export
    from xtag.models.errors import XtagError
    from xtag.training.export.export_run import export_run

    run, bundle = lightxml_bundle

    def drifting_export(module, ids, mask, path, opset, output_names):  # the real graph, plus 0.01 on the scores
        add_drift(bundle / "encoder" / "model.onnx", path, "cluster_scores", 0.01)

    monkeypatch.setattr(lightxml_export, "export_graph", drifting_export)
    with pytest.raises(XtagError, match="differs from torch by 0.01"):
        export_run(run, tmp_path / "bundle")
    assert not (tmp_path / "bundle").exists()


def test_faiss_label_index_scores_like_numpy():
    from xtag.models.label_tree import ClusterChain
    from xtag.models.lightxml.label_index import LabelIndex
    from xtag.models.lightxml.model import LightXMLHeadConfig, LightXMLModel, LightXMLOutputs

    rng = np.random.default_rng(3)
    L, K, dim = 60, 12, 8
    chain = ClusterChain(ptrs=[np.array([0, K]), np.arange(0, L + 1, L // K)], leaf_labels=rng.permutation(L))
    E = rng.normal(size=(L, dim)).astype(np.float32)
    h = rng.normal(size=(7, dim)).astype(np.float32)
    labels = rng.integers(0, L, size=(7, 15))
    assert np.allclose(LabelIndex(E, use_faiss=True).scores(h, labels), LabelIndex(E).scores(h, labels), atol=1e-5)
    out = LightXMLOutputs(rng.normal(size=(7, K)).astype(np.float32), h)
    plain = LightXMLModel(chain, E, LightXMLHeadConfig(beam_size=3, n_clusters=K, n_labels=L, dim=dim))
    faiss = LightXMLModel(
        chain, E, LightXMLHeadConfig(beam_size=3, n_clusters=K, n_labels=L, dim=dim, faiss_min_labels=L)
    )
    assert faiss.labels.index is not None and plain.labels.index is None
    a, b = plain.predict(out, k=6), faiss.predict(out, k=6)
    assert np.array_equal(a.labels, b.labels) and np.allclose(a.scores, b.scores, atol=1e-6)
    cand, _ = plain.candidates(out.cluster_scores, 4)
    for row in cand:  # candidates are de-duplicated: labels of distinct clusters
        assert len(set(row[row >= 0])) == len(row[row >= 0]) == 4 * (L // K)
    assert (a.scores[:, :-1] >= a.scores[:, 1:]).all() and (a.scores <= 1).all() and (a.scores > 0).all()


def test_service_serves_lightxml_like_the_predictor(lightxml_bundle):
    from fastapi.testclient import TestClient
    from xtag.config.settings import Settings
    from xtag.models.bundle.loader import load_bundle
    from xtag.models.inference.reweighting import gains_for, label_weights, predict_reweighted
    from xtag.service.app import create_app

    _, bundle = lightxml_bundle
    b = load_bundle(bundle)
    with TestClient(create_app(Settings(_env_file=None, bundle=bundle))) as client:
        for _ in range(200):
            if client.get("/ready").status_code == 200:
                break
            import time

            time.sleep(0.05)
        assert client.get("/ready").status_code == 200
        expected = b.predictor.named(b.predictor.predict(TEXTS, k=3))
        single = client.post("/v1/predict", json={"text": TEXTS[0], "k": 3}).json()["labels"]
        assert [(x["id"], x["name"]) for x in single] == [(i, n) for i, n, _ in expected[0]]
        assert np.allclose([x["score"] for x in single], [s for _, _, s in expected[0]], atol=1e-6)
        docs = [{"id": f"d{i}", "text": t} for i, t in enumerate(TEXTS)]
        batch = client.post("/v1/predict/batch", json={"documents": docs, "k": 3}).json()["results"]
        assert [[x["id"] for x in r["labels"]] for r in batch] == [[i for i, _, _ in row] for row in expected]
        rw = {"scheme": "macro-recall", "alpha": 0.7}
        got = client.post("/v1/predict/batch", json={"documents": docs, "k": 3, "reweight": rw}).json()["results"]
        vocab = b.predictor.vocab
        a = gains_for(label_weights(vocab.frequency_array, vocab.n_train_docs, "macro-recall"), 0.7)
        ref = predict_reweighted(b.predictor, TEXTS, 3, a, b.predictor.model.config.beam_size, len(vocab))
        assert [[x["id"] for x in r["labels"]] for r in got] == [[j for j in row if j >= 0] for row in ref.labels]
        model = client.get("/v1/model").json()
        assert model["kind"] == "lightxml" and model["label_count"] == 12 and model["default_beam_size"] == 2


def test_lightxml_bundle_serves_with_torch_unimportable(lightxml_bundle):
    _, bundle = lightxml_bundle
    assert_serves_without_torch(bundle, TEXTS)
