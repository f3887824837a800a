"""Training-time warnings for small data, and LightXML's minimum validation size for model selection."""

import numpy as np
from xtag.training.data.small_data import MIN_DOCUMENTS, MIN_FEATURES, small_data_warnings


def test_each_kind_of_small_data_gets_its_own_warning():
    assert small_data_warnings(MIN_DOCUMENTS, MIN_FEATURES, np.full(10, 3)) == []
    few_docs, few_features, rare = small_data_warnings(30, 30, np.array([1, 1, 2, 5]))
    assert "30 training documents" in few_docs
    assert "30 features" in few_features
    assert "3 of 4 labels have fewer than 3 training documents" in rare
    assert small_data_warnings(5000, 5000, np.array([1, 5, 5, 5])) == []  # a few rare labels are normal


def test_lightxml_does_not_select_checkpoints_on_a_handful_of_documents():
    from xtag.training.lightxml.validation import selection_split, validation_split

    events = []
    train, val = selection_split(40, 0.05, 50, 0, events.append)  # 2 held out: too few to pick a checkpoint
    assert len(val) == 0 and np.array_equal(train, np.arange(40))
    assert events[0]["event"] == "warning" and "min_val_documents=50" in events[0]["message"]

    events.clear()
    train, val = selection_split(2000, 0.05, 50, 0, events.append)
    expected = validation_split(2000, 0.05, 0)
    assert np.array_equal(train, expected[0]) and np.array_equal(val, expected[1]) and not events
