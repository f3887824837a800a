"""CascadeXML: the cascade's candidate rule and score rule, the layer recipe, training through the CLI,
ONNX parity, kill + resume, and torch-free serving of the bundle."""

import json
import subprocess
from pathlib import Path

import numpy as np
import pytest
from scipy.special import expit

from tests.conftest import assert_serves_without_torch, kill_after_first_checkpoint

TEXTS = [
    "shooter weapons arena frag multiplayer",
    "python module pip interpreter script",
    "email smtp imap mailbox inbox http server",
]


def small_chain():
    """4 clusters of 3 nodes each (12 nodes) over 12 labels, label j at leaf position 11 - j."""
    from xtag.models.label_tree import ClusterChain

    return ClusterChain(
        ptrs=[np.array([0, 4]), np.array([0, 3, 6, 9, 12]), np.arange(13)], leaf_labels=np.arange(12)[::-1].copy()
    )


def cascade_settings(encoder: Path, **extra) -> dict:
    """12 fixture labels → 2 clusters → 4 clusters → labels; top-1 of 2, top-2 of 4."""
    return {
        "encoder": str(encoder),
        "branching": 2,
        "max_leaf_size": 3,
        "top_k": [1, 2],
        "lr": 5e-3,
        "log_every": 5,
        **extra,
    }


def test_training_shortlist_is_children_of_top_k_plus_true_parents():
    from xtag.models.cascadexml.cascade import child_tables
    from xtag.training.cascadexml.train import training_shortlist

    table = child_tables(small_chain())[0]  # resolution 0 (4 clusters) → their 3 children each
    logits = np.array([[3.0, 2.0, 1.0, -5.0], [0.0, 1.0, 2.0, 3.0]])
    nodes = np.broadcast_to(np.arange(4), (2, 4))
    rows = training_shortlist(logits, nodes, 2, table, [np.array([3]), np.array([2])])
    assert rows[0].tolist() == [0, 1, 2, 3, 4, 5, 9, 10, 11]  # top 2 (clusters 0, 1) + true cluster 3
    assert rows[1].tolist() == [6, 7, 8, 9, 10, 11]  # the true parent is already in the top 2: no duplicates
    padded = np.array([[5.0, 9.0, 1.0]]), np.array([[2, -1, 0]])  # a padded column is never picked
    assert training_shortlist(*padded, 1, table, [np.array([], np.int64)])[0].tolist() == [6, 7, 8]


def test_prediction_scores_children_of_top_k_by_label_times_immediate_parent():
    from xtag.models.cascadexml.model import CascadeHeadConfig, CascadeOutputs, CascadeXMLModel

    chain = small_chain()
    config = CascadeHeadConfig(sizes=[4, 12, 12], top_k=[2, 2], dim=3, outputs="logits")
    rng = np.random.default_rng(0)
    heads = [rng.normal(size=(s, 3)).astype(np.float32) for s in config.sizes]
    model = CascadeXMLModel(chain, heads, [np.zeros(s, np.float32) for s in config.sizes], config)
    z0 = np.array([[4.0, -1.0, 3.0, -2.0]])  # top 2 clusters: 0 and 2 → nodes 0-2 and 6-8
    z1 = np.array([[1.0, 5.0, 0.0, 9.0, 9.0, 9.0, 2.0, -1.0, 0.5, 9.0, 9.0, 9.0]])  # top 2 of those: 1 and 6
    z2 = np.linspace(-2, 2, 12)[None, :]  # label level, in node (leaf) order: node j is label 11 - j
    preds = model.predict(CascadeOutputs([z0, z1, z2]), k=12)
    got = {int(label): float(s) for label, s in zip(preds.labels[0], preds.scores[0]) if label >= 0}
    assert set(got) == {11 - 1, 11 - 6}  # leaves 1 and 6: children of the level-1 top 2 only
    for node in (1, 6):
        assert got[11 - node] == pytest.approx(expit(z2[0, node]) * expit(z1[0, node]), rel=1e-6)
    # The same model with the heads applied in numpy to the features gives the same prediction.
    feats = [rng.normal(size=(5, 3)).astype(np.float32) for _ in config.sizes]
    logits = CascadeOutputs([f @ h.T for f, h in zip(feats, heads)])
    features = CascadeXMLModel(chain, heads, model.biases, config.model_copy(update={"outputs": "features"}))
    a, b = model.predict(logits, k=5), features.predict(CascadeOutputs(feats), k=5)
    assert np.array_equal(a.labels, b.labels) and np.allclose(a.scores, b.scores, atol=1e-6)
    # A wider beam widens every level in proportion: top 4 clusters and 4 nodes, then all 12.
    assert ((model.predict(logits, k=12, beam_size=4).labels >= 0).sum(axis=1) == 4).all()
    assert (model.predict(logits, k=12, beam_size=12).labels >= 0).all()


