"""Missing-label losses (issue 16): propensities, the weights of eq. 3.13-3.14, and what they buy in training."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp
from sklearn.preprocessing import normalize
from xtag.corpus.files import Corpus, build_vocab
from xtag.evaluation.evaluate import ground_truth
from xtag.models.errors import XtagError
from xtag.models.metrics import evaluate
from xtag.models.propensity import jain_propensities, read_propensity_file
from xtag.training.config import TrainConfig
from xtag.training.weighting.label_weights import (
    MissingLabelsConfig,
    class_balance,
    head_weights,
    node_weights,
    positive_weights,
)
from xtag.training.xlinear.config import XLinearConfig
from xtag.training.xlinear.train import train_level, train_xlinear


def test_jain_propensities_match_hand_computed_values():
    # N = 100, A = 0.55, B = 1.5: C = (ln 100 − 1)·2.5^0.55 = 5.9676; p = 1 / (1 + C·(n + 1.5)^−0.55)
    p = jain_propensities(np.array([0.0, 10.0, 100.0]), 100)
    assert p == pytest.approx([0.173170, 0.391017, 0.680203], abs=1e-6)


def test_psp_metric_and_training_loss_use_the_same_propensities():
    corpus = Corpus(ids=["a", "b", "c", "d"], texts=["x"] * 4, labels=[["l1"], ["l1", "l2"], ["l1"], ["l3"]])
    vocab = build_vocab(corpus)
    Y, _ = corpus.label_matrix(vocab)
    loss_p, _ = MissingLabelsConfig().propensities(Y)
    assert ground_truth(corpus, vocab).propensity == pytest.approx(loss_p)


def test_propensity_weights_are_two_over_p_minus_one():
    w = positive_weights("propensity", np.array([1.0, 0.5, 0.25]), np.array([5.0, 3.0, 1.0]))
    assert w == pytest.approx([1.0, 3.0, 7.0])


def test_class_balance_is_one_minus_beta_over_one_minus_beta_to_the_n():
    assert class_balance(np.array([1.0, 2.0, 5.0]), 0.9) == pytest.approx([1.0, 0.526316, 0.244194], abs=1e-6)
    assert class_balance(np.array([1.0, 1000.0]), 0.0) == pytest.approx([1.0, 1.0])


def test_unbiased_balanced_weights_multiply_w_and_c_and_normalise_c_over_positives():
    p, n = np.array([0.5, 0.25]), np.array([2.0, 5.0])
    raw = positive_weights("unbiased-balanced", p, n, beta=0.9, normalise_balance=False)
    assert raw == pytest.approx([3.0 * 0.526316, 7.0 * 0.244194], abs=1e-5)
    norm = positive_weights("unbiased-balanced", p, n, beta=0.9)
    c = norm / np.array([3.0, 7.0])
    assert (n * c).sum() == pytest.approx(n.sum())  # an observed positive has mean c⁺ 1
    assert c[0] / c[1] == pytest.approx(0.526316 / 0.244194, rel=1e-5)  # ratios are eq. 3.14's


def test_head_weights_keep_ratios_and_average_one_per_positive():
    u = head_weights(np.array([1.0, 3.0, 7.0]), np.array([10.0, 4.0, 1.0]))
    assert (np.array([10.0, 4.0, 1.0]) * u).sum() == pytest.approx(15.0)
    assert u[2] / u[0] == pytest.approx(7.0)


def test_cluster_weight_is_the_occurrence_weighted_mean_of_its_labels():
    # labels 0, 1 in node 0 (n = 4, 2), label 2 alone in node 1: (4·1 + 2·3) / 6 and 10
    w = node_weights(np.array([1.0, 3.0, 10.0]), np.array([4.0, 2.0, 1.0]), np.array([0, 0, 1]), 2)
    assert w == pytest.approx([10 / 6, 10.0])


def test_propensity_file_overrides_the_formula_and_is_checked(tmp_path):
    good = tmp_path / "p.tsv"
    good.write_text("l1\t0.5\nl3\t1\n")
    assert read_propensity_file(good) == {"l1": 0.5, "l3": 1.0}
    Y = sp.csr_matrix(np.array([[1, 0, 0], [1, 1, 0], [0, 0, 1]], np.float32))
    cfg = MissingLabelsConfig(propensity_file=good).bind_labels(["l1", "l2", "l3"])
    p, covered = cfg.propensities(Y)
    assert covered == 2 and p[0] == 0.5 and p[2] == 1.0
    assert p[1] == pytest.approx(jain_propensities(np.array([1.0]), 3)[0])
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"l1": 1.5}))
    with pytest.raises(XtagError, match=r"\(0, 1\]"):
        read_propensity_file(bad)
    with pytest.raises(XtagError, match="label names"):
        MissingLabelsConfig(propensity_file=good).propensities(Y)


def test_weighting_is_its_own_section_and_the_rankers_keep_their_surrogates():
    for loss in ("squared-hinge", "logistic"):
        assert XLinearConfig(loss=loss).loss == loss
    for weighting in ("none", "propensity", "unbiased-balanced"):
        assert MissingLabelsConfig(weighting=weighting).weighting == weighting
    with pytest.raises(ValueError):
        XLinearConfig(loss="hinge")
    with pytest.raises(ValueError):
        XLinearConfig(loss="propensity")  # a weighting, not a ranker surrogate: missing_labels.weighting


def test_a_run_saved_with_the_old_place_still_loads(tmp_path):
    """Runs written before `missing_labels` had its own section kept it under xlinear, the weighting as xlinear.loss."""
    old = {
        "corpus": "c.jsonl",
        "xlinear": {
            "loss": "unbiased-balanced",
            "C": 2.0,
            "missing_labels": {"beta": 0.9, "propensity_file": "p.json"},
        },
    }
    (tmp_path / "config.json").write_text(json.dumps(old))
    config = TrainConfig.load(tmp_path / "config.json")
    assert config.xlinear.loss == "squared-hinge" and config.xlinear.C == 2.0
    assert config.missing_labels.weighting == "unbiased-balanced" and config.missing_labels.beta == 0.9
    assert str(config.missing_labels.propensity_file) == "p.json"
    assert TrainConfig.model_validate_json(config.model_dump_json()) == config  # saved again in the new place
    both = {**old, "missing_labels": {"beta": 0.5}}
    with pytest.raises(ValueError, match="both"):
        TrainConfig.model_validate(both)


def _level_problem(seed=0, n=120, d=30):
    rng = np.random.default_rng(seed)
    X = sp.csr_matrix(normalize(rng.random((n, d)) * (rng.random((n, d)) < 0.3)))
    Y = sp.csr_matrix((rng.random((n, 4)) < 0.2).astype(np.float32))
    mask = sp.csc_matrix(np.ones((n, 1), np.float32))
    return X, Y, mask, np.array([0, 4])


def test_positive_weights_raise_positive_scores_and_do_not_depend_on_threads():
    X, Y, mask, ptr = _level_problem()
    pw = np.array([1.0, 5.0, 1.0, 5.0])
    levels = [train_level(X, Y, mask, ptr, XLinearConfig(n_jobs=j), progress=False, pos_weight=pw) for j in (1, 2)]
    assert (levels[0].W != levels[1].W).nnz == 0 and np.array_equal(levels[0].bias, levels[1].bias)
    plain = train_level(X, Y, mask, ptr, XLinearConfig(n_jobs=1), progress=False)
    ones = train_level(X, Y, mask, ptr, XLinearConfig(n_jobs=1), progress=False, pos_weight=np.ones(4))
    assert (plain.W != ones.W).nnz == 0  # weight 1 is plain training
    scores = lambda level: (X @ level.W.T).toarray() + level.bias  # noqa: E731
    pos = Y.toarray() > 0
    gain = (scores(levels[0]) - scores(plain))[pos]
    col = np.nonzero(pos)[1]
    assert gain[np.isin(col, [1, 3])].mean() > 0.1  # weighted nodes score their positives higher
    assert abs(gain[np.isin(col, [0, 2])]).max() < 1e-6  # the others are untouched


def _missing_label_corpus(rng, n, m=8):
    """Single-label documents: two words of their label (each seen 80 %), any label's first word by chance (25 %)."""
    lab = rng.integers(0, m, n)
    Y = np.zeros((n, m), np.float32)
    Y[np.arange(n), lab] = 1
    own = Y[:, :, None] * (rng.random((n, m, 2)) < 0.8)
    confuser = (rng.random((n, m)) < 0.25)[:, :, None] * np.array([1, 0])
    X = np.maximum(own, confuser).reshape(n, 2 * m)
    X = np.hstack([X, rng.random((n, 8)) < 0.3]).astype(np.float32)
    return sp.csr_matrix(normalize(X)), sp.csr_matrix(Y)


