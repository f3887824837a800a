"""LaMP as a second stage: candidate construction with teacher forcing, the LaMP_pr masks, the intermediate
loss, training + export through the public API (ONNX parity), torch-free serving, and rerank=false."""

import json

import numpy as np
import pytest
import scipy.sparse as sp
from xtag.models.errors import XtagError

from tests.conftest import assert_serves_without_torch, lamp_config, train_and_export

TEXTS = [
    "shooter weapons arena frag multiplayer",
    "python module pip interpreter script",
    "email smtp imap mailbox inbox http server",
]


def test_teacher_forcing_puts_missed_true_labels_in_place_of_the_lowest_candidates():
    from xtag.training.lamp.candidates import teacher_forced

    labels = np.array([[4, 2, 7, 1], [3, 5, -1, -1]])
    scores = np.array([[0.9, 0.5, 0.4, 0.1], [0.8, 0.3, -np.inf, -np.inf]], dtype=np.float32)
    cand = teacher_forced(labels, scores, [np.array([2, 9]), np.array([3, 6, 8])])
    # row 0: 9 was missed, it replaces the last non-true candidate (1) and takes the row's lowest score
    assert cand.labels[0].tolist() == [4, 2, 7, 9] and cand.scores[0, 3] == pytest.approx(0.1)
    assert cand.y[0].tolist() == [0, 1, 0, 1]
    # row 1: 6 and 8 fill the padding, 3 (found) keeps its place; they take the lowest real score
    assert cand.labels[1].tolist() == [3, 5, 6, 8] and cand.scores[1, 2:].tolist() == pytest.approx([0.3, 0.3])
    assert cand.y[1].tolist() == [1, 0, 1, 1]
    assert cand.forced == 3 and cand.positives == 5
    assert labels[0, 3] == 1  # the first stage's arrays are not modified

    plain = teacher_forced(labels, scores, [np.array([2, 9]), np.array([3, 6, 8])], force=False)
    assert plain.labels.tolist() == labels.tolist()  # lamp.teacher_forcing=false: the top-C as given
    assert plain.y.tolist() == [[0, 1, 0, 0], [1, 0, 0, 0]]
    assert (plain.forced, plain.missed, plain.positives) == (0, 3, 5)


def test_first_stage_label_space_drops_labels_it_does_not_know():
    from xtag.training.lamp.candidates import first_stage_labels

    Y = sp.csr_matrix(np.array([[1, 0, 1], [0, 1, 1]], dtype=np.float32))
    mapped, dropped = first_stage_labels(Y, ["a", "b", "c"], {"c": 0, "a": 2}, 3)
    assert mapped.toarray().tolist() == [[1, 0, 1], [1, 0, 0]] and dropped == 1


def test_pr_mask_lets_only_cooccurring_real_candidates_pass_messages():
    from xtag.models.lamp.masks import cooccurrence_codes, label_mask

    Y = sp.csr_matrix(np.array([[1, 1, 0, 0], [0, 1, 1, 0], [0, 0, 0, 1]], dtype=np.float32))
    codes = cooccurrence_codes(Y)  # pairs {0,1}, {1,2}; label 3 co-occurs with nothing
    cands, valid = np.array([[0, 1, 2, 3, 0]]), np.array([[1, 1, 1, 1, 0]], dtype=np.float32)
    pr = label_mask(cands, valid, codes, 4)[0]
    assert pr.tolist() == [
        [1, 1, 0, 0, 0],
        [1, 1, 1, 0, 0],
        [0, 1, 1, 0, 0],
        [0, 0, 0, 1, 0],
        [0, 1, 0, 0, 1],  # a padded node's row: ignored, never empty; no real node attends to it
    ]
    fc = label_mask(cands, valid, None, 4)[0]
    assert fc[:4, :4].all() and not fc[:4, 4].any()


def test_intermediate_readouts_add_lambda_weighted_bce():
    import torch
    import torch.nn.functional as F
    from xtag.training.lamp.train import lamp_loss

    y = torch.tensor([[1.0, 0.0, 1.0]])
    valid = torch.tensor([[1.0, 1.0, 0.0]])  # the padded third candidate does not count
    final, mid = torch.tensor([[2.0, -1.0, 5.0]]), torch.tensor([[0.5, 0.5, -9.0]])
    bce = lambda z: F.binary_cross_entropy_with_logits(z[:, :2], y[:, :2])  # noqa: E731
    assert float(lamp_loss([final], y, valid, 0.7)) == pytest.approx(float(bce(final)))
    got = float(lamp_loss([mid, mid, final], y, valid, 0.7))
    assert got == pytest.approx(float(bce(final) + 0.7 * 2 * bce(mid)), rel=1e-6)


