"""Per-document label filters (models/inference/label_filter.py): exclude, include, branches, exclude-self."""

import numpy as np
import pytest
from xtag.models.bundle.loader import load_bundle
from xtag.models.inference import label_filter
from xtag.models.inference.label_filter import LabelFilter, label_positions, self_filters
from xtag.models.label_texts import LabelText, LabelTexts

TEXTS = ["shooter weapons arena frag", "genome protein dna", "python script"]


@pytest.fixture(scope="module")
def predictor(tiny_bundle):
    return load_bundle(tiny_bundle).predictor


def test_exclude_drops_the_labels_and_moves_the_rest_up(predictor):
    """The top k among allowed labels: the unfiltered list without the excluded ones, same scores, same order."""
    L = predictor.n_labels
    plain = predictor.predict(TEXTS, k=L)
    dropped = plain.labels[0, [0, 2]]
    out = predictor.predict(TEXTS, k=3, filters=[LabelFilter.of(exclude=dropped.tolist()), None, None])
    rest = [j for j in plain.labels[0] if j not in dropped]
    np.testing.assert_array_equal(out.labels[0], rest[:3])
    np.testing.assert_array_equal(out.labels[1:], plain.labels[1:, :3])
    np.testing.assert_allclose(out.scores[1:], plain.scores[1:, :3])


def test_a_small_include_is_scored_exactly(predictor):
    """An include is scored label by label (XR-Linear: each label's path), so it answers the labels' own scores
    even where a narrow beam would not reach them, best first."""
    L = predictor.n_labels
    everything = predictor.predict(TEXTS[:1], k=L, beam_size=L)
    wanted = everything.labels[0, [1, 4, L - 1]]
    out = predictor.predict(TEXTS[:1], k=2, beam_size=1, filters=[LabelFilter.of(include=wanted.tolist())])
    np.testing.assert_array_equal(out.labels[0], everything.labels[0, [1, 4]])
    np.testing.assert_allclose(out.scores[0], everything.scores[0, [1, 4]], rtol=1e-5)


def test_a_large_include_over_fetches_with_a_wider_beam(predictor, monkeypatch):
    """Above EXACT_INCLUDE_MAX (or on a family that cannot score single labels) the search is widened and the
    included labels among its candidates are kept, in the model's order."""
    monkeypatch.setattr(label_filter, "EXACT_INCLUDE_MAX", 0)
    L = predictor.n_labels
    plain = predictor.predict(TEXTS[:1], k=L, beam_size=L)
    wanted = plain.labels[0, 3:]
    out = predictor.predict(TEXTS[:1], k=2, filters=[LabelFilter.of(include=wanted.tolist())])
    np.testing.assert_array_equal(out.labels[0], plain.labels[0, 3:5])


def test_an_include_that_leaves_fewer_than_k_labels_answers_with_what_there_is(predictor):
    """Padding (-1, -inf) as the beam search pads; never NaN; excluded labels leave the include too."""
    plain = predictor.predict(TEXTS[:1], k=3)
    a, b = plain.labels[0, :2].tolist()
    for include_max in (label_filter.EXACT_INCLUDE_MAX, 0):  # exact and widened alike
        label_filter.EXACT_INCLUDE_MAX, saved = include_max, label_filter.EXACT_INCLUDE_MAX
        try:
            out = predictor.predict(TEXTS[:1], k=4, filters=[LabelFilter.of(exclude=[a], include=[a, b])])
        finally:
            label_filter.EXACT_INCLUDE_MAX = saved
        assert out.labels[0].tolist() == [b, -1, -1, -1]
        assert not np.isnan(out.scores).any() and np.isneginf(out.scores[0, 1:]).all()
    empty = predictor.predict(TEXTS[:1], k=2, filters=[LabelFilter.of(include=[])])
    assert empty.labels.tolist() == [[-1, -1]]


def test_references_are_positions_or_names_and_unknown_ones_are_named(predictor):
    vocab = predictor.vocab
    positions, unknown = label_positions([0, vocab.names[2], "no-such-label", 10**6, -1], vocab, None)
    assert positions.tolist() == [0, 2]
    assert unknown == ["no-such-label", 10**6, -1]


def test_a_label_with_narrower_labels_brings_its_whole_branch(predictor):
    """With the bundle's label texts, `broader` makes a branch; labels the model lacks are skipped."""
    names = predictor.vocab.names
    texts = LabelTexts(
        [
            LabelText(names[0]),
            LabelText(names[1], broader=(names[0],)),
            LabelText("not-in-the-model", broader=(names[1],)),
            LabelText(names[3], broader=("not-in-the-model",)),
            LabelText(names[4]),
        ]
    )
    assert label_positions([names[0]], predictor.vocab, texts)[0].tolist() == [0, 1, 3]
    assert label_positions([1], predictor.vocab, texts)[0].tolist() == [1, 3]
    assert label_positions([names[0]], predictor.vocab, None)[0].tolist() == [0]


def test_exclude_self_removes_a_documents_own_id_when_it_is_a_label(predictor):
    names = predictor.vocab.names
    filters = self_filters([names[5], "doc7", 5], predictor.vocab)
    assert filters[0].exclude.tolist() == [5] and filters[1] is None and filters[2] is None
    plain = predictor.predict([TEXTS[0]], k=3)
    own = names[int(plain.labels[0, 0])]
    out = predictor.predict([TEXTS[0]], k=3, filters=self_filters([own], predictor.vocab))
    assert int(plain.labels[0, 0]) not in out.labels[0].tolist()
    np.testing.assert_array_equal(out.labels[0, :2], plain.labels[0, 1:])