def test_unbiased_losses_fit_labels_removed_at_random_better_than_the_plain_loss(tmp_path):
    """Positives dropped with known propensities from 0.9 to 0.1; measured on the complete test labels."""
    rng = np.random.default_rng(0)
    m = 8
    X, Y = _missing_label_corpus(rng, 800)
    Xt, Yt = _missing_label_corpus(rng, 400)
    p = np.geomspace(0.9, 0.1, m)
    observed = sp.csr_matrix(Y.toarray() * (rng.random(Y.shape) < p))  # documents stay, as untagged negatives
    (tmp_path / "p.json").write_text(json.dumps({str(j): float(p[j]) for j in range(m)}))
    recall = {}
    for loss in ("squared-hinge", "propensity", "unbiased-balanced"):
        weighting = "none" if loss == "squared-hinge" else loss
        missing = MissingLabelsConfig(weighting=weighting, propensity_file=tmp_path / "p.json")
        missing.bind_labels([str(j) for j in range(m)])
        model = train_xlinear(X, observed, XLinearConfig(), progress=False, missing_labels=missing)
        recall[loss] = evaluate(model.predict(Xt, k=1).labels, Yt, (1,))["macro-R@1"]
    assert recall["propensity"] > recall["squared-hinge"] + 2.0, recall
    assert recall["unbiased-balanced"] > recall["squared-hinge"] + 2.0, recall


