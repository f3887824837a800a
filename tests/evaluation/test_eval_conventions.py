"""The XMC evaluation convention (issue 14), by hand: unseen test labels are misses that still count.

Model labels 0-4 (labels 3 and 4 never occur in the test split); column 5 is a test label the model
never saw in training. Four documents, predictions best first:

    doc  truth     top 3
    d0   {0, 5}    0 1 2
    d1   {1}       2 1 3
    d2   {2, 5}    3 2 -1
    d3   {0}       1 3 0
"""

import json

import numpy as np
import pytest
import scipy.sparse as sp
from typer.testing import CliRunner
from xtag.corpus.files import Corpus
from xtag.evaluation.evaluate import ground_truth
from xtag.models.labels import LabelVocab
from xtag.models.metrics import CONVENTIONS, bucket_metrics, evaluate, jain_propensities, propensities_with_unseen

from xtag.cli import app

TRUTH = [[0, 5], [1], [2, 5], [0]]
Y = sp.csr_matrix((np.ones(6, np.float32), np.array([0, 5, 1, 2, 5, 0]), np.array([0, 2, 3, 5, 6])), shape=(4, 6))
Y_KNOWN = Y[:, :5]  # the old view: the unseen label's mentions dropped
PRED = np.array([[0, 1, 2], [2, 1, 3], [3, 2, -1], [1, 3, 0]])
PROP = np.array([0.5, 0.25, 0.8, 0.9, 0.7, 0.2])  # the unseen label is the rarest: 1/p = 5
D2, D3 = 1 / np.log2(3), 0.5  # discounts of ranks 2 and 3


def test_precision_recall_ndcg_count_unseen_labels_as_misses():
    m = evaluate(PRED, Y, (1, 3))
    assert m["P@1"] == pytest.approx(25.0)  # only d0's first label is relevant
    assert m["P@3"] == pytest.approx(100 * 4 / 12)  # one hit per document
    assert m["R@1"] == pytest.approx(100 * (1 / 2) / 4)  # d0 found 1 of its 2 labels
    assert m["R@3"] == pytest.approx(100 * (1 / 2 + 1 + 1 / 2 + 1) / 4)
    ndcg = (1 / (1 + D2) + D2 + D2 / (1 + D2) + D3) / 4  # d0, d2 have two true labels in the ideal DCG
    assert m["nDCG@3"] == pytest.approx(100 * ndcg)
    old = evaluate(PRED, Y_KNOWN, (1, 3), convention="known-labels")
    assert old["P@3"] == m["P@3"] and old["R@3"] == pytest.approx(100.0) and old["R@1"] == pytest.approx(25.0)


def test_psp_is_normalised_over_all_test_labels_including_unseen_ones():
    m = evaluate(PRED, Y, (1, 3), PROP)
    # gains: d0 label 0 (2), d1 label 1 (4), d2 label 2 (1.25), d3 label 0 (2); @1 only d0's.
    # ideal @1: 5 (d0: unseen label), 4, 5 (d2: unseen label), 2; @3: 5+2, 4, 5+1.25, 2.
    assert m["PSP@1"] == pytest.approx(100 * 2 / 16)
    assert m["PSP@3"] == pytest.approx(100 * 9.25 / 19.25)
    ps_dcg = 2 + 4 * D2 + 1.25 * D2 + 2 * D3
    ideal_dcg = (5 + 2 * D2) + 4 + (5 + 1.25 * D2) + 2
    assert m["PSnDCG@3"] == pytest.approx(100 * ps_dcg / ideal_dcg)


