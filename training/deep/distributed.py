"""torchrun support: one process per device; the process group exists only when WORLD_SIZE > 1."""

from __future__ import annotations

import ctypes
import gc
import os
import signal
import sys
from dataclasses import dataclass

import numpy as np
import torch
import torch.distributed as dist
from xtag.config.settings import ClusterEnvironment
from xtag.models.errors import XtagError

PR_SET_PDEATHSIG = 1  # prctl(2): the signal this process gets when its parent dies


def die_with_launcher() -> None:
    """Under torchrun, have the kernel kill this rank when the launcher dies.

    torchrun starts its ranks in a session of their own and sets no parent-death signal, so after `kill -9` of
    torchrun they trained on as orphans (or waited in a collective until its 30-minute timeout), holding the
    GPU and writing checkpoints nobody would resume. SIGKILL is safe here: checkpoints are written atomically.
    Linux only (prctl); elsewhere, and outside torchrun, a no-op. Called as early as a rank starts (train_run)
    and again when it joins the process group; setting it twice is harmless.
    """
    if not ClusterEnvironment().torchrun or not sys.platform.startswith("linux"):
        return
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0) != 0:
        return  # not permitted (seccomp): the launcher's own teardown is all there is
    if os.getppid() == 1:  # the launcher died before prctl took effect
        os.kill(os.getpid(), signal.SIGKILL)


def pick_device(device: str, local_rank: int = 0) -> torch.device:
    """The torch device a `device` setting (auto | cpu | cuda) means on this machine: auto takes CUDA when torch
    sees it; cuda without one is refused rather than run on the CPU unsaid."""
    if device == "cuda" and not torch.cuda.is_available():
        raise XtagError("--device cuda, but torch sees no CUDA device")
    if device == "cuda" or (device == "auto" and torch.cuda.is_available()):
        torch.cuda.set_device(local_rank)
        return torch.device("cuda", local_rank)
    return torch.device("cpu")


@dataclass
class DistContext:
    """Rank, world size and device of this process (rank 0 of 1 without torchrun)."""

    rank: int
    world: int
    device: torch.device

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def active(self) -> bool:
        return self.world > 1

    @classmethod
    def init(cls, device: str) -> DistContext:
        """Pick the device; under torchrun (WORLD_SIZE > 1) also join the process group."""
        die_with_launcher()
        launch = ClusterEnvironment()
        world, rank = launch.world_size, launch.rank
        dev = pick_device(device, launch.local_rank)
        if world > 1 and not dist.is_initialized():
            dist.init_process_group(backend="nccl" if dev.type == "cuda" else "gloo")
        return cls(rank=rank, world=world, device=dev)

    def barrier(self) -> None:
        if self.active:
            dist.barrier()

    def shard(self, n: int) -> np.ndarray:
        """This rank's share of range(n): every world-th index."""
        return np.arange(self.rank, n, self.world)

    def gather_rows(self, part: np.ndarray, n: int) -> np.ndarray:
        """Reassemble an n-row array from each rank's `shard(n)` rows (identical on every rank)."""
        if not self.active:
            return part
        size = -(-n // self.world)
        padded = np.zeros((size, part.shape[1]), dtype=np.float32)
        padded[: len(part)] = part
        local = torch.from_numpy(padded).to(self.device)
        pieces = [torch.empty_like(local) for _ in range(self.world)]
        dist.all_gather(pieces, local)
        out = np.empty((n, part.shape[1]), dtype=np.float32)
        for r, piece in enumerate(pieces):
            rows = np.arange(r, n, self.world)
            out[rows] = piece[: len(rows)].cpu().numpy()
        return out

    def close(self) -> None:
        """Leave the process group, every rank at the same point (a collective: call it on all ranks).

        Ranks used to leave one by one: a helper rank destroyed its group and exited while rank 0 still held
        its own, and once in a CI run the helper aborted at exit ("terminate called without an active
        exception", SIGABRT) although its work was done. A DDP wrapper dropped after training can still hold
        the group (its reducer does) until the garbage collector or interpreter teardown frees it, so collect
        it first, wait for every rank, then destroy the group while the interpreter is fully alive.
        """
        if self.active and dist.is_initialized():
            gc.collect()
            dist.barrier()
            dist.destroy_process_group()
