"""Every number a bundle holds is checked at load, not only its index arrays (issue 38): a vocabulary column out
of range, a negative idf, a label name given twice or a beam of 10^9, in a bundle re-hashed after the edit,
is refused by load_bundle with an XtagError naming the file, the field and the value."""

from __future__ import annotations

import shutil

import numpy as np
import pytest
from xtag.models.bundle.loader import load_bundle
from xtag.models.errors import XtagError
from xtag.models.files import index_bounds

from tests.conftest import edit_bundle


def set_column(value):
    def change(vocab: dict) -> dict:
        vocab["python"] = value
        return vocab

    return change


def same_column(vocab: dict) -> dict:
    vocab["python"] = vocab["audio"]
    return vocab


def name_twice(labels: dict) -> dict:
    labels["names"][3] = labels["names"][0]
    return labels


def negative(a: np.ndarray) -> np.ndarray:
    a = a.copy()
    a[5] = -0.5
    return a


def setting(name: str, value):
    def change(config: dict) -> dict:
        config[name] = value
        return config

    return change


CASES = {
    "column-50000000": ("features/tfidf/vocabulary.json", set_column(50_000_000), ["'python'", "50000000"]),
    "column-minus-5": ("features/tfidf/vocabulary.json", set_column(-5), ["'python'", "-5"]),
    "column-1.5": ("features/tfidf/vocabulary.json", set_column(1.5), ["'python'", "1.5", "not an integer"]),
    "column-twice": ("features/tfidf/vocabulary.json", same_column, ["'python'", "more than one term"]),
    "negative-idf": ("features/tfidf/idf.npy", negative, ["idf[5]", "-0.5", "negative"]),
    "label-name-twice": ("labels.json", name_twice, ["names", "given to labels 0 and 3"]),
    "beam-size-1e9": ("rankers/config.json", setting("beam_size", 10**9), ["beam_size", "1000000000", "label count"]),
}


@pytest.mark.parametrize(("rel", "change", "words"), CASES.values(), ids=CASES.keys())
def test_a_bundle_number_out_of_bounds_is_refused_naming_file_field_and_value(
    tiny_bundle, tmp_path, rel, change, words
):
    bundle = edit_bundle(shutil.copytree(tiny_bundle, tmp_path / "b"), rel, change)
    with pytest.raises(XtagError) as refused:
        load_bundle(bundle)
    message = str(refused.value)
    assert rel in message and all(w in message for w in words), message


def test_nan_anywhere_is_refused_by_load_bundle_itself(tiny_bundle, tmp_path):
    """The NaN scan is part of the one load path, not of the server alone: `xtag predict` and `evaluate` load
    through it too. The engine's weights are what predictions read (the level files only explanations)."""
    nan = edit_bundle(shutil.copytree(tiny_bundle, tmp_path / "b"), "rankers/engine/bias.npy", lambda a: a * np.nan)
    with pytest.raises(XtagError, match=r"non-finite values \(NaN or inf\) in rankers/engine/bias\.npy"):
        load_bundle(nan)


def test_the_beam_bound_leaves_the_default_beam_to_a_bundle_of_few_labels():
    """A corpus of 3 labels trains with the default beam 10: such a bundle still loads; 11 does not."""
    index_bounds.beam("rankers/config.json", "beam_size", index_bounds.SMALL_BEAM, 3)
    index_bounds.beam("rankers/config.json", "beam_size", 595, 595)
    with pytest.raises(XtagError, match="beam_size 596 is above the bundle's label count"):
        index_bounds.beam("rankers/config.json", "beam_size", 596, 595)
    with pytest.raises(XtagError, match=f"at most {index_bounds.SMALL_BEAM}"):
        index_bounds.beam("rankers/config.json", "beam_size", index_bounds.SMALL_BEAM + 1, 3)


def test_a_run_asked_for_a_beam_wider_than_its_labels_exports_one_that_loads(corpus_files, tmp_path):
    """The trainer keeps at most the label count (a wider beam searches nothing more), so the load's bound never
    refuses a bundle it exported: 12 labels, beam 40 asked, 12 kept."""
    from xtag.models.features.tfidf import TfidfConfig
    from xtag.training.config import TrainConfig
    from xtag.training.export.export_run import export_run
    from xtag.training.run import train_run
    from xtag.training.tree.build import TreeConfig
    from xtag.training.xlinear.config import XLinearConfig

    tree = TreeConfig(branching=2, max_leaf_size=4)
    config = TrainConfig(
        corpus=corpus_files[0], tfidf=TfidfConfig(min_df=1), xlinear=XLinearConfig(n_jobs=1, tree=tree, beam_size=40)
    )
    train_run(config, tmp_path / "run", progress=False)
    export_run(tmp_path / "run", tmp_path / "bundle")
    predictor = load_bundle(tmp_path / "bundle").predictor
    assert predictor.n_labels == 12 and predictor.model.config.beam_size == 12


def test_nan_in_a_re_rankers_first_stage_is_refused_by_the_first_stages_own_load(lamp_bundle, tmp_path):
    """The outer bundle leaves its first stage's files to that stage's load_bundle (each file scanned once)."""
    outer = shutil.copytree(lamp_bundle[1], tmp_path / "b")
    edit_bundle(outer, "first_stage/rankers/engine/bias.npy", lambda a: a * np.nan)
    edit_bundle(outer / "first_stage", "rankers/engine/bias.npy", lambda a: a)  # the first stage's manifest too
    edit_bundle(outer, "first_stage/manifest.json", lambda manifest: manifest)
    with pytest.raises(XtagError, match=r"first_stage: a corrupt bundle: non-finite .* rankers/engine/bias\.npy"):
        load_bundle(outer)