def test_default_layer_recipe_scales_the_reference():
    from xtag.training.cascadexml.recipe import default_dropouts, default_layers

    assert default_layers(12, 4) == [[5, 6], [8], [10], [12]]  # the reference, BERT-base
    assert default_layers(12, 3) == [[7, 8], [10], [12]]  # the reference's three-resolution datasets
    assert default_layers(6, 3) == [[3, 4], [5], [6]]  # MiniLM-L6
    assert default_layers(2, 3) == [[1], [1], [2]]
    assert default_dropouts(4) == [0.2, 0.25, 0.4, 0.5] and default_dropouts(3) == [0.2, 0.35, 0.5]


def test_schedule_warms_up_holds_and_anneals():
    from xtag.training.cascadexml.schedule import cascade_lr_factor

    f = [cascade_lr_factor(s, 100, 0.1, 0.2) for s in range(100)]
    assert 0 < f[0] < f[5] < f[9] == pytest.approx(1.0) and all(v == 1.0 for v in f[10:80])
    assert 1.0 == f[80] > f[90] > f[99] > 0


@pytest.fixture(scope="module")
def cascade_run(corpus_files, tiny_bert, tmp_path_factory):
    """(run, bundle) of a tiny CascadeXML trained through `xtag train` with the transformer flags."""
    from typer.testing import CliRunner

    from xtag.cli import app

    folder = tmp_path_factory.mktemp("cascadexml")
    config = folder / "config.json"
    config.write_text(json.dumps({"tfidf": {"min_df": 1}, "cascadexml": cascade_settings(tiny_bert)}))
    runner = CliRunner()
    args = ["train", "--config", str(config), "--corpus", str(corpus_files[0]), "--model", "cascadexml"]
    args += ["--max-length", "32", "--epochs", "6", "--batch-size", "16", "--device", "cpu"]
    result = runner.invoke(app, [*args, "--out", str(folder / "run"), "--no-progress"])
    assert result.exit_code == 0, result.output
    result = runner.invoke(app, ["export", str(folder / "run"), "--out", str(folder / "bundle")])
    assert result.exit_code == 0, result.output
    return folder / "run", folder / "bundle"


def test_trains_above_chance_and_exports_a_parity_checked_graph(cascade_run, corpus_files):
    import onnx
    from xtag.corpus.files import load_corpus
    from xtag.evaluation.evaluate import evaluate_bundle
    from xtag.models.bundle.loader import load_bundle

    run, bundle = cascade_run
    events = [json.loads(line) for line in (run / "train_log.jsonl").read_text().splitlines()]
    start = next(e for e in events if e["event"] == "cascadexml")
    assert start["resolutions"] == [2, 4, 12] and start["layers"] == [[1], [1], [2]] and start["top_k"] == [1, 2]
    steps = [e for e in events if e["event"] == "step"]
    assert len(steps[0]["level_losses"]) == 3 and steps[-1]["loss"] < steps[0]["loss"]

    manifest = json.loads((bundle / "manifest.json").read_text())
    assert manifest["model_kind"] == "cascadexml"
    assert [c["type"] for c in manifest["components"]] == ["cascadexml-encoder", "label-tree", "cascadexml-heads"]
    assert not any(f.startswith("features/") or f.endswith((".pkl", ".pt", ".bin")) for f in manifest["files"])
    report = manifest["export"]
    assert all(p["max_abs_diff"] <= 1e-4 for p in report["parity"].values()) and len(report["parity"]) == 3
    assert report["top5_agreement_vs_torch"] == 1.0
    graph = onnx.load(str(bundle / "encoder" / "model.onnx")).graph
    assert [o.name for o in graph.output] == ["level_0", "level_1", "level_2"]

    # Chance: a random label is right with probability (mean labels per text) / 12, about 0.2.
    metrics, _ = evaluate_bundle(load_bundle(bundle), load_corpus(corpus_files[1]), progress=False)
    assert metrics["P@1"] > 60, metrics


