import json
import shutil

import numpy as np
import pytest

from models.bundle import load_bundle
from models.errors import XtagError


def test_bundle_is_data_only_and_self_describing(tiny_bundle):
    files = [p for p in tiny_bundle.rglob("*") if p.is_file()]
    assert {p.suffix for p in files} <= {".json", ".npz", ".npy"}
    manifest = json.loads((tiny_bundle / "manifest.json").read_text())
    assert manifest["format_version"] == 1 and manifest["model_kind"] == "xlinear"
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
    manifest["format_version"] = 2
    (b / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(XtagError, match="format version 2 is not supported"):
        load_bundle(b)


def test_missing_file_and_missing_manifest(tiny_bundle, tmp_path):
    b = copy(tiny_bundle, tmp_path)
    (b / "labels.json").unlink()
    with pytest.raises(XtagError, match="labels.json listed in the manifest is missing"):
        load_bundle(b)
    (b / "manifest.json").unlink()
    with pytest.raises(XtagError, match="not an xtag bundle"):
        load_bundle(b)