def test_net_masks_attention_as_the_label_graph_says():
    """A node's update ignores candidates it may not attend to: changing them leaves its logit unchanged."""
    import torch
    from xtag.training.lamp.net import LampHead

    torch.manual_seed(0)
    torch.set_grad_enabled(False)
    head = LampHead(6, 8, 8, 2, 2, 2, 0.0).eval()
    states, attention = torch.randn(1, 4, 8), torch.ones(1, 4, dtype=torch.int64)
    mask = torch.eye(3)[None]  # nobody talks to anybody
    a = head(states, attention, torch.tensor([[0, 1, 2]]), torch.tensor([[0.9, 0.5, 0.1]]), mask)[-1]
    b = head(states, attention, torch.tensor([[0, 4, 5]]), torch.tensor([[0.9, 0.2, 0.3]]), mask)[-1]
    assert float(a[0, 0]) == pytest.approx(float(b[0, 0]), abs=1e-6)
    full = head(states, attention, torch.tensor([[0, 4, 5]]), torch.tensor([[0.9, 0.2, 0.3]]), torch.ones(1, 3, 3))
    assert abs(float(full[-1][0, 0] - a[0, 0])) > 1e-4
    assert len(head(states, attention, torch.tensor([[0, 1, 2]]), torch.tensor([[0.9, 0.5, 0.1]]), mask)) == 4
    torch.set_grad_enabled(True)


def test_training_logs_teacher_forcing_and_export_passes_parity(lamp_bundle):
    run, bundle = lamp_bundle
    events = [json.loads(line) for line in (run / "train_log.jsonl").read_text().splitlines()]
    cand = next(e for e in events if e["event"] == "lamp_candidates")
    assert cand["candidates"] == 6 and 0 <= cand["teacher_forced"] <= cand["positives"]
    assert cand["first_stage_recall"] == pytest.approx(1 - cand["teacher_forced"] / cand["positives"], abs=1e-4)
    manifest = json.loads((bundle / "manifest.json").read_text())
    assert [c["type"] for c in manifest["components"]] == ["first-stage", "lamp-reranker"]
    report = manifest["export"]
    for output in ("logits", "token_attention", "label_attention"):  # the explanations' outputs are gated too
        assert report["parity"][output]["max_abs_diff"] <= report["parity_tolerance"]
    assert report["top5_agreement_vs_torch"] == pytest.approx(1.0)


def test_export_parity_gate_compares_the_attention_outputs(lamp_bundle):
    """The exported graph's attention weights are the torch net's, within the tolerance, and a graph whose
    attention differed would be refused: the gate reads every output."""
    from xtag.models.bundle.loader import load_bundle
    from xtag.training.config import TrainConfig
    from xtag.training.lamp.export import onnx_outputs, real_candidates, torch_outputs
    from xtag.training.lamp.result import LAMP_NET
    from xtag.training.onnx.parity import parity_gate

    run, bundle = lamp_bundle
    reranker = load_bundle(bundle).predictor.model.reranker
    first = load_bundle(bundle / "first_stage").predictor
    cand = first.predict(TEXTS, k=reranker.config.candidates, calibrated=False)
    net, _ = LAMP_NET.load_run_net(run / "model" / "encoder")
    valid = cand.labels >= 0
    want = real_candidates(torch_outputs(net, reranker, TEXTS, cand.labels, cand.scores), valid)
    got = real_candidates(onnx_outputs(reranker, TEXTS, cand.labels, cand.scores), valid)
    config = TrainConfig.load(run / "config.json").lamp.export
    report = parity_gate(config, len(TEXTS), got, want)
    assert report["parity"]["token_attention"]["max_abs_diff"] <= config.parity_tolerance
    assert got["token_attention"].shape[:2] == cand.labels.shape and got["label_attention"].shape[1:] == (6, 6)
    got["label_attention"] = got["label_attention"][:, ::-1]  # candidates' attention given to the wrong rows
    with pytest.raises(XtagError, match="refusing to export"):
        parity_gate(config, len(TEXTS), got, want)


