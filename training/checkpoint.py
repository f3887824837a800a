"""Training checkpoints that a killed run resumes from exactly: model, optimiser, schedule, RNG, position.

Torch files are safetensors and JSON, never pickle; a checkpoint is swapped in atomically. Written and
read by the shared training loop (training/loop.py) for both transformer families.
"""

from __future__ import annotations

import json
import random
import shutil
from pathlib import Path

import numpy as np
import torch
from safetensors.torch import load_file, load_model, save_file, save_model
from torch import nn


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
    save_file(tensors, str(folder / "optimizer.safetensors"))
    (folder / "optimizer.json").write_text(json.dumps({"param_groups": sd["param_groups"], "scalars": scalars}))


def load_optimizer(opt: torch.optim.Optimizer, folder: Path, device: torch.device) -> None:
    meta = json.loads((folder / "optimizer.json").read_text())
    state: dict[int, dict] = {}
    items = [*load_file(str(folder / "optimizer.safetensors"), device=str(device)).items(), *meta["scalars"].items()]
    for name, value in items:
        pid, key = name.split(".", 1)
        state.setdefault(int(pid), {})[key] = value
    opt.load_state_dict({"state": state, "param_groups": meta["param_groups"]})


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
        save_model(net, str(self.tmp / "model.safetensors"))
        if tensors:
            save_file({k: v.detach().contiguous() for k, v in tensors.items()}, str(self.tmp / "extra.safetensors"))
        save_optimizer(opt, self.tmp)
        rng = {"cpu": torch.get_rng_state()}
        if torch.cuda.is_available():
            rng.update({f"cuda{i}": s for i, s in enumerate(torch.cuda.get_rng_state_all())})
        save_file(rng, str(self.tmp / "rng.safetensors"))
        (self.tmp / "state.json").write_text(json.dumps({**state, "scheduler": sched.state_dict()}))
        if self.folder.exists():
            shutil.rmtree(self.old, ignore_errors=True)
            self.folder.rename(self.old)
        self.tmp.rename(self.folder)  # killed before this line: `old` is still complete
        shutil.rmtree(self.old, ignore_errors=True)

    def state(self) -> dict | None:
        for folder in (self.folder, self.old):
            if (folder / "state.json").is_file():
                self.source = folder
                return json.loads((folder / "state.json").read_text())
        return None

    def restore(self, net: nn.Module, opt, sched, state: dict, device: torch.device) -> None:
        load_model(net, str(self.source / "model.safetensors"), device=str(device))
        load_optimizer(opt, self.source, device)
        sched.load_state_dict(state["scheduler"])
        rng = load_file(str(self.source / "rng.safetensors"))
        torch.set_rng_state(rng["cpu"])
        if torch.cuda.is_available() and "cuda0" in rng:
            torch.cuda.set_rng_state_all([rng[f"cuda{i}"] for i in range(torch.cuda.device_count())])

    def tensors(self, device: torch.device) -> dict[str, torch.Tensor]:
        path = self.source / "extra.safetensors"
        return load_file(str(path), device=str(device)) if path.is_file() else {}

    def clear(self) -> None:
        for folder in (self.folder, self.tmp, self.old):
            shutil.rmtree(folder, ignore_errors=True)
