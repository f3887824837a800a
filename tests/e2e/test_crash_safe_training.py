"""A training run survives kills: checkpoint files appear whole or not at all, a damaged checkpoint makes
`--resume` say which file and why (it used to print only "Aborted."), and torchrun ranks die with their
launcher instead of training on as orphans."""

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp
from typer.testing import CliRunner
from xtag.models.errors import XtagError
from xtag.models.inference.types import RankerLevel
from xtag.models.label_tree import ClusterChain
from xtag.models.xlinear.model import load_level, save_level

from tests.install_mode import pythonpath_for_subprocess
from xtag.cli import app

CHAIN = ClusterChain([np.array([0, 2]), np.array([0, 2, 3])], np.array([2, 0, 1]))
LEVEL = RankerLevel(W=sp.csr_matrix(np.array([[0.5, 0.0], [0.0, -1.0], [2.0, 3.0]], np.float32)), bias=np.ones(3))


def _interrupted_savez(file, *args, **kwargs):
    """np.savez (or a level's streamed member) killed mid-write: some bytes reach the file it was given, then it
    fails."""
    fh = open(file, "wb") if isinstance(file, str | Path) else file
    fh.write(b"PK\x03\x04 half a zip")
    fh.flush()
    raise OSError("killed mid-write")


@pytest.mark.parametrize(
    ("save", "load", "same", "writer"),
    [
        (CHAIN.save, ClusterChain.load, lambda c: np.array_equal(c.leaf_labels, CHAIN.leaf_labels), (np, "savez")),
        (
            lambda p: save_level(LEVEL, p),
            load_level,
            lambda lv: np.array_equal(lv.W.toarray(), LEVEL.W.toarray()),
            (np.lib.format, "write_array_header_1_0"),  # models/xlinear/level_file.py streams each member
        ),
    ],
    ids=["chain", "level"],
)
def test_interrupted_checkpoint_write_keeps_the_previous_file(tmp_path, monkeypatch, save, load, same, writer):
    path = tmp_path / "ckpt.npz"
    save(path)
    monkeypatch.setattr(*writer, _interrupted_savez)
    with pytest.raises(OSError, match="killed mid-write"):
        save(path)
    monkeypatch.undo()
    assert same(load(path))
    assert [p.name for p in tmp_path.iterdir()] == ["ckpt.npz"]  # no partial file under any name


def _train_args(corpus, out):
    return ["train", "--corpus", str(corpus), "--out", str(out), "--threads", "1", "--no-progress"]


@pytest.mark.parametrize(
    ("name", "damage", "cause"),
    [
        ("level_1.npz", lambda data: b"", "EOFError"),
        ("level_1.npz", lambda data: data[: len(data) // 2], "BadZipFile"),
        ("chain.npz", lambda data: b"", "EOFError"),
    ],
    ids=["empty-level", "truncated-level", "empty-chain"],
)
def test_resume_from_a_damaged_checkpoint_names_the_file_and_the_cause(corpus_files, tmp_path, name, damage, cause):
    runner = CliRunner()
    args = _train_args(corpus_files[0], tmp_path / "run")
    assert runner.invoke(app, args).exit_code == 0
    ckpt = tmp_path / "run" / "checkpoints" / name
    ckpt.write_bytes(damage(ckpt.read_bytes()))
    r = runner.invoke(app, [*args, "--resume"])
    assert r.exit_code == 2, r.output
    assert str(ckpt) in r.output and cause in r.output


def test_damaged_transformer_checkpoint_names_the_file(tmp_path):
    import torch
    from xtag.training.deep.checkpoint import Checkpoint

    net = torch.nn.Linear(3, 2)
    opt = torch.optim.AdamW(net.parameters())
    net(torch.ones(1, 3)).sum().backward()
    opt.step()
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda step: 1.0)
    ckpt = Checkpoint(tmp_path / "current")
    ckpt.save(net, opt, sched, {"step": 1})
    model = tmp_path / "current" / "model.safetensors"
    model.write_bytes(model.read_bytes()[:-10])
    state = ckpt.state()
    with pytest.raises(XtagError, match=rf"{model}: cannot read the checkpointed model \(SafetensorError"):
        ckpt.restore(net, opt, sched, state, torch.device("cpu"))
    (tmp_path / "current" / "state.json").write_text('{"step": ')
    with pytest.raises(XtagError, match=r"current/state\.json: cannot read the training checkpoint's state"):
        ckpt.state()


RANK = """
    import os, sys, time
    from xtag.training.deep.distributed import DistContext
    DistContext.init("cpu")
    open(os.path.join(sys.argv[1], os.environ["RANK"] + ".pid"), "w").write(str(os.getpid()))
    time.sleep(300)
"""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    stat = Path(f"/proc/{pid}/stat")
    return not (stat.exists() and stat.read_text().split(") ")[-1].startswith("Z"))  # a zombie is dead


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="parent-death signal is Linux's prctl")
def test_torchrun_ranks_die_with_a_killed_launcher(tmp_path):
    """torchrun starts ranks in their own session: before the fix they outlived `kill -9` of torchrun."""
    from tests.conftest import torchrun_launcher

    script = tmp_path / "rank.py"
    script.write_text(textwrap.dedent(RANK))
    env = {
        **os.environ,
        "PYTHONPATH": pythonpath_for_subprocess(os.environ.get("PYTHONPATH")) or "",
        "OMP_NUM_THREADS": "1",
    }
    launcher = subprocess.Popen([*torchrun_launcher(2), str(script), str(tmp_path)], env=env)
    pids: list[int] = []
    try:
        deadline = time.monotonic() + 120
        while len(pids) < 2 and time.monotonic() < deadline and launcher.poll() is None:
            time.sleep(0.2)
            pids = [int(p.read_text()) for p in tmp_path.glob("*.pid") if p.read_text()]
        assert len(pids) == 2, "the ranks did not start"
        launcher.send_signal(signal.SIGKILL)
        launcher.wait()
        deadline = time.monotonic() + 10
        while any(map(_alive, pids)) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not any(map(_alive, pids)), "a rank outlived its killed launcher"
    finally:
        launcher.kill()
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
