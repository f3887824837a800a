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
from typing import Any, Literal

from xtag.models.errors import XtagError

# Where `xtag update` puts new labels (its --clusters), which every family's `update` entry takes: a subtree of
# their own (training/tree/graft.py), or the nearest old leaf cluster (training/tree/grow.py) with that cluster's
# and its ancestors' rankers refit, or kept.
UpdatePlacement = Literal["new", "refit", "keep"]


@dataclass(frozen=True)
class Family:
    kind: str
    section: str | None  # TrainConfig field with the family's settings (None: the shared `xlinear` rankers only)
    config: str  # pydantic config of that section
    train: str  # (texts, X, Y, TrainConfig, checkpoint_dir, progress, log) -> TrainedModel, None on helper ranks
    export: str  # (run model dir, bundle dir being written, TrainConfig) -> export report
    components: tuple[
        str, ...
    ]  # bundle components in load order (models/bundle/components.py); optional ones may be absent
    batch_wait_ms: float  # the service's micro-batch wait under concurrent traffic (encoders gain from batches)
    capabilities: frozenset[str]  # what the family supports, from CAPABILITIES; checked when a config is built
    # The service's predictor calls at once unless XTAG_INFERENCE_THREADS says (at most one per core): a TF-IDF
    # model's featurising holds the GIL while its compiled engine does not, so two calls overlap the one's
    # featurising with the other's scoring (bench/RESULTS.md, batch throughput against PECOS); an encoder's
    # ONNX session already runs each call on every core, and its calls gain more from batching together.
    parallel_calls: int = 1
    update: str | None = None  # (update_run.UpdateData, TrainConfig, progress, log, UpdatePlacement) -> (model, facts)
    train_needs: tuple[str, ...] = ()  # modules training needs beyond the base install (from the `train` extra)
    builds_on: tuple[
        str, ...
    ] = ()  # families whose training code this one reuses (XR-Transformer: XR-Linear's rankers)

    def supports(self, capability: str) -> bool:
        if capability not in CAPABILITIES:
            raise KeyError(f"unknown capability {capability!r} (known: {', '.join(CAPABILITIES)})")
        return capability in self.capabilities

    def require(self, capability: str, option: str) -> None:
        """Refuse `option` (a flag or config setting, as the user wrote it) when this family cannot honour it,
        rather than train or export something else without saying so."""
        if not self.supports(capability):
            able = [f.kind for f in FAMILIES.values() if capability in f.capabilities]
            raise XtagError(
                f"{option}: model {self.kind} does not support {CAPABILITIES[capability]}"
                + (f" (supported by {', '.join(able)})" if able else "")
            )

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


CAPABILITIES: dict[str, str] = {
    "transformer": "a transformer encoder (--encoder, --max-length, --epochs, --batch-size, --device)",
    "int8": "int8 weights (--quantize int8)",
    "fp16": "fp16 weights (--fp16)",
    "onnx-optimize": "onnxruntime's transformer fusions (--optimize/--no-optimize)",
    "shortlist": "a FAISS level-1 shortlist (--shortlist-min-nodes)",
    "weighted-losses": "the missing-label losses (--loss propensity | unbiased-balanced)",
    "torchrun": "training under torchrun with several processes (DDP)",
    "static-dense": "a static token-embedding block in Φ_cat (--dense static, the `dense` section)",
    "update": "adding labels to a trained run (xtag update)",
}
TRANSFORMER = frozenset({"transformer", "int8", "fp16", "onnx-optimize", "weighted-losses", "torchrun"})
TRAIN_EXTRA = ("torch", "transformers")  # what the transformer families' training imports from the train extra

FAMILIES: dict[str, Family] = {
    family.kind: family
    for family in (
        Family(
            "xlinear",
            None,
            "xtag.training.xlinear.config:XLinearConfig",
            "xtag.training.xlinear.train:train",
            "xtag.training.xlinear.export:export",
            ("tfidf", "static-encoder", "label-tree", "rankers"),
            batch_wait_ms=0.0,
            parallel_calls=2,
            capabilities=frozenset({"weighted-losses", "static-dense", "update"}),
            update="xtag.training.xlinear.update:update",
        ),
        Family(
            "xr-transformer",
            "xr_transformer",
            "xtag.training.xr_transformer.config:XRTransformerConfig",
            "xtag.training.xr_transformer.train:train_xr_transformer",
            "xtag.training.xr_transformer.export:export",
            ("tfidf", "text-encoder", "label-tree", "rankers", "shortlist"),
            batch_wait_ms=2.0,
            capabilities=TRANSFORMER | {"shortlist", "update"},
            update="xtag.training.xr_transformer.update:update",
            train_needs=TRAIN_EXTRA,
            builds_on=("xlinear",),
        ),
        Family(
            "lightxml",
            "lightxml",
            "xtag.training.lightxml.config:LightXMLConfig",
            "xtag.training.lightxml.train:train_lightxml",
            "xtag.training.lightxml.export:export",
            ("lightxml-encoder", "label-tree", "lightxml-heads"),
            batch_wait_ms=2.0,
            capabilities=TRANSFORMER,
            train_needs=TRAIN_EXTRA,
        ),
        Family(
            "cascadexml",
            "cascadexml",
            "xtag.training.cascadexml.config:CascadeXMLConfig",
            "xtag.training.cascadexml.train:train_cascadexml",
            "xtag.training.cascadexml.export:export",
            ("cascadexml-encoder", "label-tree", "cascadexml-heads"),
            batch_wait_ms=2.0,
            capabilities=TRANSFORMER,
            train_needs=TRAIN_EXTRA,
        ),
        Family(
            "lamp",
            "lamp",
            "xtag.training.lamp.config:LampConfig",
            "xtag.training.lamp.train:train_lamp",
            "xtag.training.lamp.export:export",
            ("first-stage", "lamp-reranker"),
            batch_wait_ms=2.0,
            capabilities=frozenset({"transformer"}),
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
