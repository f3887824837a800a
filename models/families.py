"""The model families: the one table that maps a model kind to everything that differs between kinds.

Each family has a package on each side (models/<family>/ for torch-free inference, training/<family>/
for its config, trainer and exporter). Entries name their code as "module:attribute" strings that are
imported only when used, so reading the table imports neither torch nor any family's code (the style
of Annif's backend registry). A new family is two packages plus one line here.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from dataclasses import dataclass, field
from importlib import import_module
from pathlib import Path
from typing import Any, Literal, Protocol, overload

from xtag.models.errors import XtagError

# Where `xtag update` puts new labels (its --clusters), which every family's `update` entry takes: a subtree of
# their own (training/tree/graft.py), or the nearest old leaf cluster (training/tree/grow.py) with that cluster's
# and its ancestors' rankers refit, or kept.
UpdatePlacement = Literal["new", "refit", "keep"]
EntryField = Literal[
    "train", "update", "export", "config", "loaders"
]  # the Family fields that name code ("module:attribute")
Log = Callable[[dict], None]  # a run's event log (training/run.py RunLog)


def _no_log(event: dict) -> None:
    pass


# The family contracts: what every family's entries take and give back. Typed here, beside the table that
# names the entries, so a family states them and nothing guesses; training types appear as Any (this module
# imports no training code), named in the comments.


class RunResult(Protocol):
    """What a family's train or update entry returns: the run's model, which training/run.py saves into the run's
    model/ folder (beside its labels and TF-IDF) and summarises in summary.json."""

    def save(self, folder: Path) -> None: ...

    def summary(self) -> dict: ...


@dataclass(frozen=True)
class TrainInputs:
    """What training/run.py hands every family's `train` entry: one signature for all of them."""

    texts: list[str]
    X: Any  # the run's TF-IDF rows (scipy.sparse csr)
    Y: Any  # their labels (csr, documents x labels)
    config: Any  # the run's TrainConfig (training/config.py)
    checkpoint_dir: Path  # the run's checkpoints/ folder: the family's own subfolder goes inside
    # Train `config` (a TrainConfig) into `folder`/run, export it to `folder`/bundle and return that bundle: for a
    # family that trains on another model's output (LaMP's cross-fitting retrains its first stage per fold);
    # training/run.py provides it, so no family imports the run or the exporter that call it.
    train_and_export: Callable[[Any, Path, bool], Path]
    progress: bool = True
    log: Log = _no_log
    # what each label says (models/label_texts.py LabelTexts), from `--labels`; None without a label file. It may
    # name labels that no training document carries.
    label_texts: Any = None
    label_names: list[str] = field(default_factory=list)  # Y's columns: the corpus's label ids (LabelVocab.names)
    doc_ids: list[str] | None = None  # the documents' ids (a document that is itself a label: the stage masks it)


class TrainEntry(Protocol):
    """A family's `train` entry: the finished model, or None on a torchrun rank other than 0 (it only helped)."""

    def __call__(self, run: TrainInputs) -> RunResult | None: ...


@dataclass(frozen=True)
class UpdateInputs:
    """What training/update_run.py (`xtag update`) hands a family's `update` entry besides the run's TrainConfig."""

    run: Path  # the run being updated: read, never written
    checkpoints: Path  # the new run's checkpoints/ folder, for what a later update of it may reuse
    old: Any  # the run's training corpus as read now (corpus/files.py Corpus; row i of `corpus` is its row i)
    corpus: Any  # the combined corpus (update_run.merge_corpora)
    X: Any  # the combined corpus's TF-IDF under the run's featuriser (csr)
    Y: Any  # its labels: the old ones first, new ones from n_old (csr)
    n_old: int
    old_rows_differ: str  # why `old` may not be the rows the run was trained on; "": what it kept of them is theirs
    same_text: Any  # per row of `old` (numpy bool): its row in `corpus` has the same text (kept_tfidf.same_texts)


class UpdateEntry(Protocol):
    """A family's `update` entry: the updated model and the facts summary.json's `update` section reports."""

    def __call__(
        self,
        data: UpdateInputs,
        config: Any,
        progress: bool = True,
        log: Log = _no_log,
        clusters: UpdatePlacement = "new",
    ) -> tuple[RunResult, dict]: ...


class ExportEntry(Protocol):
    """A family's `export` entry: the run's model/ folder written as a bundle into `tmp` (the bundle being built,
    renamed into place by training/export/export_run.py) under the run's TrainConfig; returns the export report
    (parity, precision, recall) that the manifest records."""

    def __call__(self, run_model: Path, tmp: Path, config: Any) -> dict: ...