def gzipped_corpus(data: Path, train: Path, test: Path) -> Path:
    """A corpus folder as `xtag data` writes one: train.jsonl.gz and test.jsonl.gz."""
    data.mkdir()
    for src, name in ((train, "train.jsonl.gz"), (test, "test.jsonl.gz")):
        with gzip.open(data / name, "wt") as fh:
            fh.write(src.read_text())
    return data


def test_drop_labels_keeps_positives_at_their_propensity_and_leaves_test_alone(tmp_path, corpus_files):
    from xtag.training.data.drop_labels import drop_labels

    train, test = corpus_files
    data = gzipped_corpus(tmp_path / "data", train, test)
    stats = drop_labels(data, tmp_path / "a", seed=3)
    again = drop_labels(data, tmp_path / "b", seed=3)
    assert (tmp_path / "a" / "train.jsonl.gz").read_bytes() != b""
    with (
        gzip.open(tmp_path / "a" / "train.jsonl.gz", "rt") as fa,
        gzip.open(tmp_path / "b" / "train.jsonl.gz", "rt") as fb,
    ):
        assert fa.read() == fb.read()  # reproducible from the seed
    assert stats == again
    with gzip.open(tmp_path / "a" / "test.jsonl.gz", "rt") as fh:
        assert fh.read() == test.read_text()
    p = json.loads((tmp_path / "a" / "propensities.json").read_text())
    rows = [json.loads(line) for line in train.read_text().splitlines()]
    expected = sum(p[n] for r in rows for n in set(r["labels"]))  # E[kept positives]
    assert stats["positives_before"] == sum(len(set(r["labels"])) for r in rows)
    assert abs(stats["positives_after"] - expected) < 4 * np.sqrt(expected)
    assert stats["positives_after"] < stats["positives_before"]


