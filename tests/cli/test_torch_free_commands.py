"""`xtag predict`, `evaluate` and `calibrate` run where the train extra is not installed: a whole run of each,
as `python -m xtag` in a fresh interpreter, imports no torch and no training code but the corpus reader."""

import json
import shutil
import subprocess
import sys

import pytest

# Runs `python -m xtag ARGS...` in this interpreter, then writes every module it imported to the file argv[1].
PROBE = """
import json, runpy, sys
record, sys.argv = sys.argv[1], ["xtag", *sys.argv[2:]]
try:
    runpy.run_module("xtag", run_name="__main__", alter_sys=True)
except SystemExit as exc:
    code = exc.code
with open(record, "w") as fh:
    json.dump({"code": code, "modules": sorted(sys.modules)}, fh)
"""


def _training_modules(modules: list[str]) -> list[str]:
    """xtag.training modules other than the torch-free corpus reader, xtag.training.data (the package
    xtag.training itself comes with it: its __init__ holds a docstring only)."""
    reader = "xtag.training.data"
    return [m for m in modules if m.startswith("xtag.training.") and m != reader and not m.startswith(reader + ".")]


@pytest.mark.parametrize("command", ["predict", "evaluate", "calibrate"])
def test_command_imports_no_torch_and_no_training(command, tiny_bundle, corpus_files, tmp_path):
    bundle = shutil.copytree(tiny_bundle, tmp_path / "bundle")  # calibrate rewrites its bundle
    args = {
        "predict": [str(bundle), "--corpus", str(corpus_files[1]), "--out", str(tmp_path / "p.jsonl")],
        "evaluate": [str(bundle), "--corpus", str(corpus_files[1])],
        "calibrate": [str(bundle), "--corpus", str(corpus_files[1])],
    }[command]
    record = tmp_path / "modules.json"
    run = subprocess.run(
        [sys.executable, "-c", PROBE, str(record), command, *args, "--no-progress"], capture_output=True, text=True
    )
    assert run.returncode == 0, run.stderr
    seen = json.loads(record.read_text())
    assert seen["code"] == 0, run.stderr
    modules = seen["modules"]
    assert "xtag.corpus.files" in modules  # the probe sees the command's lazy imports
    assert not [m for m in modules if m == "torch" or m.startswith("torch.")]
    assert _training_modules(modules) == []