def test_logits_graph_exports_and_predicts_as_the_features_graph(cascade_run, tmp_path):
    from xtag.models.bundle.loader import load_bundle
    from xtag.training.config import TrainConfig
    from xtag.training.export.export_run import export_run

    run, bundle = cascade_run
    copy = tmp_path / "run"
    subprocess.run(["cp", "-r", str(run), str(copy)], check=True)
    config = TrainConfig.load(copy / "config.json")
    config.cascadexml.export.outputs = "logits"
    config.save(copy / "config.json")
    manifest = export_run(copy, tmp_path / "bundle")
    assert manifest["export"]["outputs"] == "logits"
    a = load_bundle(bundle).predictor.predict(TEXTS, k=5)
    b = load_bundle(tmp_path / "bundle").predictor.predict(TEXTS, k=5)
    assert np.array_equal(a.labels, b.labels) and np.allclose(a.scores, b.scores, atol=1e-4)


def test_export_refuses_a_graph_that_drifts_from_torch(cascade_run, tmp_path, monkeypatch):
    from xtag.models.errors import XtagError
    from xtag.training.cascadexml import export as cascade_export
    from xtag.training.export.export_run import export_run

    from tests.conftest import add_drift

    original = cascade_export.write_graph

    def drifting(module, run_encoder, out, *args):
        result = original(module, run_encoder, out, *args)
        add_drift(out / "model.onnx", out / "model.onnx", "level_2", 0.01)
        return result

    monkeypatch.setattr(cascade_export, "write_graph", drifting)
    with pytest.raises(XtagError, match="differs from torch by 0.01"):
        export_run(cascade_run[0], tmp_path / "bundle")


@pytest.mark.parametrize("precision", ["int8", "fp16"])
def test_int8_and_fp16_bundles_report_their_cost_and_tag_as_fp32_does(cascade_run, corpus_files, tmp_path, precision):
    """The same accuracy check as the other families' lower-precision bundles: each level's drift from the fp32
    graph and the top-5 agreement in the report, the weights really converted, and the bundle's test metrics."""
    import onnx
    from typer.testing import CliRunner
    from xtag.corpus.files import load_corpus
    from xtag.evaluation.evaluate import evaluate_bundle
    from xtag.models.bundle.loader import load_bundle

    from xtag.cli import app

    run, fp32_bundle = cascade_run
    out = tmp_path / precision
    flag = ["--quantize", "int8"] if precision == "int8" else ["--fp16"]
    result = CliRunner().invoke(app, ["export", str(run), "--out", str(out), *flag, "--no-progress"])
    assert result.exit_code == 0, result.output
    assert f"{precision}: top-5 agreement with the fp32 graph" in result.output
    report = json.loads((out / "manifest.json").read_text())["export"][precision]
    assert report["checked_on"] == "CPUExecutionProvider" and len(report["vs_fp32"]) == 3
    min_cosine = 0.95 if precision == "int8" else 0.999
    assert all(0 < d["max_abs_diff"] < 1.0 and d["mean_cosine"] > min_cosine for d in report["vs_fp32"].values())
    assert 0.5 <= report["top5_agreement_vs_fp32"] <= 1.0
    config = json.loads((out / "encoder" / "config.json").read_text())
    assert config["precision"] == precision and config["quantized"] is (precision == "int8")
    graph = onnx.load(str(out / "encoder" / "model.onnx")).graph
    if precision == "int8":
        assert {"DynamicQuantizeLinear", "MatMulInteger"} & {node.op_type for node in graph.node}
    else:
        assert any(t.data_type == onnx.TensorProto.FLOAT16 for t in graph.initializer)
    test = load_corpus(corpus_files[1])
    lower, full = (evaluate_bundle(load_bundle(b), test, progress=False)[0] for b in (out, fp32_bundle))
    assert abs(lower["P@1"] - full["P@1"]) <= 5 and abs(lower["PSP@5"] - full["PSP@5"]) <= 5, (lower, full)


def label_logits(run: Path, texts: list[str]) -> np.ndarray:
    """The trained torch net's label-level logits (texts × labels, in label order) of a run."""
    from xtag.models.features.onnx_encoder import TextTokenizer
    from xtag.models.label_tree import ClusterChain
    from xtag.training.cascadexml.export import torch_outputs
    from xtag.training.cascadexml.net import LogitsGraph
    from xtag.training.cascadexml.result import CASCADEXML_NET

    net, config = CASCADEXML_NET.load_run_net(run / "model" / "encoder")
    tokenizer = TextTokenizer.load(run / "model" / "encoder" / "tokenizer.json", config.max_length)
    nodes = torch_outputs(LogitsGraph(net), tokenizer, texts).levels[-1]  # the label level, in leaf order
    logits = np.empty_like(nodes)
    logits[:, ClusterChain.load_tree(run / "model" / "tree").leaf_labels] = nodes
    return logits


