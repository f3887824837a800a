"""One named model's slot: its served bundle, loaded and warmed beside the old one, swapped atomically, or unloaded.

A server holds one slot per model (service/state/model_repository.py); each loads, reloads and unloads on its own."""

from __future__ import annotations

import asyncio
import logging
import os
import re
import time
import weakref
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import anyio.to_thread
import numpy as np
import orjson
from xtag.config.model_set import DEFAULT_VERSION
from xtag.models.bundle.loader import Bundle, load_bundle
from xtag.models.bundle.snapshot import Snapshot, take_snapshot
from xtag.models.errors import XtagError
from xtag.models.explain.linear import Explainer
from xtag.models.explain.select import explainer_for
from xtag.models.features.device import RuntimeOptions
from xtag.models.inference.reweighting import gains_for, label_weights, predict_reweighted
from xtag.models.inference.types import Predictions
from xtag.service.http.cost import label_bytes, tree_shape
from xtag.service.http.response_json import LabelPrefixes, explained_lists
from xtag.service.observability.drift import DEFAULT_WINDOW, LabelDrift
from xtag.service.state.memory import check_memory, release_memory, resident_mb, trim_heap

if TYPE_CHECKING:
    from xtag.models.explain.lamp import LampExplainer
    from xtag.service.observability.prometheus import ModelSeries

log = logging.getLogger("xtag.service")


@dataclass
class ServedModel:
    """A loaded bundle plus what requests derive from it (weights per scheme, prediction counts)."""

    bundle: Bundle
    loaded_at: float = field(default_factory=time.time)
    warmup_ms: float = 0.0
    drift: LabelDrift | None = None  # attached once warmed up, so warm-up answers are not counted as traffic
    served_as: str = ""  # the name it is served under (its slot's), set when it goes live
    served_version: str = ""  # the version of that name it serves (its slot's), set when it goes live
    batcher: object | None = None  # its own micro-batcher (service/batching.py), set when it goes live
    series: ModelSeries | None = None  # its Prometheus children (observability/prometheus.py), set when it goes live
    shadow: object | None = None  # its ShadowScorer (state/shadow.py, which imports this module), if any
    snapshot: Snapshot | None = None  # the private copy it was loaded from (models/bundle/snapshot.py), if any
    _weights: dict[tuple[str, float | None], np.ndarray] = field(default_factory=dict, repr=False)
    _explainer: Explainer | LampExplainer | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        p = self.bundle.predictor
        self.n_labels = p.n_labels
        self.names = p.vocab.names
        self.lower_names = [n.lower() for n in self.names]
        self.label_prefixes = LabelPrefixes(self.names)  # responses' JSON per label (service/http/response_json.py)
        self.default_beam = int(p.model.config.beam_size)
        self.ref = {"name": self.bundle.name, "version": self.bundle.version}
        self.kind = str(self.bundle.manifest.get("model_kind", "unknown"))
        self.predicted = np.zeros(self.n_labels, dtype=np.int64)  # label id → times returned
        self.level_nodes = tree_shape(p)  # what admission's cost model needs of the bundle (service/http/cost.py)
        self.label_bytes = label_bytes(self.names)
        self.cost_hint = p.cost_hint()  # the family's serving-cost profile (models/inference/model.py)

    def gains(self, scheme: str, alpha: float, beta: float | None) -> np.ndarray | None:
        """The a_j of the request's reweighting (None for plain scores); weights cached per (scheme, beta)."""
        if alpha == 0:
            return None
        key = (scheme, beta)
        w = self._weights.get(key)
        if w is None:
            vocab = self.bundle.predictor.vocab
            w = self._weights[key] = label_weights(vocab.frequency_array, vocab.n_train_docs, scheme, beta)
        return gains_for(w, alpha)

    @property
    def explainer(self) -> Explainer | LampExplainer:
        """The bundle's explainer (models/explain/linear.py), made by the first `explain` request, so that plain traffic
        never pays for it; raises ExplainUnavailable for a bundle with nothing to explain with."""
        if self._explainer is None:
            self._explainer = explainer_for(self.bundle.predictor)
        return self._explainer

    def explained(
        self,
        texts: list[str],
        preds: Predictions,
        threshold: float | None,
        rerank: bool = True,
        gains: np.ndarray | None = None,
    ) -> list[orjson.Fragment]:
        """The response's label lists for `preds` of `texts`, each label with its explanation (`rerank`: whether
        a re-ranking bundle's second stage made `preds`; `gains`: a reweighted request's, shown per label)."""
        explain = self.explainer.explain
        return explained_lists(
            self.names, preds, threshold, lambda d, labels: explain(texts[d : d + 1], [labels], rerank=rerank)[0], gains
        )

    def predict(
        self, texts: list[str], k: int, beam_size: int | None, a: np.ndarray | None, rerank: bool = True
    ) -> Predictions:
        """Top-k for a batch through the bundle's predictor (re-ranked when `a` is given; `rerank=False`: a
        re-ranking bundle's first stage alone)."""
        beam = beam_size or self.default_beam
        preds = predict_reweighted(self.bundle.predictor, texts, k, a, beam, self.n_labels, rerank)
        labels = preds.labels[preds.labels >= 0]
        np.add.at(self.predicted, labels, 1)
        if self.drift is not None:
            self.drift.add(labels, len(texts))
        return preds

    def warm_up(self, text: str) -> None:
        """Check the model, not just run it: a bundle whose arrays are corrupt (NaN weights or biases) loads
        and predicts without raising, yet scores NaN, returns no label, or (the hinge post-processors map
        NaN to 1.0) ranks garbage. load_bundle refuses NaN and inf in any array, as it does for every other
        command; here the warm-up texts (the configured one, and one of label names that surely hits the
        model's vocabulary) must also get finite top-k lists, plain and reweighted."""
        start = time.perf_counter()
        k = min(10, self.n_labels)
        texts = [text, " ".join(n.replace("::", " ").replace("_", " ") for n in self.names[:64])]
        check_warmup(self.predict(texts, k, None, None), "plain")
        check_warmup(self.predict(texts, k, None, self.gains("psp", 0.5, None)), "reweighted")
        self.predicted[:] = 0
        self.warmup_ms = (time.perf_counter() - start) * 1e3


