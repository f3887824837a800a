"""XR-Transformer training: the paper's targets/relevance/shortlists, fine-tuning, frozen mode, CLI."""

import json

import numpy as np
import scipy.sparse as sp
from safetensors.numpy import load_file
from typer.testing import CliRunner
from xtag.models.label_tree import ClusterChain

from xtag.cli import app

runner = CliRunner()

# Root → 2 clusters → 5 labels: cluster 0 holds labels 3, 0; cluster 1 holds labels 1, 4, 2.
CHAIN = ClusterChain(ptrs=[np.array([0, 2]), np.array([0, 2, 5])], leaf_labels=np.array([3, 0, 1, 4, 2]))
Y = sp.csr_matrix(
    np.array(
        [
            [1, 1, 0, 1, 0],  # labels 0, 1, 3: cluster 0 twice, cluster 1 once
            [0, 0, 1, 0, 0],  # label 2: cluster 1
            [0, 0, 0, 1, 0],
        ],
        dtype=np.float32,
    )
)


def test_relevance_counts_children_and_normalises_rows():
    from xtag.training.xr_transformer.train import relevance

    R = relevance(CHAIN, Y, 1).toarray()
    # Row 0: counts (2, 1) → ℓ1-normalised (2/3, 1/3) → × 2 positives = (4/3, 2/3): mean positive weight 1.
    assert np.allclose(R[0], [4 / 3, 2 / 3])
    assert np.allclose(R[1], [0, 1]) and np.allclose(R[2], [1, 0])
    assert np.allclose(relevance(CHAIN, Y, 2).toarray(), Y.toarray()[:, CHAIN.leaf_labels])  # R^(D) = Y


def test_shortlist_is_children_of_true_and_predicted_parents():
    from xtag.training.xr_transformer.train import shortlist, top_k_parents

    E = np.array([[0.0, 1.0], [1.0, 0.0], [1.0, 0.0]], dtype=np.float32)
    W, b = np.array([[1.0, 0.0], [0.0, 1.0]], dtype=np.float32), np.zeros(2, np.float32)
    P = top_k_parents(E, W, b, k=1)
    assert P.toarray().tolist() == [[0, 1], [1, 0], [1, 0]]
    parents, M = shortlist(CHAIN, Y, 2, P)
    # Doc 1: true parent 1 (label 2), predicted parent 0 → every label node; doc 2: only cluster 0's nodes.
    assert parents.toarray().tolist() == [[1, 1], [1, 1], [1, 0]]
    assert M.toarray().tolist() == [[1, 1, 1, 1, 1], [1, 1, 1, 1, 1], [1, 1, 0, 0, 0]]
    root_parents, M1 = shortlist(CHAIN, Y, 1, None)
    assert M1.toarray().all() and root_parents.shape == (3, 1)


def test_batch_targets_weights_positives_by_relevance_and_negatives_by_alpha():
    from xtag.training.xr_transformer.finetune import LevelProblem, batch_targets
    from xtag.training.xr_transformer.train import relevance, shortlist

    _, M = shortlist(CHAIN, Y, 1, None)
    problem = LevelProblem(level=1, Y=CHAIN.level_targets(Y, 1), R=relevance(CHAIN, Y, 1), M=M)
    cand, y, weight = batch_targets(problem, np.array([0, 2]), neg_weight=0.5)
    assert cand.tolist() == [[0, 1], [0, 1]]
    assert y.tolist() == [[1, 1], [1, 0]]
    assert np.allclose(weight, [[4 / 3, 2 / 3], [1.0, 0.5]])


def test_lr_schedule_warms_up_then_decays():
    from xtag.training.xr_transformer.finetune import lr_factor

    values = [lr_factor(s, 10, 2, "linear") for s in range(10)]
    assert values[0] == 0.5 and values[1] == 1.0 and values[-1] < values[2] and min(values) >= 0
    assert lr_factor(5, 10, 0, "cosine") < 1.0 and lr_factor(5, 10, 0, "constant") == 1.0


def test_fine_tuned_bundle_tags_and_logs_every_level(xr_bundle, corpus_files, tiny_bert):
    from xtag.corpus.files import load_corpus
    from xtag.evaluation.evaluate import evaluate_bundle
    from xtag.models.bundle.loader import load_bundle

    run, bundle = xr_bundle
    events = [json.loads(line) for line in (run / "train_log.jsonl").read_text().splitlines()]
    levels = next(e["levels"] for e in events if e["event"] == "finetune_tree")
    tuned = [e for e in events if e["event"] == "finetune_level"]
    assert [e["level"] for e in tuned] == list(range(1, len(levels) + 1)) and len(levels) >= 2
    steps = [e for e in events if e["event"] == "step"]
    assert steps and all(e["loss"] >= 0 and e["docs_per_s"] > 0 for e in steps)
    assert {"encode", "bootstrap", "done"} <= {e["event"] for e in events}
    # The encoder carried from level to level really changed.
    before = load_file(tiny_bert / "model.safetensors")
    after = load_file(run / "model" / "encoder" / "model.safetensors")
    assert any(not np.allclose(before[k], after[k]) for k in before if k in after)

    b = load_bundle(bundle)
    assert b.manifest["model_kind"] == "xr-transformer"
    metrics, _ = evaluate_bundle(b, load_corpus(corpus_files[1]), progress=False)
    assert metrics["P@1"] >= 90.0
    named = b.predictor.named(b.predictor.predict(["genome protein dna biology sequence"], k=1))
    assert named[0][0][1] == "sci::bio"