def test_a_weighted_loss_lifts_the_labels_it_weighs_up(corpus_files, tiny_bert, tmp_path):
    """unbiased-balanced (missing-label loss): the rare label (role::tail, on one text in 15) gets the largest
    positive weight, and against the plain run from the same seed its logits on its own training texts rise
    among the most of all labels, and rare labels rise more than frequent ones on average."""
    from typer.testing import CliRunner
    from xtag.corpus.files import build_vocab, load_corpus

    from xtag.cli import app

    settings = cascade_settings(tiny_bert, max_length=32, epochs=3, batch_size=16, device="cpu")
    (tmp_path / "config.json").write_text(json.dumps({"tfidf": {"min_df": 1}, "cascadexml": settings}))
    args = ["train", "--config", str(tmp_path / "config.json"), "--corpus", str(corpus_files[0]), "--model"]
    for loss in ("none", "unbiased-balanced"):
        extra = [] if loss == "none" else ["--loss", loss]
        result = CliRunner().invoke(app, [*args, "cascadexml", *extra, "--out", str(tmp_path / loss), "--no-progress"])
        assert result.exit_code == 0, result.output
    logs = {
        loss: [json.loads(line) for line in (tmp_path / loss / "train_log.jsonl").read_text().splitlines()]
        for loss in ("none", "unbiased-balanced")
    }
    assert not any(e["event"] == "head_weights" for e in logs["none"])
    weights = next(e for e in logs["unbiased-balanced"] if e["event"] == "head_weights")
    assert weights["loss"] == "unbiased-balanced" and len(weights["level_max"]) == 3  # clusters, clusters, labels
    assert weights["level_max"][-1] == weights["head_max"] > 1.5 and any(e["event"] == "step" for e in logs["none"])

    corpus = load_corpus(corpus_files[0])
    Y = corpus.label_matrix(build_vocab(corpus))[0].toarray() > 0
    plain, weighted = (label_logits(tmp_path / loss, corpus.texts) for loss in ("none", "unbiased-balanced"))
    gain = np.array([(weighted[Y[:, j], j] - plain[Y[:, j], j]).mean() for j in range(Y.shape[1])])
    tail = build_vocab(corpus).names.index("role::tail")
    # The rare label rises clearly, and rarer labels (larger weights) rise more than frequent ones on average.
    # (Not "the most of all": another rare label can edge past it when thread scheduling changes float sums.)
    freq = Y.sum(axis=0)
    rare, frequent = freq <= np.median(freq), freq > np.median(freq)
    assert gain[tail] > 0.3 and gain[tail] >= np.sort(gain)[-2], gain
    assert gain[rare].mean() > gain[frequent].mean(), (gain, freq)


def test_bundle_serves_with_torch_unimportable(cascade_run):
    bundle = cascade_run[1]
    assert_serves_without_torch(bundle, TEXTS)


def killed_cascadexml_run(corpus_file: Path, encoder: Path, folder: Path):
    """(config, run, log): a CascadeXML run checkpointing every 3 steps, killed after its first checkpoint."""
    from xtag.training.config import TrainConfig

    settings = cascade_settings(
        encoder, max_length=32, epochs=1, max_steps=12, batch_size=16, device="cpu", checkpoint_every=3
    )
    config = TrainConfig.model_validate(
        {"corpus": str(corpus_file), "model": "cascadexml", "tfidf": {"min_df": 1}, "cascadexml": settings}
    )
    (folder / "config.json").write_text(config.model_dump_json())
    run = folder / "killed"
    return config, run, kill_after_first_checkpoint(folder / "config.json", run, "cascadexml")


def test_killed_run_resumes_to_the_uninterrupted_result(corpus_files, tiny_bert, tmp_path):
    from safetensors.numpy import load_file
    from xtag.training.run import train_run

    config, killed, log = killed_cascadexml_run(corpus_files[0], tiny_bert, tmp_path)

    train_run(config, killed, resume=True, progress=False)
    resumed = [json.loads(line) for line in (killed / "train_log.jsonl").read_text().splitlines()][len(log) :]
    assert any(e["event"] == "resume" and e.get("step", 0) > 0 for e in resumed)

    train_run(config, tmp_path / "straight", progress=False)
    for part in ("model.safetensors", "heads.safetensors"):
        a = load_file(killed / "model" / "encoder" / part)
        b = load_file(tmp_path / "straight" / "model" / "encoder" / part)
        assert a.keys() == b.keys()
        for key in a:
            np.testing.assert_allclose(a[key], b[key], atol=1e-5, err_msg=key)