class WarmupCheckFailed(XtagError):
    """The warm-up prediction ran but its answer is unusable."""


def check_warmup(preds: Predictions, what: str) -> None:
    """Raise WarmupCheckFailed unless every document got at least one label and every score is finite."""
    found = preds.labels >= 0
    if not found.any(axis=1).all():
        raise WarmupCheckFailed(f"the {what} warm-up prediction returned no labels (corrupt weights or biases?)")
    bad = int((~np.isfinite(preds.scores[found])).sum())
    if bad:
        raise WarmupCheckFailed(f"the {what} warm-up prediction gave {bad} non-finite scores (NaN or inf weights?)")


def load_and_warm(
    path: Path,
    warmup_text: str,
    device=None,
    options: RuntimeOptions | None = None,
    snapshot_root: Path | None = None,
) -> ServedModel:
    """Load (on `device`, default cpu, with the settings' `options`), verify and warm a bundle; raises XtagError if
    any step fails. With `snapshot_root`, the bundle is first copied there and the copy is what is verified and
    served, so that no change to the bundle's files can reach the pages it serves (models/bundle/snapshot.py).

    The error raised is a fresh one, made after the half-built model is gone: a failure's traceback holds
    the frames that built it, and in the worker thread that loads, anyio's future and that traceback form a
    reference cycle, so each refused bundle stayed in memory until a full collection, and the memory it freed
    then stayed in the thread's malloc arena (issue 30: every refused reload grew RSS by ~7 MB)."""
    model, error = _load_and_warm(path, warmup_text, device, options, snapshot_root)
    if model is None:
        release_memory()
        raise XtagError(error)
    return model


def _load_and_warm(path: Path, warmup_text: str, device, options, snapshot_root) -> tuple[ServedModel | None, str]:
    """(the warmed model, "") or (None, why not): no exception, so no traceback, leaves this function. A copy
    that did not load is removed: the next load copies the bundle again rather than trusting it."""
    snapshot = None
    try:
        snapshot = take_snapshot(path, snapshot_root) if snapshot_root is not None else None
        bundle = load_bundle(snapshot.copy if snapshot else path, device, options)
        bundle.path = Path(path)  # what the logs, the memory figures and reloads name: the bundle, not its copy
        model = ServedModel(bundle, snapshot=snapshot)
    except Exception as exc:  # anything that keeps a bundle from loading leaves the old one in place
        why = str(exc) if isinstance(exc, XtagError) else f"{path}: cannot load ({type(exc).__name__}: {exc})"
        if snapshot is not None:
            snapshot.discard()
            why = why.replace(str(snapshot.copy), str(path))  # the bundle's files, named as the user knows them
        return None, why
    try:
        model.warm_up(warmup_text)
    except WarmupCheckFailed as exc:
        why = f"{path}: refused: {exc}"
    except Exception as exc:  # a bundle that loads but cannot predict must not go live
        why = f"{path}: warm-up prediction failed ({type(exc).__name__}: {exc})"
    else:
        return model, ""
    if snapshot is not None:
        snapshot.discard()
    return None, why


