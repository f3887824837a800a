import numpy as np
import pytest
import scipy.sparse as sp
from xtag.models.metrics import evaluate, jain_propensities, occurrence_recall

# 2 documents, 4 labels. Doc 0 truth {0, 2}; doc 1 truth {1}.
Y = sp.csr_matrix(np.array([[1, 0, 1, 0], [0, 1, 0, 0]], dtype=np.float32))
PRED = np.array([[2, 3, 0], [3, 1, -1]])


def test_precision_ndcg_recall_by_hand():
    m = evaluate(PRED, Y, ks=(1, 2, 3))
    assert m["P@1"] == pytest.approx(50.0)  # hit, miss
    assert m["P@2"] == pytest.approx(50.0)  # (1 + 1) / 4
    assert m["P@3"] == pytest.approx(100 * 3 / 6)
    d = 1 / np.log2(3)
    # doc0 @2: dcg 1, idcg 1 + d; doc1 @2: dcg d, idcg 1
    assert m["nDCG@2"] == pytest.approx(100 * (1 / (1 + d) + d) / 2)
    assert m["R@2"] == pytest.approx(100 * (0.5 + 1.0) / 2)
    assert m["R@3"] == pytest.approx(100.0)


def test_macro_metrics_and_coverage_by_hand():
    m = evaluate(PRED, Y, ks=(1, 2), convention="known-labels")  # over all 4 model labels
    # @1 predictions: doc0→2 (tp), doc1→3 (fp). Per label P: [0, 0, 1, 0]; R: [0, 0, 1, 0];
    # F1 = 2tp/(pred+support): label2 = 2/2 = 1.
    assert m["macro-P@1"] == pytest.approx(25.0)
    assert m["macro-R@1"] == pytest.approx(25.0)
    assert m["macro-F1@1"] == pytest.approx(25.0)
    assert m["coverage@1"] == pytest.approx(25.0)
    # @2: doc0 → {2, 3}, doc1 → {3, 1}. tp: label1, label2. predicted: l1 1, l2 1, l3 2.
    assert m["macro-P@2"] == pytest.approx(100 * (1 + 1) / 4)
    assert m["macro-R@2"] == pytest.approx(100 * (1 + 1) / 4)
    assert m["coverage@2"] == pytest.approx(50.0)
    xmc = evaluate(PRED, Y, ks=(1, 2))  # over the 3 labels with test documents (label 3 has none)
    assert xmc["macro-R@2"] == pytest.approx(100 * 2 / 3) and xmc["coverage@1"] == pytest.approx(100 / 3)


def test_psp_is_normalised_by_the_ideal_ranking():
    prop = np.array([0.5, 0.25, 0.8, 0.9])
    m = evaluate(PRED, Y, ks=(1,), propensity=prop)
    # gains: doc0 label2 hit → 1/0.8; doc1 miss. ideal: doc0 best true 1/0.5, doc1 1/0.25.
    assert m["PSP@1"] == pytest.approx(100 * (1 / 0.8) / (2 + 4))


def test_jain_propensity_formula():
    p = jain_propensities(np.array([0, 10, 1000]), n_docs=10000)
    C = (np.log(10000) - 1) * 2.5**0.55
    assert p[1] == pytest.approx(1 / (1 + C * np.exp(-0.55 * np.log(11.5))))
    assert p[0] < p[1] < p[2] < 1


def test_too_few_predictions_is_an_error():
    from xtag.models.errors import XtagError

    with pytest.raises(XtagError, match="at least 5"):
        evaluate(PRED, Y, ks=(5,))


def test_set_metrics_at_a_threshold_count_example_micro_and_macro_f1():
    from xtag.models.metrics import set_metrics

    Y = sp.csr_matrix(np.array([[1, 1, 0], [0, 0, 1]], dtype=np.float32))
    pred = np.array([[0, 2, 1], [2, 0, -1]])
    scores = np.array([[0.9, 0.6, 0.4], [0.8, 0.2, -np.inf]], dtype=np.float32)
    out = set_metrics(pred, scores, Y, 0.5)  # sets: {0, 2} for truth {0, 1}; {2} for truth {2}
    assert out["example-F1"] == pytest.approx(100 * (2 * 1 / 4 + 2 * 1 / 2) / 2)
    assert out["micro-F1"] == pytest.approx(100 * 2 * 2 / (3 + 3))
    # per label F1: label 0: 2·1/(1+1) = 1; label 1: 0 (never predicted above 0.5); label 2: 2·1/(2+1)
    assert out["macro-F1"] == pytest.approx(100 * (1 + 0 + 2 / 3) / 3)
    assert set_metrics(pred, scores, Y, 0.95) == {"example-F1": 0.0, "micro-F1": 0.0, "macro-F1": 0.0}


def test_occurrence_recall_counts_only_the_chosen_labels_pairs_found_in_the_top_k():
    # pairs of labels 1 and 2: (doc 0, 2), (doc 1, 1), (doc 1, 2); label 0's pair does not count
    Y = sp.csr_matrix(np.array([[1, 0, 1, 0], [0, 1, 1, 0]]))
    pred = np.array([[2, 0, -1], [3, 1, 2]])
    assert occurrence_recall(pred, Y, np.array([1, 2]), k=2) == pytest.approx(200 / 3)  # doc 1's label 2 is 3rd
    assert occurrence_recall(pred, Y, np.array([1, 2]), k=3) == pytest.approx(100.0)
    assert occurrence_recall(pred, Y, np.array([3]), k=3) == 0.0  # no true pair: 0, not a division by zero
