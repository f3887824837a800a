"""The model families: the one table that maps a model kind to everything that differs between kinds.

Each family has a package on each side (models/<family>/ for torch-free inference, training/<family>/
for its config, trainer and exporter). Entries name their code as "module:attribute" strings that are
imported only when used, so reading the table imports neither torch nor any family's code (the style
of Annif's backend registry). A new family is two packages plus one line here.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from importlib import import_module
from typing import Any

from models.errors import XtagError


@dataclass(frozen=True)
class Family:
    kind: str
    section: str | None  # TrainConfig field with the family's settings (None: the shared `xlinear` rankers only)
    config: str  # pydantic config of that section
    train: str  # (texts, X, Y, TrainConfig, checkpoint_dir, progress, log) -> TrainedModel, None on helper ranks
    export: str  # (run model dir, bundle dir being written, TrainConfig) -> export report
    components: tuple[str, ...]  # bundle components in load order (models/components.py); optional ones may be absent
    batch_wait_ms: float  # the service's micro-batch wait under concurrent traffic (encoders gain from batches)
    distributed: bool  # trains under torchrun with several processes (DDP)
    train_needs: tuple[str, ...] = ()  # modules training needs beyond the base install (from the `train` extra)

    def resolve(self, field: str) -> Any:
        """The object an entry names, imported now."""
        module, _, attribute = getattr(self, field).partition(":")
        return getattr(import_module(module), attribute)

    def check_train_extra(self) -> None:
        """Fail early, naming the fix, when training this family needs modules the base install lacks
        (checked without importing them, so before anything slow such as reading the corpus)."""
        missing = [m for m in self.train_needs if importlib.util.find_spec(m) is None]
        if missing:
            raise XtagError(
                f"training {self.kind} needs {', '.join(missing)}, which the base install lacks: "
                f'pip install "xtag[train]"'
            )


TRAIN_EXTRA = ("torch", "transformers")  # what the transformer families' training imports from the train extra

FAMILIES: dict[str, Family] = {
    family.kind: family
    for family in (
        Family(
            "xlinear",
            None,
            "training.xlinear.config:XLinearConfig",
            "training.xlinear.train:train",
            "training.xlinear.export:export",
            ("tfidf", "label-tree", "rankers"),
            batch_wait_ms=0.0,
            distributed=False,
        ),
        Family(
            "xr-transformer",
            "xr_transformer",
            "training.xr_transformer.config:XRTransformerConfig",
            "training.xr_transformer.train:train_xr_transformer",
            "training.xr_transformer.export:export",
            ("tfidf", "text-encoder", "label-tree", "rankers", "shortlist"),
            batch_wait_ms=2.0,
            distributed=True,
            train_needs=TRAIN_EXTRA,
        ),
        Family(
            "lightxml",
            "lightxml",
            "training.lightxml.config:LightXMLConfig",
            "training.lightxml.train:train_lightxml",
            "training.lightxml.export:export",
            ("lightxml-encoder", "label-tree", "lightxml-heads"),
            batch_wait_ms=2.0,
            distributed=True,
            train_needs=TRAIN_EXTRA,
        ),
        Family(
            "cascadexml",
            "cascadexml",
            "training.cascadexml.config:CascadeXMLConfig",
            "training.cascadexml.train:train_cascadexml",
            "training.cascadexml.export:export",
            ("cascadexml-encoder", "label-tree", "cascadexml-heads"),
            batch_wait_ms=2.0,
            distributed=True,
            train_needs=TRAIN_EXTRA,
        ),
    )
}

DEFAULT_KIND = "xlinear"  # what `xtag train` trains without --model


def family(kind: str) -> Family:
    try:
        return FAMILIES[kind]
    except KeyError:
        raise XtagError(f"unknown model kind {kind!r} (known: {', '.join(FAMILIES)})") from None
