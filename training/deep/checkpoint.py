"""Training checkpoints that a killed run resumes from exactly: model, optimiser, schedule, RNG, position.

Torch files are safetensors and JSON, never pickle; a checkpoint is swapped in atomically, each of its files
flushed to disk first (models/files/atomic.py), so neither a kill nor a power cut leaves half of one. Reading one
that is damaged anyway raises an XtagError naming the file and the cause. Written and read by the shared
training loop (training/deep/loop.py) for every transformer family, which also ends its runs here
(`fit_or_reload`); what a finished run leaves for export is training/deep/result.py's.
"""

from __future__ import annotations

import json
import random
import shutil
from pathlib import Path

import numpy as np
import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, load_model, save_file, save_model
from torch import nn
from xtag.models.errors import reading
from xtag.models.files.atomic import fsync_dir, replacing, write_text_atomic
from xtag.models.label_tree import ClusterChain

# What torch and safetensors raise on a damaged or mismatched checkpoint file, besides xtag.models.errors.READ_ERRORS.
TORCH_READ_ERRORS = (SafetensorError, RuntimeError)


def seed_all(seed: int) -> None:
    """Python, NumPy and torch generators from one seed."""
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def save_optimizer(opt: torch.optim.Optimizer, folder: Path) -> None:
    """Optimiser state as safetensors (moment tensors) + JSON (groups, scalars): no pickle involved."""
    sd = opt.state_dict()
    tensors, scalars = {}, {}
    for pid, state in sd["state"].items():
        for key, value in state.items():
            (tensors if torch.is_tensor(value) else scalars)[f"{pid}.{key}"] = (
                value.detach().contiguous() if torch.is_tensor(value) else value
            )
    with replacing(folder / "optimizer.safetensors") as tmp:
        save_file(tensors, str(tmp))
    write_text_atomic(folder / "optimizer.json", json.dumps({"param_groups": sd["param_groups"], "scalars": scalars}))


def load_optimizer(opt: torch.optim.Optimizer, folder: Path, device: torch.device) -> None:
    with reading(folder / "optimizer.json", "the optimiser state"):
        meta = json.loads((folder / "optimizer.json").read_text())
        scalars, groups = meta["scalars"], meta["param_groups"]
    with reading(folder / "optimizer.safetensors", "the optimiser state", *TORCH_READ_ERRORS):
        tensors = load_file(str(folder / "optimizer.safetensors"), device=str(device))
    state: dict[int, dict] = {}
    with reading(folder / "optimizer.json", "the optimiser state", *TORCH_READ_ERRORS):
        for name, value in [*tensors.items(), *scalars.items()]:
            pid, key = name.split(".", 1)
            state.setdefault(int(pid), {})[key] = value
        opt.load_state_dict({"state": state, "param_groups": groups})


class Checkpoint:
    """In-progress state of a level in `folder`: swapped in atomically, so a kill never leaves half of one."""

    def __init__(self, folder: Path):
        self.folder = folder
        self.tmp, self.old = folder.with_name(folder.name + ".tmp"), folder.with_name(folder.name + ".old")
        self.source = folder  # where `state` found the newest complete checkpoint

    def save(self, net: nn.Module, opt, sched, state: dict, tensors: dict[str, torch.Tensor] | None = None) -> None:
        """`tensors`: extra state of the loop's callbacks (e.g. SWA averages), read back by `tensors()`."""
        shutil.rmtree(self.tmp, ignore_errors=True)
        self.tmp.mkdir(parents=True)
        with replacing(self.tmp / "model.safetensors") as path:
            save_model(net, str(path))
        if tensors:
            with replacing(self.tmp / "extra.safetensors") as path:
                save_file({k: v.detach().contiguous() for k, v in tensors.items()}, str(path))
        save_optimizer(opt, self.tmp)
        rng = {"cpu": torch.get_rng_state()}
        if torch.cuda.is_available():
            rng.update({f"cuda{i}": s for i, s in enumerate(torch.cuda.get_rng_state_all())})
        with replacing(self.tmp / "rng.safetensors") as path:
            save_file(rng, str(path))
        write_text_atomic(self.tmp / "state.json", json.dumps({**state, "scheduler": sched.state_dict()}))
        if self.folder.exists():
            shutil.rmtree(self.old, ignore_errors=True)
            self.folder.rename(self.old)
        self.tmp.rename(self.folder)  # killed before this line: `old` is still complete
        fsync_dir(self.folder.parent)  # the renames reach the disk before `old` goes
        shutil.rmtree(self.old, ignore_errors=True)

    def state(self) -> dict | None:
        for folder in (self.folder, self.old):
            path = folder / "state.json"
            if path.is_file():
                self.source = folder
                with reading(path, "the training checkpoint's state"):
                    state = json.loads(path.read_text())
                    if not isinstance(state, dict):
                        raise ValueError("not a JSON object")
                    return state
        return None

    def restore(self, net: nn.Module, opt, sched, state: dict, device: torch.device) -> None:
        with reading(self.source / "model.safetensors", "the checkpointed model", *TORCH_READ_ERRORS):
            load_model(net, str(self.source / "model.safetensors"), device=str(device))
        load_optimizer(opt, self.source, device)
        with reading(self.source / "state.json", "the checkpointed schedule"):
            sched.load_state_dict(state["scheduler"])
        with reading(self.source / "rng.safetensors", "the checkpointed random state", *TORCH_READ_ERRORS):
            rng = load_file(str(self.source / "rng.safetensors"))
            torch.set_rng_state(rng["cpu"])
            if torch.cuda.is_available() and "cuda0" in rng:
                torch.cuda.set_rng_state_all([rng[f"cuda{i}"] for i in range(torch.cuda.device_count())])

    def tensors(self, device: torch.device) -> dict[str, torch.Tensor]:
        path = self.source / "extra.safetensors"
        if not path.is_file():
            return {}
        with reading(path, "the checkpointed callback state", *TORCH_READ_ERRORS):
            return load_file(str(path), device=str(device))

    def clear(self) -> None:
        for folder in (self.folder, self.tmp, self.old):
            shutil.rmtree(folder, ignore_errors=True)


def fit_or_reload(net: nn.Module, folder: Path, fit, ctx, log, name: str) -> dict:
    """The end of a transformer family's run: a finished run (done.json) reloads final.safetensors without
    retraining; otherwise `fit()` trains, rank 0 writes the weights and then done.json (last: it marks them
    complete) and drops the step checkpoint, and every rank waits. Rank 0 logs the stats (`<name>_done`, the
    loss aside); returns them."""
    done = folder / "done.json"
    if done.is_file():
        with reading(done, "the finished run's summary"):
            stats = json.loads(done.read_text())
        with reading(folder / "final.safetensors", "the finished run's weights", SafetensorError):
            load_model(net, str(folder / "final.safetensors"), device=str(ctx.device))
        log({"event": "resume", "what": f"{name} (finished)", "step": stats["steps"]})
    else:
        stats = fit()
        if ctx.is_main:
            with replacing(folder / "final.safetensors") as tmp:
                save_model(net, str(tmp))
            write_text_atomic(done, json.dumps(stats))
            Checkpoint(folder / "current").clear()
        ctx.barrier()
    if ctx.is_main:
        log({"event": f"{name}_done", **{k: v for k, v in stats.items() if k != "loss"}})
    return stats


def run_tree(path: Path, ctx, build) -> ClusterChain:
    """A run's label tree: the one saved at `path` when resuming, else `build()`, saved there by rank 0."""
    if path.is_file():
        return ClusterChain.load(path)
    chain = build()
    if ctx.is_main:
        chain.save(path)
    return chain
