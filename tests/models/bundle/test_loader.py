import json
import shutil

import numpy as np
import pytest
from xtag.models.bundle.loader import load_bundle
from xtag.models.errors import XtagError


def test_bundle_is_data_only_and_self_describing(tiny_bundle):
    files = [p for p in tiny_bundle.rglob("*") if p.is_file()]
    assert {p.suffix for p in files} <= {".json", ".npz", ".npy"}
    manifest = json.loads((tiny_bundle / "manifest.json").read_text())
    assert manifest["format_version"] == 2 and manifest["model_kind"] == "xlinear"
    assert manifest["components"] == [
        {"type": "tfidf", "path": "features/tfidf"},
        {"type": "label-tree", "path": "tree"},
        {"type": "rankers", "path": "rankers"},
    ]
    assert manifest["label_count"] == 12
    assert set(manifest["files"]) == {str(p.relative_to(tiny_bundle)) for p in files} - {"manifest.json"}
    assert {"numpy", "scipy", "scikit-learn", "xtag"} <= set(manifest["versions"])


def test_loaded_bundle_predicts_named_labels(tiny_bundle):
    bundle = load_bundle(tiny_bundle)
    preds = bundle.predictor.predict(["shooter weapons arena frag", "genome protein dna"], k=2)
    named = bundle.predictor.named(preds)
    assert named[0][0][1] == "game::fps" and named[1][0][1] == "sci::bio"
    assert named[0][0][2] >= named[0][1][2]


def copy(bundle, tmp_path):
    target = tmp_path / "b"
    shutil.copytree(bundle, target)
    return target


def test_tampered_file_is_refused(tiny_bundle, tmp_path):
    b = copy(tiny_bundle, tmp_path)
    with np.load(b / "rankers" / "level_1.npz") as z:
        arrays = dict(z)
    arrays["bias"] = arrays["bias"] + 1
    np.savez(b / "rankers" / "level_1.npz", **arrays)
    with pytest.raises(XtagError, match="checksum mismatch for rankers/level_1.npz"):
        load_bundle(b)


def test_other_format_version_is_refused(tiny_bundle, tmp_path):
    b = copy(tiny_bundle, tmp_path)
    manifest = json.loads((b / "manifest.json").read_text())
    manifest["format_version"] = 3
    (b / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(XtagError, match="format version 3 is not supported"):
        load_bundle(b)


def test_missing_file_and_missing_manifest(tiny_bundle, tmp_path):
    b = copy(tiny_bundle, tmp_path)
    (b / "labels.json").unlink()
    with pytest.raises(XtagError, match="labels.json listed in the manifest is missing"):
        load_bundle(b)
    (b / "manifest.json").unlink()
    with pytest.raises(XtagError, match="not an xtag bundle"):
        load_bundle(b)


def as_format_1(bundle, target):
    """A copy of `bundle` with the manifest the format-1 writer produced: no component list, version 1."""
    shutil.copytree(bundle, target)
    manifest = json.loads((target / "manifest.json").read_text())
    del manifest["components"]
    manifest["format_version"] = 1
    (target / "manifest.json").write_text(json.dumps(manifest, indent=2))
    return target


@pytest.mark.parametrize("fixture", ["tiny_bundle", "xr_bundle", "lightxml_bundle"])
def test_format_1_bundle_still_serves_the_same_predictions(fixture, request, tmp_path):
    bundle = request.getfixturevalue(fixture)
    bundle = bundle[1] if isinstance(bundle, tuple) else bundle
    old = load_bundle(as_format_1(bundle, tmp_path / "v1"))
    new = load_bundle(bundle)
    assert old.manifest["format_version"] == 1
    assert [c["type"] for c in old.manifest["components"]] == [c["type"] for c in new.manifest["components"]]
    texts = ["shooter weapons arena frag", "genome protein dna", "kernel driver"]
    a, b = old.predictor.predict(texts, k=3), new.predictor.predict(texts, k=3)
    np.testing.assert_array_equal(a.labels, b.labels)
    np.testing.assert_allclose(a.scores, b.scores, rtol=1e-6)


def test_component_paths_must_stay_inside_the_bundle(tiny_bundle, tmp_path):
    b = copy(tiny_bundle, tmp_path)
    manifest = json.loads((b / "manifest.json").read_text())
    manifest["components"][0]["path"] = "../features/tfidf"
    (b / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(XtagError, match="not a relative path inside the bundle"):
        load_bundle(b)
    manifest["components"][0] = {"type": "pickle", "path": "features/tfidf"}
    (b / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(XtagError, match="is not one of"):
        load_bundle(b)


def test_engine_layout_ships_in_the_bundle_and_is_memory_mapped(tiny_bundle):
    """Export writes the compiled engine's layout; loading maps it (worker processes share its pages) and it
    predicts exactly what the layout rebuilt from the weights predicts."""
    from xtag.models.engine import CompiledLevels, engine_beam_search

    assert (tiny_bundle / "rankers" / "engine" / "layout.json").is_file()
    bundle = load_bundle(tiny_bundle)
    model = bundle.predictor.model
    assert any(isinstance(a.base, np.memmap) for a in model.compiled.arrays if a.size)
    X = bundle.predictor.featurizer.transform(["shooter weapons arena frag", "genome protein dna", "nothing known"])
    rebuilt = CompiledLevels.build(model.levels, model.chain)
    a, b = model.predict(X, k=4), engine_beam_search(X, rebuilt, model.config.beam_size, 4, model.config.post_processor)
    np.testing.assert_array_equal(a.labels, b.labels)
    np.testing.assert_array_equal(a.scores, b.scores)


def test_a_manifest_label_count_that_disagrees_with_the_labels_is_refused(tiny_bundle, tmp_path):
    b = copy(tiny_bundle, tmp_path)
    manifest = json.loads((b / "manifest.json").read_text())
    manifest["label_count"] = 13
    (b / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(XtagError, match="manifest label_count 13 disagrees with labels.json, which has 12 labels"):
        load_bundle(b)