def test_rerank_false_is_the_first_stage_and_rerank_reorders_its_candidates(lamp_bundle, tiny_bundle):
    from xtag.models.bundle.loader import load_bundle

    lamp, first = load_bundle(lamp_bundle[1]).predictor, load_bundle(tiny_bundle).predictor
    plain, alone = lamp.predict(TEXTS, k=5, rerank=False), first.predict(TEXTS, k=5)
    assert np.array_equal(plain.labels, alone.labels) and np.array_equal(plain.scores, alone.scores)
    reranked = lamp.predict(TEXTS, k=5)
    candidates = first.predict(TEXTS, k=6, calibrated=False).labels
    for row, cand in zip(reranked.labels, candidates):
        assert set(row[row >= 0]) <= set(cand)  # LaMP only re-scores the first stage's top-C
    assert ((reranked.scores > 0) & (reranked.scores < 1)).all()
    assert (np.diff(reranked.scores, axis=1) <= 0).all()


def test_lamp_bundle_serves_without_torch(lamp_bundle):
    assert_serves_without_torch(lamp_bundle[1], TEXTS)


def test_predict_endpoint_reranks_unless_the_request_says_rerank_false(lamp_bundle, tiny_bundle):
    from fastapi.testclient import TestClient
    from xtag.config.settings import Settings
    from xtag.models.bundle.loader import load_bundle
    from xtag.service.app import create_app

    from tests.service.svc_support import wait_ready

    first = load_bundle(tiny_bundle).predictor.predict(TEXTS[:1], k=3)
    lamp = load_bundle(lamp_bundle[1]).predictor.predict(TEXTS[:1], k=3)
    with TestClient(create_app(Settings(_env_file=None, bundle=lamp_bundle[1]))) as client:
        wait_ready(client)
        for body, want in (({"rerank": False}, first), ({}, lamp), ({"rerank": True}, lamp)):
            got = client.post("/v1/predict", json={"text": TEXTS[0], "k": 3, **body}).json()["labels"]
            assert [g["id"] for g in got] == want.labels[0].tolist()
            assert [g["score"] for g in got] == pytest.approx(want.scores[0].tolist(), abs=1e-6)
        batch = client.post("/v1/predict/batch", json={"documents": [{"text": TEXTS[0]}], "k": 3, "rerank": False})
        assert [g["id"] for g in batch.json()["results"][0]["labels"]] == first.labels[0].tolist()


def test_zero_encoder_layers_reads_the_token_embeddings_and_exports_with_parity(
    corpus_files, tiny_bundle, tiny_bert, tmp_path
):
    """lamp.encoder_layers=0: no contextual layer (the CPU-cheap re-ranker); it trains, passes the export's
    parity gate and serves, and its saved encoder has no layer left."""
    from xtag.models.bundle.loader import load_bundle

    config = lamp_config(
        corpus_files[0], tiny_bundle, tiny_bert, heads=2, dim=16, encoder_layers=0, teacher_forcing=False
    )
    run, bundle = train_and_export(config, tmp_path)
    events = [json.loads(line) for line in (run / "train_log.jsonl").read_text().splitlines()]
    assert next(e for e in events if e["event"] == "lamp")["encoder_layers"] == 0
    cand = next(e for e in events if e["event"] == "lamp_candidates")
    assert cand["teacher_forced"] == 0
    report = json.loads((bundle / "manifest.json").read_text())["export"]
    assert report["parity"]["logits"]["max_abs_diff"] <= report["parity_tolerance"]
    preds = load_bundle(bundle).predictor.predict(["a tiny text about nothing"], k=3)
    assert preds.labels.shape == (1, 3)


def test_cross_fit_candidates_map_into_the_first_stage_label_space_in_order():
    from xtag.training.lamp.cross_fit import fold_of
    from xtag.training.lamp.fold_copy import in_label_space

    labels = np.array([[2, 0, 1], [1, -1, -1]])
    scores = np.array([[0.9, 0.5, 0.2], [0.7, -np.inf, -np.inf]], dtype=np.float32)
    got_labels, got_scores = in_label_space(labels, scores, ["a", "new", "c"], {"c": 0, "a": 5})
    # "new" is unknown to the first stage: dropped, the rest keep their order, padding goes last
    assert got_labels.tolist() == [[0, 5, -1], [-1, -1, -1]]
    np.testing.assert_allclose(got_scores, [[0.9, 0.5, 0.0], [0.0, 0.0, 0.0]], rtol=1e-6)
    fold = fold_of(11, 3, seed=4)
    assert sorted(np.bincount(fold).tolist()) == [3, 4, 4] and fold.tolist() == fold_of(11, 3, seed=4).tolist()


