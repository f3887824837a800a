"""LaMP's export: the int8 re-ranker exported only when it ranks as the fp32 graph does (the parity gate's int8
part), and the C a bundle serves with (`--candidates`)."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import numpy as np
import pytest
from xtag.models.bundle.loader import load_bundle
from xtag.models.errors import XtagError
from xtag.training.export.export_run import export_run
from xtag.training.lamp.export import onnx_outputs
from xtag.training.onnx.optimize import set_precision

TEXTS = ["shooter weapons arena frag multiplayer", "python module pip interpreter script", "email smtp imap server"]


def test_int8_reranker_is_exported_with_its_agreement_and_serves(lamp_bundle, tmp_path):
    run, fp32 = lamp_bundle
    bundle = tmp_path / "int8"
    export_run(run, bundle, precision="int8")
    report = json.loads((bundle / "manifest.json").read_text())["export"]["int8"]
    assert report["top5_agreement_vs_fp32"] >= 0.95
    assert json.loads((bundle / "lamp" / "config.json").read_text())["precision"] == "int8"
    got = load_bundle(bundle).predictor.predict(TEXTS, k=3)
    want = load_bundle(fp32).predictor.predict(TEXTS, k=3)
    assert got.labels.shape == want.labels.shape and np.isfinite(got.scores).all()


def test_a_quantized_graph_that_ranks_otherwise_is_refused(lamp_bundle, tmp_path):
    """The gate reads the reduced graph's outputs: one whose ranking left fp32's (here its logits reversed, as a
    broken quantisation would give) is refused (export_run then publishes nothing); one that ranks as fp32 passes."""
    folder = tmp_path / "lamp"
    shutil.copytree(lamp_bundle[1] / "lamp", folder)
    model = load_bundle(lamp_bundle[1]).predictor.model
    cand = model.candidates(TEXTS, 5, None)
    fp32 = onnx_outputs(model.reranker, TEXTS, cand.labels, cand.scores)

    def top5(outputs):
        logits = np.where(cand.labels >= 0, outputs["logits"], -np.inf)
        return np.take_along_axis(cand.labels, np.argsort(-logits, axis=1, kind="stable")[:, :5], 1)

    def reversed_ranking():
        return {**fp32, "logits": -fp32["logits"]}

    with pytest.raises(XtagError, match="refusing to export"):
        set_precision(folder, "int8", reversed_ranking, fp32, fp32, top5, min_top5=0.95)
    shutil.copytree(lamp_bundle[1] / "lamp", tmp_path / "again")
    report = set_precision(tmp_path / "again", "int8", lambda: fp32, fp32, fp32, top5, min_top5=0.95)
    assert report["top5_agreement_vs_fp32"] == 1.0


def test_a_bundle_serves_with_fewer_candidates_than_it_was_trained_on(lamp_bundle, tmp_path):
    run, full = lamp_bundle  # trained on C = 6 (tests/conftest.py lamp_config)
    bundle = tmp_path / "c3"
    export_run(run, bundle, candidates=3)
    assert json.loads((bundle / "lamp" / "lamp.json").read_text())["candidates"] == 3
    report = json.loads((bundle / "manifest.json").read_text())["export"]
    assert report["candidates"] == 3 and report["trained_candidates"] == 6  # the parity check ran at C = 3
    fewer, all_six = (load_bundle(b).predictor.model for b in (bundle, full))
    first = fewer.candidates(TEXTS, 2, None).labels
    got = fewer.predict(TEXTS, k=2).labels
    assert first.shape[1] == 3 and all(set(g) <= set(f) for g, f in zip(got, first))  # re-ranked among its top 3
    assert all_six.candidates(TEXTS, 2, None).labels.shape[1] == 6


def test_more_candidates_than_trained_or_a_family_without_a_reranker_is_refused(lamp_bundle, tiny_bundle, tmp_path):
    with pytest.raises(XtagError, match="--candidates 7: the re-ranker was trained on 6 candidates"):
        export_run(lamp_bundle[0], tmp_path / "c7", candidates=7)
    assert not (tmp_path / "c7").exists()
    with pytest.raises(XtagError, match="--candidates 3: model xlinear does not support a serving C"):
        export_run(tiny_bundle.parent / "run", tmp_path / "xl", candidates=3)


def auto_run(lamp_bundle, tmp_path, **export) -> Path:
    """A copy of the fixture's run whose config asks for the defaults: precision auto, C chosen on a quarter of
    its texts held out (lamp.val_fraction) over the grid 3, 4 under its trained C = 6."""
    run = tmp_path / "run"
    shutil.copytree(lamp_bundle[0], run)
    config = json.loads((run / "config.json").read_text())
    config["lamp"]["val_fraction"] = 0.25
    config["lamp"]["export"] = {**config["lamp"]["export"], "precision": "auto", "candidate_grid": [3, 4], **export}
    (run / "config.json").write_text(json.dumps(config))
    return run


def test_the_default_export_serves_gated_int8_at_the_c_chosen_on_held_out_texts_and_says_so(lamp_bundle, tmp_path):
    """Issue 47: the README's export shipped fp32 at the trained C where int8 at a validated C was measured faster
    at the same P@1. By default int8 ships when it passes its gate, C is the validation rule's, and one line says
    what was chosen and why."""
    from typer.testing import CliRunner
    from xtag.training.lamp.serving_c import choose

    from xtag.cli import app

    run = auto_run(lamp_bundle, tmp_path)
    result = CliRunner().invoke(app, ["export", str(run), "--out", str(tmp_path / "b"), "--no-progress"])
    assert result.exit_code == 0, result.output
    [line] = [x for x in result.output.splitlines() if x.startswith("serves ")]
    report = json.loads((tmp_path / "b" / "manifest.json").read_text())["export"]
    assert line == f"serves {report['chosen']}"
    assert line.startswith("serves int8: top-5 agreement ") and ">= 0.95 gate" in line, line
    assert json.loads((tmp_path / "b" / "lamp" / "config.json").read_text())["precision"] == "int8"
    rows = {  # the figures the line gives, P@1/PSP@5 at each C: the choice is the rule applied to them
        int(c): {"P@1": float(p1), "PSP@5": float(psp)}
        for c, p1, psp in re.findall(r"C=(\d+) ([\d.]+)/([\d.]+)", line.split("(P@1/PSP@5: ")[1])
    }
    assert set(rows) == {3, 4, 6}
    served = json.loads((tmp_path / "b" / "lamp" / "lamp.json").read_text())["candidates"]
    assert served == choose(rows, 6, 0.2, 1.0) == report["candidates"] and f"C={served} chosen on 100 held-out" in line


def test_int8_that_fails_its_gate_by_default_keeps_fp32_and_says_why(lamp_bundle, tmp_path, monkeypatch):
    import xtag.training.lamp.export as lamp_export

    def failing_gate(folder, precision, *args, **kwargs):
        (folder / "model.onnx").write_bytes(b"a broken int8 graph")
        raise XtagError(f"{precision} graph: its top 5 agree with the fp32 graph's on only 0.500 of them (< 0.95)")

    monkeypatch.setattr(lamp_export, "set_precision", failing_gate)
    run = auto_run(lamp_bundle, tmp_path, candidate_grid=[])
    export_run(run, tmp_path / "b")
    report = json.loads((tmp_path / "b" / "manifest.json").read_text())["export"]
    assert report["chosen"].startswith("fp32: int8 did not pass the gate (int8 graph: its top 5 agree"), report
    assert "C=6 chosen on" in report["chosen"]
    assert json.loads((tmp_path / "b" / "lamp" / "config.json").read_text())["precision"] == "fp32"
    got = load_bundle(tmp_path / "b").predictor.predict(TEXTS, k=3)  # the fp32 graph, whole again
    assert (got.labels == load_bundle(lamp_bundle[1]).predictor.predict(TEXTS, k=3).labels).all()


def test_a_run_without_held_out_texts_serves_its_trained_c_and_says_why(lamp_bundle, tmp_path):
    run = auto_run(lamp_bundle, tmp_path)
    config = json.loads((run / "config.json").read_text())
    config["lamp"]["val_fraction"] = 0.0
    (run / "config.json").write_text(json.dumps(config))
    export_run(run, tmp_path / "b")
    report = json.loads((tmp_path / "b" / "manifest.json").read_text())["export"]
    assert report["chosen"].endswith("; C=6 as trained: the run held no texts out (lamp.val_fraction=0)"), report


def test_quantize_none_exports_fp32_and_says_so(lamp_bundle, tmp_path):
    from typer.testing import CliRunner

    from xtag.cli import app

    run = auto_run(lamp_bundle, tmp_path)
    args = ["export", str(run), "--out", str(tmp_path / "b"), "--quantize", "none", "--candidates", "4"]
    result = CliRunner().invoke(app, [*args, "--no-progress"])
    assert result.exit_code == 0, result.output
    assert "serves fp32 as asked; C=4 as given (--candidates)" in result.output, result.output
    assert json.loads((tmp_path / "b" / "lamp" / "config.json").read_text())["precision"] == "fp32"


def test_quantize_takes_int8_or_none_only(tiny_bundle, tmp_path):
    from typer.testing import CliRunner

    from xtag.cli import app

    run = str(tiny_bundle.parent / "run")
    said = CliRunner().invoke(app, ["export", run, "--out", str(tmp_path / "b"), "--quantize", "int4"]).output
    assert said.strip() == "error: --quantize int4: the one quantisation offered is int8 ('none': fp32 weights)"
    said = CliRunner().invoke(app, ["export", run, "--out", str(tmp_path / "b"), "--quantize", "none", "--fp16"]).output
    assert "--quantize none and --fp16 exclude each other" in said, said
