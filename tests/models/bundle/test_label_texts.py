"""A bundle keeps the run's label texts (label_texts.jsonl): listed and checksummed like every file, loaded into
Predictor.label_texts; a bundle without them loads as before."""

import json
import shutil

import pytest
from xtag.models.bundle.loader import load_bundle
from xtag.models.errors import XtagError
from xtag.models.label_texts import LABEL_TEXTS_FILE


def test_export_keeps_the_label_texts_and_load_reads_them(tiny_texts_bundle):
    run, bundle = tiny_texts_bundle
    manifest = json.loads((bundle / "manifest.json").read_text())
    assert LABEL_TEXTS_FILE in manifest["files"]
    assert (bundle / LABEL_TEXTS_FILE).read_bytes() == (run / "model" / LABEL_TEXTS_FILE).read_bytes()
    texts = load_bundle(bundle).predictor.label_texts
    assert texts.get("game::fps").name == "First-person shooters" and texts.get("game::fps").broader == ("game",)
    assert "game" in texts and "role::tail" not in texts  # a label no document carries; a label the file lacks


def test_a_bundle_without_label_texts_loads_as_before(tiny_bundle):
    assert not (tiny_bundle / LABEL_TEXTS_FILE).exists()
    assert load_bundle(tiny_bundle).predictor.label_texts is None


def test_changed_missing_or_unlisted_label_texts_are_refused(tiny_texts_bundle, tiny_bundle, tmp_path):
    changed = shutil.copytree(tiny_texts_bundle[1], tmp_path / "changed")
    with (changed / LABEL_TEXTS_FILE).open("a") as fh:
        fh.write('{"id": "extra"}\n')
    with pytest.raises(XtagError, match=f"checksum mismatch for {LABEL_TEXTS_FILE}"):
        load_bundle(changed)
    missing = shutil.copytree(tiny_texts_bundle[1], tmp_path / "missing")
    (missing / LABEL_TEXTS_FILE).unlink()
    with pytest.raises(XtagError, match=f"file {LABEL_TEXTS_FILE} listed in the manifest is missing"):
        load_bundle(missing)
    unlisted = shutil.copytree(tiny_bundle, tmp_path / "unlisted")
    shutil.copyfile(tiny_texts_bundle[1] / LABEL_TEXTS_FILE, unlisted / LABEL_TEXTS_FILE)
    with pytest.raises(XtagError, match=f"{LABEL_TEXTS_FILE} not listed in the manifest"):
        load_bundle(unlisted)