def test_cross_fit_defaults_to_five_folds_for_a_first_stage_without_a_transformer():
    from pydantic import ValidationError
    from xtag.training.lamp.config import LampConfig
    from xtag.training.lamp.cross_fit import cross_fit_folds

    assert cross_fit_folds(LampConfig(), "xlinear") == 5
    assert cross_fit_folds(LampConfig(), "xr-transformer") == 0  # every fold would be a fine-tuning
    assert cross_fit_folds(LampConfig(cross_fit=0), "xlinear") == 0
    assert cross_fit_folds(LampConfig(cross_fit=3), "cascadexml") == 3
    with pytest.raises(ValidationError, match="at least 2 folds"):
        LampConfig(cross_fit=1)


def test_cross_fit_candidates_come_from_a_first_stage_that_never_saw_the_text(
    corpus_files, tiny_bundle, tiny_bert, tmp_path
):
    """lamp.cross_fit=2: each text's training candidates are those of the first stage's config retrained on the
    other fold (so equal to such a model trained independently), the fold runs are deleted once their
    candidates are saved, and a resumed run reuses the saved candidates."""
    from xtag.corpus.files import load_corpus
    from xtag.models.bundle.loader import load_bundle
    from xtag.training.config import TrainConfig
    from xtag.training.export.export_run import export_run
    from xtag.training.lamp.cross_fit import fold_of
    from xtag.training.run import train_run

    config = lamp_config(
        corpus_files[0], tiny_bundle, tiny_bert, heads=2, dim=16, encoder_layers=0, epochs=1, cross_fit=2
    )
    run, bundle = train_and_export(config, tmp_path / "lamp")
    events = [json.loads(line) for line in (run / "train_log.jsonl").read_text().splitlines()]
    folds = [e for e in events if e["event"] == "lamp_cross_fit"]
    corpus = load_corpus(corpus_files[0])
    assert [e["fold"] for e in folds] == [0, 1] and sum(e["held_out"] for e in folds) == len(corpus)
    plan = next(e["message"] for e in events if e["event"] == "lamp_cross_fit_plan")
    assert plan.startswith("lamp.cross_fit=2: 2 copies of the first stage (xlinear), each trained on 50% of the 400")
    assert "so expect about" in plan
    starts = [e["message"] for e in events if e["event"] == "lamp_cross_fit_start"]
    assert len(starts) == 2 and starts[0].startswith("fold 1/2: training a copy of the first stage (xlinear)")
    assert next(e for e in events if e["event"] == "lamp_candidates")["cross_fit_folds"] == 2
    saved = run / "checkpoints" / "lamp" / "folds"
    assert sorted(p.name for p in saved.iterdir()) == ["0.npz", "1.npz"]  # fold runs deleted

    # fold 0's candidates = the first stage's config trained on fold 1 alone, asked for fold 0's texts
    held = np.flatnonzero(fold_of(len(corpus), 2, config.lamp.seed) == 0)
    rows = corpus_files[0].read_text().splitlines()
    other = tmp_path / "other.jsonl"
    other.write_text("".join(rows[i] + "\n" for i in range(len(rows)) if i not in set(held.tolist())))
    first = load_bundle(tiny_bundle)
    manual = TrainConfig.model_validate({**first.manifest["training"]["config"], "corpus": other})
    train_run(manual, tmp_path / "manual" / "run", progress=False)
    export_run(tmp_path / "manual" / "run", tmp_path / "manual" / "bundle")
    model = load_bundle(tmp_path / "manual" / "bundle")
    preds = model.predictor.predict([corpus.texts[i] for i in held], k=6, calibrated=False)
    with np.load(saved / "0.npz") as z:
        names = first.predictor.vocab.names
        got = [[names[j] for j in row if j >= 0] for row in z["labels"]]
        assert got == [[model.predictor.vocab.names[j] for j in row if j >= 0] for row in preds.labels]
        out_of_fold_top1 = z["scores"][:, 0].mean()
    # the reason for it all: the first stage is more confident on texts it was trained on
    own = first.predictor.predict([corpus.texts[i] for i in held], k=6, calibrated=False)
    assert own.scores[:, 0].mean() > out_of_fold_top1

    # resume after the candidates: the folds are reused, not retrained
    import shutil

    shutil.rmtree(run / "model")
    train_run(config, run, resume=True, progress=False)
    events = [json.loads(line) for line in (run / "train_log.jsonl").read_text().splitlines()]
    assert [e["reused"] for e in events if e["event"] == "lamp_cross_fit"][-2:] == [True, True]
    assert len([e for e in events if e["event"] == "lamp_cross_fit_start"]) == 2  # none for the reused folds


