"""NaN never travels from a run into a bundle (issue 30, defect 11): `--resume` refuses a checkpoint holding NaN
or inf and export refuses such a run, with the check the server runs on bundles (models/files/finite_scan.py), naming
the file. Before, a resumed NaN checkpoint exported fine and `xtag predict` answered garbage."""

from __future__ import annotations

import numpy as np
import pytest
from xtag.models.errors import XtagError

from tests.training.cascadexml.test_cascadexml import killed_cascadexml_run


def poison_npz(path, key: str) -> None:
    with np.load(path) as z:
        arrays = {k: z[k] for k in z.files}
    arrays[key] = np.full_like(arrays[key], np.nan)
    np.savez(path, **arrays)


@pytest.fixture
def xlinear_run(corpus_files, tmp_path):
    from xtag.models.features.tfidf import TfidfConfig
    from xtag.training.config import TrainConfig
    from xtag.training.run import train_run
    from xtag.training.tree.build import TreeConfig
    from xtag.training.xlinear.config import XLinearConfig

    config = TrainConfig(
        corpus=corpus_files[0],
        tfidf=TfidfConfig(min_df=1),
        xlinear=XLinearConfig(n_jobs=1, tree=TreeConfig(branching=2, max_leaf_size=4)),
    )
    train_run(config, tmp_path / "run", progress=False)
    return config, tmp_path / "run"


def test_resume_refuses_a_checkpoint_with_nan_weights(xlinear_run):
    from xtag.training.run import train_run

    config, run = xlinear_run
    poison_npz(run / "checkpoints" / "level_1.npz", "data")
    with pytest.raises(XtagError, match=r"cannot resume.*non-finite.*level_1\.npz\[data\]"):
        train_run(config, run, resume=True, progress=False)


def test_export_refuses_a_run_with_nan_weights(xlinear_run, tmp_path):
    from xtag.training.export.export_run import export_run

    _, run = xlinear_run
    poison_npz(run / "model" / "rankers" / "level_2.npz", "bias")
    with pytest.raises(XtagError, match=r"not exported.*non-finite.*rankers/level_2\.npz\[bias\]"):
        export_run(run, tmp_path / "bundle")
    assert not (tmp_path / "bundle").exists()


def test_resume_refuses_a_torch_checkpoint_with_nan(corpus_files, tiny_bert, tmp_path):
    """The transformer families' checkpoints are safetensors: a killed CascadeXML run's weights set to NaN."""
    import torch
    from safetensors.torch import load_file, save_file
    from xtag.training.run import train_run

    config, run, _ = killed_cascadexml_run(corpus_files[0], tiny_bert, tmp_path)
    weights = run / "checkpoints" / "cascadexml" / "current" / "model.safetensors"
    tensors = load_file(weights)
    name = sorted(tensors)[-1]
    tensors[name] = torch.full_like(tensors[name], float("nan"))
    save_file(tensors, weights)
    with pytest.raises(XtagError, match=rf"cannot resume.*cascadexml/current/model\.safetensors\[{name}\]"):
        train_run(config, run, resume=True, progress=False)


def test_the_scan_reads_every_float_type_of_a_safetensors_file(tmp_path):
    import torch
    from safetensors.torch import save_file
    from xtag.models.files.finite_scan import nonfinite_arrays

    tensors = {
        "ok32": torch.ones(5),
        "nan32": torch.tensor([1.0, float("nan"), 2.0]),
        "inf16": torch.tensor([1.0, float("inf")], dtype=torch.float16),
        "nanbf16": torch.tensor([float("nan"), 1.0, -float("inf"), 3.0], dtype=torch.bfloat16),
        "okbf16": torch.tensor([1e30, -2.5, 0.0], dtype=torch.bfloat16),
        "int": torch.arange(4),
    }
    save_file(tensors, tmp_path / "t.safetensors")
    bad = nonfinite_arrays(tmp_path, ["t.safetensors"])
    assert sorted(bad) == [
        "t.safetensors[inf16] (1 of 2)",
        "t.safetensors[nan32] (1 of 3)",
        "t.safetensors[nanbf16] (2 of 4)",
    ]