def test_macro_metrics_and_coverage_average_over_the_test_labels():
    m = evaluate(PRED, Y, (1, 3))
    # @3 per label (test labels 0, 1, 2, 5): predicted 2, 3, 3, 0; tp 2, 1, 1, 0; support 2, 1, 1, 2.
    assert m["macro-R@3"] == pytest.approx(100 * (1 + 1 + 1 + 0) / 4)
    assert m["macro-P@3"] == pytest.approx(100 * (1 + 1 / 3 + 1 / 3 + 0) / 4)
    assert m["macro-F1@3"] == pytest.approx(100 * (1 + 0.5 + 0.5 + 0) / 4)
    assert m["coverage@3"] == pytest.approx(75.0)
    assert m["macro-R@1"] == pytest.approx(100 * (1 / 2) / 4) and m["coverage@1"] == pytest.approx(25.0)
    old = evaluate(PRED, Y_KNOWN, (1, 3), convention="known-labels")  # over the five model labels
    assert old["macro-R@3"] == pytest.approx(60.0) and old["coverage@3"] == pytest.approx(60.0)
    assert old["coverage@1"] == pytest.approx(20.0)


def test_buckets_average_over_the_same_labels_as_evaluate():
    m = evaluate(PRED, Y, (3,))
    buckets = np.array([0, 0, 1, 1, 2, 2])  # the unseen label and label 4 in the tail
    b = bucket_metrics(PRED, Y, 3, buckets)
    assert [b[x]["averaged"] for x in ("head", "torso", "tail")] == [2, 1, 1]
    assert sum(row["averaged"] * row["macro-R@3"] for row in b.values()) / 4 == pytest.approx(m["macro-R@3"])


def test_unseen_label_propensity_is_the_formula_at_zero_training_documents():
    p = propensities_with_unseen(np.array([3.0, 40.0]), 2, 1000)
    assert p.shape == (4,) and p[2] == p[3] == pytest.approx(jain_propensities(np.array([0.0]), 1000)[0])
    assert 1 / p[2] > 1 / p[0] > 1 / p[1]


def test_ground_truth_keeps_unseen_mentions_as_extra_columns():
    vocab = LabelVocab(["a", "b", "c", "d", "e"], [5, 4, 3, 2, 1], 20)
    corpus = Corpus(ids=["0", "1", "2", "3"], texts=["t"] * 4, labels=[["a", "zz"], ["b"], ["c", "zz", "zz"], ["a"]])
    truth = ground_truth(corpus, vocab)
    assert truth.names[-1] == "zz" and truth.Y.shape == (4, 6)
    assert (truth.Y.toarray() == Y.toarray()).all()
    assert truth.unseen_mentions == 2 and truth.unseen_labels == 1 and truth.frequencies[-1] == 0
    assert truth.propensity[-1] == pytest.approx(jain_propensities(np.array([0.0]), 20)[0])
    old = ground_truth(corpus, vocab, "known-labels")
    assert old.Y.shape == (4, 5) and old.unseen_mentions == 2 and len(old.propensity) == 5


def test_cli_evaluate_names_the_convention(tiny_bundle, corpus_files, tmp_path):
    rows = [json.loads(line) for line in corpus_files[1].read_text().splitlines()][:30]
    for row in rows[:10]:
        row["labels"] = row["labels"] + ["never::seen"]
    test = tmp_path / "test.jsonl"
    test.write_text("".join(json.dumps(r) + "\n" for r in rows))
    runner = CliRunner()
    out = {}
    for convention in ("xmc", "known-labels"):
        path = tmp_path / f"{convention}.json"
        base = ["evaluate", str(tiny_bundle), "--corpus", str(test), "--no-progress", "--json", str(path)]
        r = runner.invoke(app, base + ["--convention", convention])
        assert r.exit_code == 0, r.output
        assert CONVENTIONS[convention] in r.output
        assert "10 mentions of 1 label unknown to the model" in r.output
        out[convention] = json.loads(path.read_text())
        assert out[convention]["convention"] == convention
    assert out["xmc"]["P@1"] == out["known-labels"]["P@1"]
    assert out["xmc"]["R@5"] < out["known-labels"]["R@5"]
    r = runner.invoke(app, ["evaluate", str(tiny_bundle), "--corpus", str(test), "--convention", "pyxclib"])
    assert r.exit_code == 2 and "unknown evaluation convention" in r.output