def test_cross_fit_retrains_a_first_stage_read_from_an_annif_tsv_corpus(tmp_path):
    """The fold corpora are JSONL whatever format the first stage was trained from (its recorded config says tsv)."""
    from xtag.models.bundle.loader import load_bundle
    from xtag.models.features.tfidf import TfidfConfig
    from xtag.training.config import TrainConfig
    from xtag.training.lamp.cross_fit import cross_fitted_topk
    from xtag.training.run import train_and_export as train_and_export_fold
    from xtag.training.tree.build import TreeConfig
    from xtag.training.xlinear.config import XLinearConfig

    from tests.conftest import make_rows

    rows = make_rows(120, seed=5)
    corpus = tmp_path / "train.tsv"
    corpus.write_text("".join(f"{r['text']}\t{' '.join(r['labels'])}\n" for r in rows))
    config = TrainConfig(
        corpus=corpus,
        format="tsv",
        tfidf=TfidfConfig(min_df=1),
        xlinear=XLinearConfig(n_jobs=1, tree=TreeConfig(branching=2, max_leaf_size=4)),
    )
    _, bundle = train_and_export(config, tmp_path / "first")
    first = load_bundle(bundle)
    vocab = first.predictor.vocab
    Y = sp.csr_matrix([[1.0 if name in r["labels"] else 0.0 for name in vocab.names] for r in rows], dtype=np.float32)
    events = []
    texts = [r["text"] for r in rows]
    labels, scores = cross_fitted_topk(
        first, texts, Y, 4, 2, 0, tmp_path / "folds", train_and_export_fold, False, events.append
    )
    assert labels.shape == (120, 4) and (labels[:, 0] >= 0).all()
    assert [e["held_out"] for e in events if e["event"] == "lamp_cross_fit"] == [60, 60]


def test_reranker_threads_do_not_spin_behind_a_first_stage_encoder_session(lamp_bundle):
    """Behind a first stage that runs its own onnxruntime session on the CPU the re-ranker's threads sleep after
    each run (two sessions spinning in turn on the same cores cost 5 ms a text over XR-Transformer); behind
    XR-Linear's engine they keep onnxruntime's default."""
    from xtag.models.bundle.loader import load_bundle
    from xtag.models.bundle.parts import Parts
    from xtag.models.lamp.loaders import _lamp_reranker

    def spinning(model) -> str | None:
        options = model.reranker.onnx.session.get_session_options()
        try:
            return options.get_session_config_entry("session.intra_op.allow_spinning")
        except Exception:  # onnxruntime raises when the entry was never set: its default, spinning
            return None

    bundle = load_bundle(lamp_bundle[1])
    assert spinning(bundle.predictor.model) is None  # tiny XR-Linear first stage
    first = bundle.predictor.model.first
    parts = Parts(model=first, placement={"first-stage/text-encoder": "CPUExecutionProvider"})
    _lamp_reranker(lamp_bundle[1] / "lamp", parts)
    assert spinning(parts.model) == "0"
    assert parts.model.predict(["python module pip"], k=2).labels.shape == (1, 2)


def test_cross_fit_names_the_fix_when_the_recorded_config_cannot_train(tiny_bundle, tmp_path):
    from xtag.models.bundle.loader import load_bundle
    from xtag.training.lamp.cross_fit import cross_fitted_topk
    from xtag.training.run import train_and_export as train_and_export_fold

    first = load_bundle(tiny_bundle)
    first.manifest["training"]["config"]["xlinear"]["C"] = -1.0  # as if written by another version
    Y = sp.csr_matrix((6, len(first.predictor.vocab)), dtype=np.float32)
    with pytest.raises(XtagError, match=r"(?s)lamp.cross_fit: retraining the first stage .* set lamp.cross_fit=0"):
        cross_fitted_topk(
            first, TEXTS * 2, Y, 3, 2, 0, tmp_path / "folds", train_and_export_fold, False, lambda e: None
        )