def dense_only_p_at_1(corpus_files, encoder, folder, **xr) -> float:
    """P@1 of an XR-Transformer bundle whose rankers see the [CLS] embedding alone (no TF-IDF block)."""
    from xtag.corpus.files import load_corpus
    from xtag.evaluation.evaluate import evaluate_bundle
    from xtag.models.bundle.loader import load_bundle

    from tests.conftest import make_xr_config, train_and_export

    config = make_xr_config(corpus_files[0], encoder, features="dense", pooling="cls", **xr)
    _, bundle = train_and_export(config, folder)
    metrics, _ = evaluate_bundle(load_bundle(bundle), load_corpus(corpus_files[1]), progress=False)
    return metrics["P@1"]


def test_fine_tuning_is_what_makes_the_embedding_tag(corpus_files, tiny_bert, tmp_path):
    """TF-IDF alone solves the fixture, so judge the encoder on its own: rankers on the [CLS] vector of the
    random tiny BERT are near chance frozen, and multi-resolution fine-tuning must lift them far above it."""
    frozen = dense_only_p_at_1(corpus_files, tiny_bert, tmp_path / "frozen", epochs=0)
    tuned = dense_only_p_at_1(corpus_files, tiny_bert, tmp_path / "tuned", epochs=3, lr_encoder=2e-3)
    assert frozen < 30 and tuned > frozen + 15, (frozen, tuned)


def test_frozen_mode_and_int8_export_through_the_cli(corpus_files, tiny_bert, tmp_path):
    import onnx
    from xtag.models.bundle.loader import load_bundle

    train, _ = corpus_files
    run, bundle = tmp_path / "run", tmp_path / "bundle"
    (tmp_path / "c.json").write_text(json.dumps({"xr_transformer": {"export": {"quantize": True}}}))
    result = runner.invoke(
        app,
        [
            "train",
            "--corpus",
            str(train),
            "--config",
            str(tmp_path / "c.json"),
            "--model",
            "xr-transformer",
            "--encoder",
            str(tiny_bert),
            "--max-length",
            "32",
            "--epochs",
            "0",
            "--batch-size",
            "8",
            "--device",
            "cpu",
            "--branching",
            "2",
            "--max-leaf-size",
            "4",
            "--out",
            str(run),
            "--no-progress",
        ],
    )
    assert result.exit_code == 0, result.output
    config = json.loads((run / "config.json").read_text())
    assert config["xr_transformer"]["epochs"] == 0 and config["xr_transformer"]["max_length"] == 32
    events = [json.loads(line)["event"] for line in (run / "train_log.jsonl").read_text().splitlines()]
    assert "step" not in events and "finetune_level" not in events
    before = load_file(tiny_bert / "model.safetensors")
    after = load_file(run / "model" / "encoder" / "model.safetensors")
    assert all(np.array_equal(before[k], after[k]) for k in before if k in after)  # frozen: untouched

    result = runner.invoke(app, ["export", str(run), "--out", str(bundle)])
    assert result.exit_code == 0, result.output
    int8 = json.loads((bundle / "manifest.json").read_text())["export"]["int8"]  # its measured accuracy cost
    assert 0 < int8["vs_fp32"]["max_abs_diff"] < 1.0 and int8["vs_fp32"]["mean_cosine"] > 0.95
    assert 0.5 <= int8["top5_agreement_vs_fp32"] <= 1.0
    assert json.loads((bundle / "encoder" / "config.json").read_text())["quantized"] is True
    ops = {node.op_type for node in onnx.load(str(bundle / "encoder" / "model.onnx")).graph.node}
    assert {"DynamicQuantizeLinear", "MatMulInteger"} & ops
    assert load_bundle(bundle).manifest["model_kind"] == "xr-transformer"
    result = runner.invoke(app, ["predict", str(bundle), "email smtp imap mailbox", "--k", "1"])
    assert result.exit_code == 0 and "net::mail" in result.output


def test_xr_flags_need_the_xr_model_and_yaml_config_works(corpus_files, tmp_path):
    train, _ = corpus_files
    result = runner.invoke(app, ["train", "--corpus", str(train), "--epochs", "1", "--print-config"])
    assert result.exit_code == 2 and "--epochs: model xlinear does not support a transformer encoder" in result.output
    assert "(supported by xr-transformer, lightxml, cascadexml, lamp)" in result.output
    (tmp_path / "c.yaml").write_text(
        f"corpus: {train}\nmodel: xr-transformer\nxr_transformer:\n  epochs: 0\n  pooling: cls\n"
    )
    result = runner.invoke(app, ["train", "--config", str(tmp_path / "c.yaml"), "--max-length", "48", "--print-config"])
    assert result.exit_code == 0, result.output
    printed = json.loads(result.output)
    assert printed["xr_transformer"]["pooling"] == "cls" and printed["xr_transformer"]["max_length"] == 48
    result = runner.invoke(app, ["train", "--corpus", str(train), "--print-config"])
    assert json.loads(result.output)["xr_transformer"] is None  # xlinear configs are unchanged


def test_phi_cat_is_both_blocks_row_normalised():
    from sklearn.preprocessing import normalize
    from xtag.models.xr_transformer.concat_features import concat_features

    rng = np.random.default_rng(0)
    X = sp.random(20, 50, density=0.1, format="lil", random_state=0, dtype=np.float32)
    X[3] = 0  # an empty TF-IDF row stays empty
    X = X.tocsr()
    E = rng.normal(size=(20, 8)).astype(np.float32)
    expected = np.hstack([normalize(X).toarray(), normalize(E)])
    assert np.allclose(concat_features(X, E).toarray(), expected, atol=1e-6)
    assert np.allclose(concat_features(None, E).toarray(), normalize(E), atol=1e-6)