def test_cli_trains_with_a_weighted_loss_and_a_propensity_file(corpus_files, tmp_path):
    from typer.testing import CliRunner

    from xtag.cli import app

    train, _ = corpus_files
    (tmp_path / "p.json").write_text(json.dumps({"role::tail": 0.2}))
    help_text = CliRunner().invoke(app, ["train", "--help"], terminal_width=200).output
    assert "unbiased-balanced" in help_text and "propensity" in help_text
    run = tmp_path / "run"
    args = ["train", "--corpus", str(train), "--out", str(run), "--loss", "unbiased-balanced", "--threads", "1"]
    args += ["--propensity-file", str(tmp_path / "p.json"), "--max-leaf-size", "4", "--branching", "2", "--no-progress"]
    r = CliRunner().invoke(app, args)
    assert r.exit_code == 0, r.output
    config = json.loads((run / "config.json").read_text())
    assert config["xlinear"]["loss"] == "squared-hinge"
    assert config["missing_labels"]["weighting"] == "unbiased-balanced"
    assert config["missing_labels"]["propensity_file"] == str(tmp_path / "p.json")
    log = [json.loads(line) for line in (run / "train_log.jsonl").read_text().splitlines()]
    weights = next(e for e in log if e["event"] == "label_weights")
    assert weights["propensities_from_file"] == 1 and weights["weight_max"] > weights["weight_min"]
    assert log[-1]["event"] == "done"


def test_cli_drop_labels_writes_the_corrupted_corpus(corpus_files, tmp_path):
    from typer.testing import CliRunner

    from xtag.cli import app

    train, test = corpus_files
    data = gzipped_corpus(tmp_path / "data", train, test)
    out = tmp_path / "dropped"
    r = CliRunner().invoke(app, ["data", "drop-labels", "--data", str(data), "--out", str(out), "--seed", "1"])
    assert r.exit_code == 0, r.output
    stats = json.loads(r.stdout.strip().splitlines()[-1])  # stderr ends with what it wrote and the next command
    assert stats["seed"] == 1 and stats["positives_after"] < stats["positives_before"]
    assert {p.name for p in out.iterdir()} >= {"train.jsonl.gz", "test.jsonl.gz", "propensities.json"}


def test_weighted_head_loss_scales_only_the_positives():
    torch = pytest.importorskip("torch")
    from xtag.training.deep.losses import LabelWeightTable, weighted_pointwise_loss

    scores = torch.zeros(1, 3)
    y = torch.tensor([[1.0, 0.0, 1.0]])
    table = LabelWeightTable(np.array([3.0, 5.0, 1.0, 2.0]))
    pos = table.lookup(torch.tensor([[0, 1, 3]]))  # candidates' label ids
    bce = weighted_pointwise_loss(scores, y, "bce", pos)
    assert bce.tolist()[0] == pytest.approx([3 * np.log(2), np.log(2), 2 * np.log(2)], rel=1e-6)
    hinge = weighted_pointwise_loss(scores, y, "squared-hinge", pos, base=torch.tensor([[1.0, 1.0, 0.0]]))
    assert hinge.tolist()[0] == pytest.approx([3.0, 1.0, 0.0])
    assert torch.equal(weighted_pointwise_loss(scores, y, "bce", LabelWeightTable(None).lookup(None)), bce / pos**y)


def test_xr_transformer_level_targets_carry_the_nodes_positive_weights():
    pytest.importorskip("torch")
    from xtag.models.label_tree import ClusterChain
    from xtag.training.xr_transformer.finetune import LevelProblem, batch_targets
    from xtag.training.xr_transformer.train import relevance, shortlist

    chain = ClusterChain(ptrs=[np.array([0, 2]), np.array([0, 2, 5])], leaf_labels=np.array([3, 0, 1, 4, 2]))
    Y = sp.csr_matrix(np.array([[1, 1, 0, 1, 0], [0, 0, 1, 0, 0], [0, 0, 0, 1, 0]], np.float32))
    _, M = shortlist(chain, Y, 1, None)
    R = relevance(chain, Y, 1)
    plain = LevelProblem(level=1, Y=chain.level_targets(Y, 1), R=R, M=M)
    weighted = LevelProblem(level=1, Y=chain.level_targets(Y, 1), R=R, M=M, pos_weight=np.array([2.0, 5.0]))
    _, y, w0 = batch_targets(plain, np.array([0, 2]), neg_weight=0.5)
    _, _, w1 = batch_targets(weighted, np.array([0, 2]), neg_weight=0.5)
    assert np.allclose(w1, np.where(y > 0, w0 * np.array([2.0, 5.0]), w0))  # negatives keep α