def on_gpu(model: ServedModel) -> bool:
    """Whether any component of the bundle was placed on a GPU (XR-Linear's never are: models/features/device.py)."""
    return any(where != "cpu" and "CPU" not in where for where in model.bundle.runtime.get("placement", {}).values())


def log_swap(old: ServedModel | None, new: ServedModel, path: Path, seconds: float) -> None:
    """The one line per load or reload: the model's name, old → new version, seconds (load + warm-up), RSS after
    the switch."""
    rss = resident_mb()
    fields = {
        "event": "bundle_reloaded" if old is not None else "bundle_loaded",
        "model": new.served_as,
        "served_version": new.served_version,
        "bundle": new.bundle.name,
        "version": new.bundle.version,
        "previous": f"{old.bundle.name} {old.bundle.version}" if old is not None else None,
        "kind": new.kind,
        "labels": new.n_labels,
        "seconds": round(seconds, 3),
        "rss_mb": rss,
        "bundle_path": str(path),
    }
    was = f"reloaded {fields['previous']} → " if old is not None else "loaded "
    log.info(
        "model %s: %s%s %s (%s, %d labels) from %s in %.2f s; RSS %s MB",
        new.served_as,
        was,
        new.bundle.name,
        new.bundle.version,
        new.kind,
        new.n_labels,
        path,
        seconds,
        rss if rss is not None else "?",
        extra=fields,
    )


class ReloadInProgress(XtagError):
    """Another load is running; HTTP callers are told so (409) instead of being queued behind it."""


def public_message(message: str, path: Path) -> str:
    """`message` with the bundle's path shown as its directory name: errors reach clients (/ready, the
    reload answer), and absolute paths tell them about the server's filesystem. Any absolute path still left
    (none should be: loaders name files inside the bundle) is replaced, not shown."""
    for form in sorted({str(path), str(path.absolute()), str(path.resolve())}, key=len, reverse=True):
        message = message.replace(form, path.name or str(path))
    return SERVER_PATH.sub("<server path>", message)


SERVER_PATH = re.compile(r"(?<![\w.~-])/[^\s'\"(),;]+")  # "/a/b", not "bundle/a/b" nor "1/2"


