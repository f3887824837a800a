"""Checkpoints: a fine-tuning run killed mid-level resumes to the same weights; torchrun DDP on CPU (gloo)."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import load_file

from tests.conftest import kill_after_first_checkpoint, torchrun_launcher, train_command

ROOT = Path(__file__).resolve().parents[3]


def encoder_weights(run: Path) -> dict:
    return load_file(run / "model" / "encoder" / "model.safetensors")


def test_killed_run_resumes_to_the_uninterrupted_result(corpus_files, tiny_bert, xr_config, tmp_path):
    from xtag.training.run import train_run
    from xtag.training.tree.build import TreeConfig

    config = xr_config(
        corpus_files[0], tiny_bert, epochs=1, checkpoint_every=2, tree=TreeConfig(branching=2, max_leaf_size=6)
    )  # fine-tuning levels: 2 clusters, 12 labels
    (tmp_path / "config.json").write_text(config.model_dump_json())
    killed = tmp_path / "killed"
    log = kill_after_first_checkpoint(tmp_path / "config.json", killed, "xr")

    train_run(config, killed, resume=True, progress=False)
    resumed = [json.loads(line) for line in (killed / "train_log.jsonl").read_text().splitlines()][len(log) :]
    assert any(e["event"] == "resume" and e.get("step", 0) > 0 for e in resumed)  # mid-level, not from scratch

    train_run(config, tmp_path / "straight", progress=False)
    a, b = encoder_weights(killed), encoder_weights(tmp_path / "straight")
    assert a.keys() == b.keys()
    for key in a:
        np.testing.assert_allclose(a[key], b[key], atol=1e-5, err_msg=key)


def test_resume_refuses_a_different_config(corpus_files, tiny_bert, xr_config, tmp_path):
    from xtag.models.errors import XtagError
    from xtag.training.run import train_run

    config = xr_config(corpus_files[0], tiny_bert, epochs=0)
    train_run(config, tmp_path / "run", progress=False)
    other = config.model_copy(update={"xr_transformer": config.xr_transformer.model_copy(update={"epochs": 1})})
    with pytest.raises(XtagError, match="different configuration"):
        train_run(other, tmp_path / "run", resume=True, progress=False)


@pytest.mark.skipif(
    shutil.which("torchrun", path=str(Path(sys.executable).parent)) is None, reason="torchrun not installed"
)
def test_torchrun_two_processes_on_cpu(corpus_files, tiny_bert, xr_config, tmp_path):
    config = xr_config(corpus_files[0], tiny_bert, epochs=1, max_steps=3, batch_size=8, grad_accum=2)
    (tmp_path / "config.json").write_text(config.model_dump_json())
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    result = subprocess.run(
        train_command(tmp_path / "config.json", tmp_path / "run", torchrun_launcher(2)),
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    events = [json.loads(line) for line in (tmp_path / "run" / "train_log.jsonl").read_text().splitlines()]
    assert next(e for e in events if e["event"] == "encoder")["world_size"] == 2
    assert [e["steps"] for e in events if e["event"] == "finetune_level"] == [3, 3, 3]
    assert (tmp_path / "run" / "model" / "encoder" / "model.safetensors").is_file()


def test_checkpoint_survives_a_kill_between_its_renames(tmp_path):
    import torch
    from xtag.training.xr_transformer.finetune import Checkpoint, XRNet

    net = XRNet(torch.nn.Identity(), np.ones((3, 4), np.float32), np.zeros(3, np.float32))
    opt = torch.optim.AdamW(net.parameters())
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0)
    ckpt = Checkpoint(tmp_path / "current")
    ckpt.save(net, opt, sched, {"level": 1, "step": 2})
    ckpt.save(net, opt, sched, {"level": 1, "step": 4})
    assert not ckpt.old.exists() and not ckpt.tmp.exists()
    ckpt.folder.rename(ckpt.old)  # as if killed after moving the previous checkpoint aside
    assert ckpt.state()["step"] == 4
    with torch.no_grad():
        net.weight.zero_()
    ckpt.restore(net, opt, sched, ckpt.state(), torch.device("cpu"))
    assert float(net.weight.detach().sum()) == 12.0
    ckpt.save(net, opt, sched, {"level": 1, "step": 6})  # and the next save still works
    assert Checkpoint(tmp_path / "current").state()["step"] == 6 and not ckpt.old.exists()
