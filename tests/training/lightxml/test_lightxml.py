"""LightXML training: clusters, candidates (eq. 2), learning, dynamic vs static negatives, SWA, resume."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp
from safetensors.numpy import load_file

from tests.conftest import torchrun_launcher, train_command


def test_clusters_are_two_level_and_balanced():
    from xtag.training.lightxml.clusters import label_clusters
    from xtag.training.lightxml.config import LightXMLConfig

    rng = np.random.default_rng(0)
    X = sp.random(200, 50, density=0.1, random_state=rng, format="csr", dtype=np.float32)
    Y = sp.random(200, 37, density=0.1, random_state=rng, format="csr", dtype=np.float32)
    Y.data[:] = 1
    chain = label_clusters(X, Y, LightXMLConfig(encoder=None, cluster_size=5, flat_max_labels=0))
    sizes = np.diff(chain.ptrs[1])
    assert chain.depth == 2 and sizes.max() <= 5 and sizes.min() > 5 / 2 - 1  # recursive 2-means: (C/2, C]
    assert sorted(chain.leaf_labels) == list(range(37))
    flat = label_clusters(X, Y, LightXMLConfig(encoder=None, cluster_size=5, flat_max_labels=100))
    assert flat.level_size(1) == 37 and (np.diff(flat.ptrs[1]) == 1).all()  # small label set: one per cluster


def test_training_adds_true_clusters_and_prediction_does_not():
    from xtag.models.label_tree import ClusterChain
    from xtag.models.lightxml.model import LightXMLHeadConfig, LightXMLModel, cluster_members
    from xtag.training.lightxml.clusters import training_candidates

    chain = ClusterChain(ptrs=[np.array([0, 3]), np.array([0, 2, 4, 6])], leaf_labels=np.array([5, 0, 1, 4, 2, 3]))
    members = cluster_members(chain)  # clusters {5, 0}, {1, 4}, {2, 3}
    scores = np.array([[3.0, 2.0, -5.0]])  # the true cluster (2) is the generator's worst
    labels, valid, y = training_candidates(np.array([[0, 1]]), [np.array([2])], members, [np.array([3])])
    got = set(labels[0][valid[0] > 0])
    assert got == {5, 0, 1, 4, 2, 3} and y[0][list(labels[0]).index(3)] == 1 and y.sum() == 1
    labels, valid, _ = training_candidates(np.array([[2, 0]]), [np.array([2])], members, [np.array([3])])
    assert sorted(labels[0][valid[0] > 0]) == [0, 2, 3, 5]  # a true cluster already on top is not repeated
    model = LightXMLModel(
        chain, np.ones((6, 2), np.float32), LightXMLHeadConfig(beam_size=2, n_clusters=3, n_labels=6, dim=2)
    )
    cand, _ = model.candidates(scores, 2)
    assert set(cand[0][cand[0] >= 0]) == {5, 0, 1, 4}  # at prediction: only the top-b clusters


def test_one_label_per_cluster_ranks_by_the_generator_alone_unless_the_discriminator_is_asked_for():
    """Flat clusters: the discriminator's label scores (here reversing the generator's order) change nothing."""
    from xtag.models.label_tree import ClusterChain
    from xtag.models.lightxml.model import LightXMLHeadConfig, LightXMLModel, LightXMLOutputs

    chain = ClusterChain(ptrs=[np.array([0, 4]), np.arange(5)], leaf_labels=np.arange(4))
    E = np.array([[-9.0], [-3.0], [3.0], [9.0]], np.float32)  # label scores E · h rise with the label id
    out = LightXMLOutputs(np.array([[4.0, 3.0, 2.0, 1.0]], np.float32), np.ones((1, 1), np.float32))
    head = dict(beam_size=4, n_clusters=4, n_labels=4, dim=1)
    alone = LightXMLModel(chain, E, LightXMLHeadConfig(**head, discriminator=False)).predict(out, k=4)
    both = LightXMLModel(chain, E, LightXMLHeadConfig(**head)).predict(out, k=4)
    assert list(alone.labels[0]) == [0, 1, 2, 3] and list(both.labels[0]) == [2, 3, 1, 0]  # σ(g)·σ(d)


@pytest.mark.parametrize("flat_discriminator", [False, True])
def test_flat_clusters_train_the_discriminator_only_when_asked(
    flat_discriminator, corpus_files, tiny_bert, lightxml_config, tmp_path, monkeypatch
):
    from xtag.models.lightxml.model import LightXMLModel
    from xtag.training.run import train_run

    calls = _record_candidates(monkeypatch)
    config = lightxml_config(
        corpus_files[0], tiny_bert, epochs=1, max_steps=3, flat_max_labels=100, val_fraction=0.0, swa_start=1,
        flat_discriminator=flat_discriminator,
    )  # fmt: skip
    train_run(config, tmp_path / "run", progress=False)
    model = LightXMLModel.load(tmp_path / "run" / "model")
    assert model.chain.level_size(1) == model.n_labels  # one label per cluster
    assert model.config.discriminator is flat_discriminator and bool(calls) is flat_discriminator


def _record_candidates(monkeypatch):
    import xtag.training.lightxml.train as lightxml

    calls = []
    real = lightxml.training_candidates

    def spy(top, true_clusters, members, positives):
        out = real(top, true_clusters, members, positives)
        calls.append((np.array(top), [set(t) for t in true_clusters], [set(p) for p in positives], out))
        return out

    monkeypatch.setattr(lightxml, "training_candidates", spy)
    return calls


@pytest.mark.parametrize("negatives", ["dynamic", "static"])
def test_negatives_are_redrawn_every_step_only_when_dynamic(
    negatives, corpus_files, tiny_bert, lightxml_config, tmp_path, monkeypatch
):
    from xtag.training.run import train_run

    calls = _record_candidates(monkeypatch)
    config = lightxml_config(
        corpus_files[0],
        tiny_bert,
        epochs=3,
        negatives=negatives,
        static_warmup=0.34,
        batch_size=400,
        val_fraction=0.0,
        swa_start=3,
    )
    train_run(config, tmp_path / "run", progress=False)
    assert calls, "the discriminator never got candidates"
    for top, _true_clusters, positives, (labels, valid, y) in calls:
        for row in range(len(top)):
            cand = set(labels[row][valid[row] > 0])
            assert positives[row] <= cand  # every positive label is a candidate in training
            assert np.array_equal(
                y[row][valid[row] > 0] > 0, [c in positives[row] for c in labels[row][valid[row] > 0]]
            )
    # One full batch per step: the same documents in another order, so compare the multisets of top clusters.
    sets = [sorted(map(tuple, np.sort(c[0], axis=1))) for c in calls]
    if negatives == "static":
        assert len(calls) == 2  # generator alone for the first step, then fixed negatives
        assert (tmp_path / "run" / "checkpoints" / "lightxml" / "static_top.npy").is_file()
    else:
        assert len(calls) == 3
    assert (sets[0] != sets[-1]) == (negatives == "dynamic")


def test_static_negatives_cover_exactly_the_texts_still_to_be_visited(
    corpus_files, tiny_bert, lightxml_config, tmp_path, monkeypatch
):
    from xtag.training.run import train_run

    calls = _record_candidates(monkeypatch)
    config = lightxml_config(
        corpus_files[0], tiny_bert, epochs=1, max_steps=6, negatives="static", static_warmup=0.5, swa_start=1
    )
    train_run(config, tmp_path / "run", progress=False)
    fixed = np.load(tmp_path / "run" / "checkpoints" / "lightxml" / "static_top.npy")
    assert len(calls) == 3 and (fixed >= 0).all(axis=1).sum() == 3 * 16  # steps 4-6 of 16 texts each
    assert all((c[0] >= 0).all() for c in calls)


def test_training_learns_far_above_chance(lightxml_bundle, corpus_files):
    from xtag.corpus.files import load_corpus
    from xtag.evaluation.evaluate import evaluate_bundle
    from xtag.models.bundle.loader import load_bundle

    run, bundle = lightxml_bundle
    b = load_bundle(bundle)
    test = load_corpus(corpus_files[1])
    Y, _ = test.label_matrix(b.predictor.vocab)
    chance = 100 * float(np.mean(np.diff(Y.indptr))) / Y.shape[1]  # P@1 of a random ranking
    metrics, _ = evaluate_bundle(b, test, progress=False)
    assert metrics["P@1"] > 2 * chance, (metrics["P@1"], chance)
    events = [json.loads(line) for line in (run / "train_log.jsonl").read_text().splitlines()]
    kinds = {e["event"] for e in events}
    assert {"lightxml", "step", "validate", "lightxml_done"} <= kinds
    done = next(e for e in events if e["event"] == "lightxml_done")
    assert done["validation_documents"] == 20 and done["train_documents"] == 380 and done["swa_models"] > 1


def test_swa_is_the_running_mean_and_is_what_gets_saved(
    corpus_files, tiny_bert, lightxml_config, tmp_path, monkeypatch
):
    import torch
    from xtag.training.deep.swa import SWA
    from xtag.training.run import train_run

    net = torch.nn.Linear(2, 1)
    swa, seen = SWA(net), []
    for value in (1.0, 2.0, 6.0):
        with torch.no_grad():
            net.weight.fill_(value)
        seen.append(value)
        swa.update()
    swa.swap()
    assert torch.allclose(net.weight, torch.full_like(net.weight, 3.0))
    swa.swap()
    assert torch.allclose(net.weight, torch.full_like(net.weight, 6.0))

    snapshots = []
    real = SWA.update

    def record(self):
        snapshots.append(self.net.generator.weight.detach().clone())
        real(self)

    monkeypatch.setattr(SWA, "update", record)
    config = lightxml_config(corpus_files[0], tiny_bert, epochs=3, val_fraction=0.0, swa_start=1, swa_every=5)
    train_run(config, tmp_path / "run", progress=False)
    assert len(snapshots) >= 3
    saved = load_file(tmp_path / "run" / "model" / "encoder" / "heads.safetensors")["generator.weight"]
    np.testing.assert_allclose(saved, torch.stack(snapshots).mean(0).numpy(), atol=1e-6)
    assert not np.allclose(saved, snapshots[-1].numpy(), atol=1e-4)  # not simply the last weights


def test_swa_always_averages_in_the_last_steps_weights(corpus_files, tiny_bert, lightxml_config, tmp_path, monkeypatch):
    """Two epochs of 25 steps, SWA from epoch 1 every 1000 steps: the averages are of steps 25 and 50. (They
    were of step 25 alone — the model saved was the end of epoch 1, the second epoch thrown away.)"""
    import torch
    from xtag.training.deep.swa import SWA
    from xtag.training.run import train_run

    steps, real = [], SWA.update

    def record(self):
        steps.append(self.net.generator.weight.detach().clone())
        real(self)

    monkeypatch.setattr(SWA, "update", record)
    config = lightxml_config(corpus_files[0], tiny_bert, epochs=2, val_fraction=0.0, swa_start=1, swa_every=1000)
    train_run(config, tmp_path / "run", progress=False)
    assert len(steps) == 2
    saved = load_file(tmp_path / "run" / "model" / "encoder" / "heads.safetensors")["generator.weight"]
    np.testing.assert_allclose(saved, torch.stack(steps).mean(0).numpy(), atol=1e-6)


def test_selection_validates_exactly_the_weights_it_saves(corpus_files, tiny_bert, lightxml_config, tmp_path):
    """With SWA running, the validation that picks the model must score the averages of every weight
    (label embeddings included) — exactly the saved model, recomputed here from the run directory."""
    import torch
    from xtag.corpus.files import load_corpus
    from xtag.models.features.onnx_encoder import TextTokenizer
    from xtag.models.labels import LabelVocab
    from xtag.models.lightxml.model import LightXMLModel
    from xtag.models.metrics import evaluate
    from xtag.training.lightxml.result import LIGHTXML_NET
    from xtag.training.lightxml.validation import net_outputs, validation_split
    from xtag.training.run import train_run

    config = lightxml_config(
        corpus_files[0], tiny_bert, epochs=3, eval_every=10, val_fraction=0.2, swa_start=1, swa_every=3
    )
    run = tmp_path / "run"
    train_run(config, run, progress=False)
    events = [json.loads(line) for line in (run / "train_log.jsonl").read_text().splitlines()]
    best = next(e for e in events if e["event"] == "lightxml_done")["best"]
    assert best["step"] > 24  # selected among SWA averages (SWA starts after epoch 1 = step 20)
    train = load_corpus(corpus_files[0])
    _, val = validation_split(len(train), 0.2, 0)
    net, enc = LIGHTXML_NET.load_run_net(run / "model" / "encoder", None)
    out = net_outputs(
        net,
        TextTokenizer.load(run / "model" / "encoder" / "tokenizer.json", enc.max_length),
        [train.texts[i] for i in val],
        torch.device("cpu"),
        False,
    )
    model = LightXMLModel.load(run / "model")
    Y, _ = train.label_matrix(LabelVocab.load(run / "model" / "labels.json"))
    got = evaluate(model.predict(out, k=5).labels, Y[val], (1, 3, 5))
    assert [best[k] for k in ("P@1", "P@3", "P@5")] == [round(got[k], 3) for k in ("P@1", "P@3", "P@5")]


def test_interrupted_run_resumes_to_the_uninterrupted_weights(
    corpus_files, tiny_bert, lightxml_config, tmp_path, monkeypatch
):
    from xtag.training.deep.checkpoint import Checkpoint
    from xtag.training.run import train_run

    config = lightxml_config(
        corpus_files[0], tiny_bert, epochs=2, checkpoint_every=7, swa_start=1, swa_every=3, eval_every=5
    )
    real = Checkpoint.save

    def save_then_die(self, net, opt, sched, state, tensors=None):
        real(self, net, opt, sched, state, tensors)
        if state["step"] == 28:
            raise KeyboardInterrupt("killed after a checkpoint")

    monkeypatch.setattr(Checkpoint, "save", save_then_die)
    with pytest.raises(KeyboardInterrupt):
        train_run(config, tmp_path / "killed", progress=False)
    monkeypatch.setattr(Checkpoint, "save", real)
    assert not (tmp_path / "killed" / "model").exists()
    train_run(config, tmp_path / "killed", resume=True, progress=False)
    log = [json.loads(line) for line in (tmp_path / "killed" / "train_log.jsonl").read_text().splitlines()]
    assert any(e["event"] == "resume" and e["step"] == 28 for e in log)
    train_run(config, tmp_path / "straight", progress=False)
    a = load_file(tmp_path / "killed" / "model" / "encoder" / "heads.safetensors")
    b = load_file(tmp_path / "straight" / "model" / "encoder" / "heads.safetensors")
    for key in a:
        np.testing.assert_allclose(a[key], b[key], atol=1e-5, err_msg=key)
    a = load_file(tmp_path / "killed" / "model" / "encoder" / "model.safetensors")
    b = load_file(tmp_path / "straight" / "model" / "encoder" / "model.safetensors")
    for key in a:
        np.testing.assert_allclose(a[key], b[key], atol=1e-5, err_msg=key)


def test_cli_maps_the_xr_transformer_flags(corpus_files, tiny_bert):
    from typer.testing import CliRunner

    from xtag.cli import app

    result = CliRunner().invoke(
        app,
        [
            "train",
            "--corpus",
            str(corpus_files[0]),
            "--model",
            "lightxml",
            "--encoder",
            str(tiny_bert),
            "--max-length",
            "48",
            "--epochs",
            "3",
            "--batch-size",
            "8",
            "--device",
            "cpu",
            "--print-config",
        ],
    )
    assert result.exit_code == 0, result.output
    lx = json.loads(result.output)["lightxml"]
    assert (lx["max_length"], lx["epochs"], lx["batch_size"], lx["device"], lx["lr"], lx["last_layers"]) == (
        48,
        3,
        8,
        "cpu",
        1e-4,
        5,
    )


@pytest.mark.skipif(
    shutil.which("torchrun", path=str(Path(sys.executable).parent)) is None, reason="torchrun not installed"
)
def test_torchrun_two_processes_train_lightxml_and_both_exit_cleanly(
    corpus_files, tiny_bert, lightxml_config, tmp_path
):
    """Rank 0 leaves the process group from finish_run, rank 1 from its early return: the two must pair up."""
    config = lightxml_config(corpus_files[0], tiny_bert, epochs=1, swa_start=0, batch_size=8)
    (tmp_path / "config.json").write_text(config.model_dump_json())
    result = subprocess.run(
        train_command(tmp_path / "config.json", tmp_path / "run", torchrun_launcher(2)),
        cwd=Path(__file__).resolve().parents[3],
        env={**os.environ, "OMP_NUM_THREADS": "1"},
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    events = [json.loads(line) for line in (tmp_path / "run" / "train_log.jsonl").read_text().splitlines()]
    assert next(e for e in events if e["event"] == "lightxml")["world_size"] == 2
    assert (tmp_path / "run" / "model" / "encoder" / "model.safetensors").is_file()


def test_every_parameter_trains_at_its_rate_and_the_schedule_is_applied(
    corpus_files, tiny_bert, lightxml_config, tmp_path, monkeypatch
):
    """The heads (generator, bottleneck, label embeddings) run at lr_head, the encoder at lr, every trainable
    parameter in exactly one group; the logged rate warms up linearly, then decays linearly to zero."""
    import torch
    from xtag.training.deep.optim import lr_factor
    from xtag.training.lightxml.result import LIGHTXML_NET
    from xtag.training.run import train_run

    groups = []
    real = torch.optim.AdamW

    def spy(params, *args, **kwargs):
        groups.extend({"lr": g["lr"], "params": list(g["params"])} for g in params)
        return real(params, *args, **kwargs)

    monkeypatch.setattr(torch.optim, "AdamW", spy)
    config = lightxml_config(
        corpus_files[0], tiny_bert, epochs=1, max_steps=10, lr=1e-3, lr_head=2e-2, warmup=0.3,
        schedule="linear", log_every=1, val_fraction=0.0, swa_start=1,
    )  # fmt: skip
    run = tmp_path / "run"
    train_run(config, run, progress=False)
    ids = [id(p) for g in groups for p in g["params"]]
    assert len(ids) == len(set(ids))
    net, _ = LIGHTXML_NET.load_run_net(run / "model" / "encoder", None)
    n_trainable = sum(1 for p in net.parameters() if p.requires_grad)
    assert len(ids) == n_trainable  # no parameter left out of the optimiser
    heads = {id(p) for m in (net.generator, net.bottleneck, net.label_embeddings) for p in m.parameters()}
    rates = [(g["lr"], len(g["params"])) for g in groups if g["params"]]
    assert {lr for lr, _ in rates} == {1e-3, 2e-2}
    assert sum(n for lr, n in rates if lr == 2e-2) == len(heads)  # generator, bottleneck, embeddings: 5 tensors
    events = [json.loads(line) for line in (run / "train_log.jsonl").read_text().splitlines()]
    lrs = [e["lr"] for e in events if e["event"] == "step"]
    assert lrs == pytest.approx([1e-3 * lr_factor(s, 10, 3, "linear") for s in range(1, 11)])
    assert lrs[0] < lrs[1] == max(lrs) == pytest.approx(1e-3) and lrs[-1] == 0.0


def test_prior_bias_starts_the_generator_at_the_cluster_log_odds(corpus_files, tiny_bert, lightxml_config, tmp_path):
    """prior_bias: before any step, σ(generator bias) is each cluster's share of the training texts (the
    popularity ranking); one step at a negligible rate leaves it there."""
    from xtag.corpus.files import load_corpus
    from xtag.training.run import train_run

    config = lightxml_config(
        corpus_files[0], tiny_bert, epochs=1, max_steps=1, lr=1e-9, lr_head=1e-9, val_fraction=0.0, swa_start=1,
        prior_bias=True, flat_max_labels=100,
    )  # fmt: skip
    train_run(config, tmp_path / "run", progress=False)
    bias = load_file(tmp_path / "run" / "model" / "encoder" / "heads.safetensors")["generator.bias"]
    labels = json.loads((tmp_path / "run" / "model" / "labels.json").read_text())
    share = np.array(labels["frequencies"]) / len(load_corpus(corpus_files[0]))
    np.testing.assert_allclose(1 / (1 + np.exp(-bias)), share, atol=1e-4)