class ModelSlot:
    """One named model: its current ServedModel; `load` swaps a new one in only after a successful load and warm-up,
    `unload` lets it go. The other slots of the server are never touched."""

    def __init__(
        self,
        name: str,
        path: Path | None,
        warmup_text: str,
        device=None,
        drift_window: int = DEFAULT_WINDOW,
        options: RuntimeOptions | None = None,
        max_memory_mb: float | None = None,
        listeners: list | None = None,
        snapshot_root: Path | None = None,
        version: str = DEFAULT_VERSION,
    ):
        self.name, self.path, self.warmup_text, self.device, self.options = name, path, warmup_text, device, options
        self.version = version  # which of model `name`'s versions this slot serves (service/rollout/traffic.py)
        self.drift_window, self.max_memory_mb, self.snapshot_root = drift_window, max_memory_mb, snapshot_root
        self.changed_logged: str | None = None  # the change already logged (changed: one WARNING per change)
        self.current: ServedModel | None = None
        self.last_error: str | None = None
        # the same error with the bundle's path as it was given: for the operator who started the server (the log,
        # `xtag serve`'s exit line), whose own paths are no secret and whose suggested commands must work as typed
        self.local_error: str | None = None
        self.loading = False
        self.unloaded = False
        self._lock = asyncio.Lock()
        self.listeners: list = [] if listeners is None else listeners  # called with (old, new) after a swap or unload

    @property
    def busy(self) -> bool:
        return self._lock.locked()

    @property
    def changed(self) -> str | None:
        """Why the served bundle's files no longer hold what was loaded (one stat per file), else None: the model
        still answers from its private copy, but is not ready until it is reloaded. Logged once per change."""
        model = self.current
        why = model.snapshot.changed() if model is not None and model.snapshot is not None else None
        if why is not None and why != self.changed_logged:
            log.warning(
                "model %s: %s",
                self.name,
                why,
                extra={"event": "bundle_changed", "model": self.name, "bundle_path": str(self.path)},
            )
        self.changed_logged = why
        return why

    @property
    def error(self) -> str | None:
        """Why this model is not ready, or why its latest reload was refused: what /ready and GET /v1/models say."""
        return self.changed or self.last_error

    @property
    def state(self) -> str:
        """loading | ready | failed | unloaded (a failed reload while the old model serves is still ready; a model
        whose bundle changed on disk since load has failed, though it still answers from its private copy)."""
        if self.loading:
            return "loading"
        if self.current is not None:
            return "failed" if self.changed else "ready"
        if self.unloaded:
            return "unloaded"
        return "failed" if self.last_error else "loading"

    async def load(self, path: Path | None = None, wait: bool = True) -> tuple[ServedModel | None, ServedModel]:
        """Load `path` (default: the configured one) beside the current model and switch to it; returns (old, new).

        With wait=False a load already running raises ReloadInProgress instead of queueing behind it.
        The error raised (and kept in last_error for /ready) names the bundle by its directory name only."""
        if not wait and self.busy:
            raise ReloadInProgress(f"model {self.name}: another load is in progress; try again when it has finished")
        async with self._lock:
            target = Path(path) if path is not None else self.path
            if target is None:
                raise XtagError("no bundle configured (set XTAG_BUNDLE or pass a bundle path)")
            self.loading = True
            start = time.perf_counter()
            try:
                check_memory(target, self.max_memory_mb)
                new = await anyio.to_thread.run_sync(
                    load_and_warm, target, self.warmup_text, self.device, self.options, self.snapshot_root
                )
            except Exception as exc:  # anything that keeps a bundle from serving leaves the old one in place
                msg = str(exc) if isinstance(exc, XtagError) else f"{target}: cannot load ({type(exc).__name__}: {exc})"
                log.error(
                    "model %s: bundle not loaded: %s",
                    self.name,
                    msg,
                    extra={"event": "load_failed", "model": self.name, "bundle_path": str(target)},
                )
                self.last_error, self.local_error = public_message(msg, target), msg
                raise XtagError(self.last_error) from exc
            finally:
                self.loading = False
            new.drift = LabelDrift(new.bundle.predictor.vocab.frequency_array, self.drift_window)
            new.served_as, new.served_version = self.name, self.version
            new.ref = {**new.ref, "served_version": self.version}
            for listener in self.listeners:  # before the switch: it gets its batcher before its first request
                listener(self.current, new)
            old, self.current = self.current, new  # the atomic switch: one reference assignment
            if old is not None:  # once the last request on it is done: a storm of reloads kept 135 MB (issue 47)
                weakref.finalize(old, trim_heap)
            self.path, self.last_error, self.local_error, self.unloaded = target, None, None, False
            _hold(new)
            _let_go(old)
            log_swap(old, new, target, time.perf_counter() - start)
            if self.device is not None and self.device.is_cuda and not on_gpu(new):
                log.warning(
                    "device %s: %s (%s) has nothing to place on a GPU; it runs on the CPU",
                    self.device,
                    new.bundle.name,
                    new.kind,
                    extra={"event": "nothing_on_gpu", "kind": new.kind},
                )
            return old, new

    def unload(self) -> ServedModel | None:
        """Stop serving this model (requests already holding it finish); its arrays go once they are done."""
        old, self.current, self.unloaded, self.last_error = self.current, None, True, None
        self.local_error = None
        if old is not None:
            for listener in self.listeners:
                listener(old, None)
            _let_go(old)
        log.info("model %s: unloaded", self.name, extra={"event": "bundle_unloaded", "model": self.name})
        release_memory()
        return old


_COPIES: dict[Path, int] = {}  # private copy → how many slots of this process serve it


def _hold(model: ServedModel) -> None:
    if model.snapshot is not None:
        _COPIES[model.snapshot.copy] = _COPIES.get(model.snapshot.copy, 0) + 1


def _let_go(model: ServedModel | None) -> None:
    """Remove the copy a model was served from once no slot of this process serves it, when this process alone
    uses it (its folder is named after this pid: one worker; the workers of `--workers N` share theirs, removed
    when the server stops). Requests still running on the model keep their mappings: unlinked pages stay valid."""
    if model is None or model.snapshot is None:
        return
    copy = model.snapshot.copy
    _COPIES[copy] = _COPIES.get(copy, 1) - 1
    if _COPIES[copy] <= 0:
        del _COPIES[copy]
        if copy.parent.name == str(os.getpid()):
            model.snapshot.discard()