@dataclass(frozen=True)
class Family:
    kind: str
    section: str | None  # TrainConfig field with the family's settings (None: the shared `xlinear` rankers only)
    config: str  # pydantic config of that section
    train: str  # a TrainEntry: TrainInputs -> RunResult (None on torchrun helper ranks)
    export: str  # an ExportEntry: (run model dir, bundle dir being written, TrainConfig) -> export report
    components: tuple[
        str, ...
    ]  # bundle components in load order (models/bundle/components.py); optional ones may be absent
    loaders: (
        str  # the loaders of the family's own component types: a dict of type -> ComponentType (models/bundle/parts.py)
    )
    batch_wait_ms: float  # the service's micro-batch wait under concurrent traffic (encoders gain from batches)
    capabilities: frozenset[str]  # what the family supports, from CAPABILITIES; checked when a config is built
    # The service's predictor calls at once unless XTAG_INFERENCE_THREADS says (at most one per core): a TF-IDF
    # model's featurising holds the GIL while its compiled engine does not, so two calls overlap the one's
    # featurising with the other's scoring (bench/RESULTS.md, batch throughput against PECOS); an encoder's
    # ONNX session already runs each call on every core, and its calls gain more from batching together.
    parallel_calls: int = 1
    update: str | None = None  # an UpdateEntry: (UpdateInputs, TrainConfig, progress, log, clusters) -> (result, facts)
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

    @overload
    def resolve(self, field: Literal["train"]) -> TrainEntry: ...
    @overload
    def resolve(self, field: Literal["update"]) -> UpdateEntry: ...
    @overload
    def resolve(self, field: Literal["export"]) -> ExportEntry: ...
    @overload
    def resolve(self, field: Literal["config"]) -> type[Any]: ...  # a pydantic model class (training code)
    @overload
    def resolve(
        self, field: Literal["loaders"]
    ) -> dict[str, Any]: ...  # type -> ComponentType (models/bundle/parts.py)

    def resolve(self, field: EntryField) -> TrainEntry | UpdateEntry | ExportEntry | type[Any] | dict[str, Any]:
        """The object an entry names, imported now, typed by its contract (`update`: only where the family has one)."""
        named = {
            "train": self.train,
            "update": self.update,
            "export": self.export,
            "config": self.config,
            "loaders": self.loaders,
        }[field]
        if named is None:
            raise XtagError(f"model {self.kind} has no {field} entry")
        module, _, attribute = named.partition(":")
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
    "rerank-candidates": "a serving C for its re-ranker (--candidates)",
    "fp16": "fp16 weights (--fp16)",
    "onnx-optimize": "onnxruntime's transformer fusions (--optimize/--no-optimize)",
    "shortlist": "a FAISS level-1 shortlist (--shortlist-min-nodes)",
    "weighted-losses": "the missing-label losses (--loss propensity | unbiased-balanced)",
    "torchrun": "training under torchrun with several processes (DDP)",
    "static-dense": "a static token-embedding block in Φ_cat (--dense static, the `dense` section)",
    "update": "adding labels to a trained run (xtag update)",
    "xlinear-rankers": "the XR-Linear rankers and their label tree (the `xlinear` settings)",
    "ray": "training on a Ray cluster (--ray)",
    "label-text": "the label-text stage fused with the tree (with --labels; the `label_text` section)",
}
RANKERS = frozenset(
    {"xlinear-rankers"}
)  # the families whose model ends in XR-Linear rankers read the `xlinear` section
TRANSFORMER = frozenset({"transformer", "int8", "fp16", "onnx-optimize", "weighted-losses", "torchrun"})
TRAIN_EXTRA = ("torch", "transformers")  # what the transformer families' training imports from the train extra

FAMILIES: dict[str, Family] = {
    family.kind: family
    for family in (
        Family(
            "xlinear",
            None,
            "xtag.training.xlinear.config:XLinearConfig",
            "xtag.training.xlinear.entry:train",
            "xtag.training.xlinear.export:export",
            ("tfidf", "static-encoder", "label-tree", "rankers", "label-encoder", "label-index", "label-fusion"),
            loaders="xtag.models.xlinear.loaders:LOADERS",
            batch_wait_ms=0.0,
            parallel_calls=2,
            capabilities=RANKERS | {"weighted-losses", "static-dense", "update", "ray", "label-text"},
            update="xtag.training.xlinear.update:update",
        ),
        Family(
            "xr-transformer",
            "xr_transformer",
            "xtag.training.xr_transformer.config:XRTransformerConfig",
            "xtag.training.xr_transformer.train:train_xr_transformer",
            "xtag.training.xr_transformer.export:export",
            ("tfidf", "text-encoder", "label-tree", "rankers", "shortlist"),
            loaders="xtag.models.xr_transformer.loaders:LOADERS",
            batch_wait_ms=2.0,
            capabilities=TRANSFORMER | RANKERS | {"shortlist", "update"},
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
            loaders="xtag.models.lightxml.loaders:LOADERS",
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
            loaders="xtag.models.cascadexml.loaders:LOADERS",
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
            loaders="xtag.models.lamp.loaders:LOADERS",
            batch_wait_ms=2.0,
            capabilities=frozenset({"transformer", "ray", "int8", "rerank-candidates"}),
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
