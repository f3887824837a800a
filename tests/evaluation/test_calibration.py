import json
import shutil

import numpy as np
import pytest
from typer.testing import CliRunner
from xtag.models.bundle.loader import load_bundle
from xtag.models.errors import XtagError
from xtag.models.inference.calibration import Calibration, expected_calibration_error, fit_isotonic

from tests.conftest import make_rows, write_jsonl
from xtag.cli import app


def miscalibrated(n: int, seed: int):
    """True probabilities p; the scores a model would give, p ** 0.25 (over-confident); outcomes ~ Bernoulli(p)."""
    rng = np.random.default_rng(seed)
    p = rng.random(n)
    return p**0.25, rng.random(n) < p


def test_isotonic_is_monotone_and_lowers_ece_on_held_out_data():
    s_fit, r_fit = miscalibrated(20000, 0)
    s_new, r_new = miscalibrated(20000, 1)
    cal = fit_isotonic(s_fit, r_fit)
    grid = np.linspace(-0.5, 1.5, 1001)
    assert np.all(np.diff(cal.apply(grid)) >= 0)
    before, after = expected_calibration_error(s_new, r_new), expected_calibration_error(cal.apply(s_new), r_new)
    assert before > 15 and after < 2.5


def test_stored_breakpoints_reproduce_scikit_learn(tmp_path):
    from sklearn.isotonic import IsotonicRegression

    s, r = miscalibrated(5000, 2)
    cal = fit_isotonic(s, r, {"documents": 1})
    cal.save(tmp_path / "c.json")
    loaded = Calibration.load(tmp_path / "c.json")
    ref = IsotonicRegression(out_of_bounds="clip", y_min=0, y_max=1).fit(s, r)
    probe = np.linspace(0, 1, 777)
    assert np.allclose(loaded.apply(probe), ref.predict(probe)) and loaded.fitted_on == {"documents": 1}
    scores = np.array([[0.9, 0.5, -np.inf]], dtype=np.float32)
    out = loaded.apply(scores)
    assert out.dtype == np.float32 and out[0, 2] == -np.inf


def test_ece_by_hand_and_bad_files(tmp_path):
    # two bins used: 0.15 (relevant 1 of 2 → |0.5 − 0.15|) and 0.95 (relevant 2 of 2 → |1 − 0.95|)
    ece = expected_calibration_error(np.array([0.15, 0.15, 0.95, 0.95]), np.array([1, 0, 1, 1]), n_bins=10)
    assert ece == pytest.approx(100 * (0.5 * 0.35 + 0.5 * 0.05))
    (tmp_path / "bad.json").write_text(json.dumps({"x": [0.1, 0.5], "y": [0.9, 0.2]}))
    with pytest.raises(XtagError, match="non-decreasing"):
        Calibration.load(tmp_path / "bad.json")


def test_calibrate_command_writes_a_checksummed_calibration(tiny_bundle, tmp_path):
    bundle = tmp_path / "bundle"
    shutil.copytree(tiny_bundle, bundle)
    raw = load_bundle(bundle).predictor
    val = write_jsonl(tmp_path / "val.jsonl", make_rows(150, seed=3))
    runner = CliRunner()
    r = runner.invoke(app, ["calibrate", str(bundle), "--corpus", str(val), "--no-progress"])
    assert r.exit_code == 0, r.output
    manifest = json.loads((bundle / "manifest.json").read_text())
    assert "calibration.json" in manifest["files"] and "training" in manifest  # other entries are kept
    assert manifest["calibration"]["documents"] == 150
    b = load_bundle(bundle)
    assert b.predictor.calibration is not None
    texts = ["email smtp inbox", "python module interpreter gcc"]
    plain, cal = raw.predict(texts, k=5), b.predictor.predict(texts, k=5)
    assert np.array_equal(plain.labels, cal.labels)
    assert np.allclose(cal.scores, b.predictor.calibration.apply(plain.scores))
    assert np.allclose(b.predictor.predict(texts, k=5, calibrated=False).scores, plain.scores)
    # a hand-edited calibration is refused like any other modified file
    original = (bundle / "calibration.json").read_text()
    data = json.loads(original)
    data["y"] = [min(1.0, v + 0.01) for v in data["y"]]
    (bundle / "calibration.json").write_text(json.dumps(data))
    with pytest.raises(XtagError, match="checksum mismatch for calibration.json"):
        load_bundle(bundle)
    (bundle / "calibration.json").write_text(original)
    r = runner.invoke(app, ["calibrate", str(bundle), "--remove"])
    assert r.exit_code == 0, r.output
    assert load_bundle(bundle).predictor.calibration is None
    assert "calibration" not in json.loads((bundle / "manifest.json").read_text())
    # a calibration.json that the manifest does not list is refused
    (bundle / "calibration.json").write_text(original)
    with pytest.raises(XtagError, match="not listed in the manifest"):
        load_bundle(bundle)
