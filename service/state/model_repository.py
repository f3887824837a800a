"""The models one server holds, by name: a ModelSlot each, loaded, reloaded and unloaded on its own; one the default.

The one-model API (/v1/predict, /ready, /v1/model, /v1/admin/reload) reads the default through `current`,
`load`, `last_error` and `loading`, which are the default slot's: a one-model server behaves as before.

A model with versions has a slot per version and a Traffic (service/rollout/traffic.py) that routes between
them; `slots[name]` is its stable version's slot, so that what reads one slot per model (reload, unload, /ready,
shadows) reads the stable one, and follows it when a promote or rollback changes it.
"""

from __future__ import annotations

import logging
from pathlib import Path

from xtag.config.model_set import DEFAULT_VERSION, ModelSet, bundle_name
from xtag.models.errors import XtagError
from xtag.models.features.device import RuntimeOptions
from xtag.service.observability.drift import DEFAULT_WINDOW
from xtag.service.rollout.traffic import Hooks, Traffic, TrafficChange
from xtag.service.state.memory import bundle_bytes
from xtag.service.state.model_slot import ModelSlot, ServedModel

log = logging.getLogger("xtag.service")


class UnknownModel(XtagError):
    """No model of that name is served."""


class DefaultModelBusy(XtagError):
    """The default model cannot be unloaded unless another one becomes the default."""


class ModelRepository:
    """Every model of the server; `default` answers the unnamed routes. Slots change only on the event loop."""

    def __init__(
        self,
        models: ModelSet | None,
        warmup_text: str,
        device=None,
        drift_window: int = DEFAULT_WINDOW,
        options=None,
        max_memory_mb: float | None = None,
        snapshot_root: Path | None = None,
    ):
        self.warmup_text, self.device, self.drift_window = warmup_text, device, drift_window
        self.options, self.max_memory_mb = options, max_memory_mb
        self.snapshot_root = snapshot_root  # where bundles are copied to be served (models/bundle/snapshot.py)
        self.listeners: list = []  # called with (old, new) after any model's swap, (old, None) after an unload
        self.slots: dict[str, ModelSlot] = {}  # name → its stable version's slot
        self.traffic: dict[str, Traffic] = {}  # name → its versions' slots and the traffic between them
        self.hooks = Hooks()  # every answered request and every traffic change, for whoever subscribes
        self.hooks.changed.append(self._follow_stable)
        models = models or ModelSet()
        self.shadows: dict[str, str] = dict(models.shadows)  # NEW → OLD (scored elsewhere: shadow scoring)
        self.configured: dict[str, Path] = {spec.name: spec.path for spec in models.models}  # SIGHUP's way back
        for spec in models.models:
            self.add(spec.name, spec.path, spec.versions, spec.traffic, spec.stable)
        self.default: str | None = models.default

    def options_for(self, name: str):
        """The runtime options a model loads with: a shadow's graphs run on one intra-op thread, since its scoring is
        background work that must leave the other cores to the requests it shadows (service/state/shadow.py)."""
        if name not in self.shadows:
            return self.options
        return (self.options or RuntimeOptions()).model_copy(update={"encoder_threads": 1})

    def add(
        self,
        name: str,
        path: Path | None,
        versions: dict[str, Path] | None = None,
        weights: dict[str, int] | None = None,
        stable: str | None = None,
    ) -> ModelSlot:
        """A model's slots (one per version; without versions, `path` is its one version) and its Traffic; returns
        the stable version's slot."""
        slots = {
            version: ModelSlot(
                name,
                bundle,
                self.warmup_text,
                self.device,
                self.drift_window,
                self.options_for(name),
                self.max_memory_mb,
                self.listeners,
                self.snapshot_root,
                version,
            )
            for version, bundle in (versions or {DEFAULT_VERSION: path}).items()
        }
        traffic = self.traffic[name] = Traffic(name, slots, weights, stable, self.hooks)
        slot = self.slots[name] = slots[traffic.stable]
        return slot

    def _follow_stable(self, change: TrafficChange) -> None:
        """After a promote or rollback, the model's slot is its new stable version's."""
        self.slots[change.model] = self.traffic[change.model].versions[change.stable]

    def versions(self, name: str) -> dict[str, ModelSlot]:
        """Every version's slot of a served model (UnknownModel names those there are)."""
        self.slot(name)
        return self.traffic[name].versions

    # the default model, as the one-model routes see it
    @property
    def default_slot(self) -> ModelSlot | None:
        return self.slots.get(self.default) if self.default is not None else None

    @property
    def current(self) -> ServedModel | None:
        slot = self.default_slot
        return None if slot is None else slot.current

    @property
    def last_error(self) -> str | None:
        slot = self.default_slot
        return None if slot is None else slot.last_error

    @property
    def loading(self) -> bool:
        slot = self.default_slot
        return slot is not None and slot.loading

    @property
    def path(self) -> Path | None:
        slot = self.default_slot
        return None if slot is None else slot.path

    async def load(self, path: Path | None = None, wait: bool = True) -> tuple[ServedModel | None, ServedModel]:
        """(Re)load the default model (from `path`, else its configured one); with no model yet, `path` becomes the
        default, named after its directory."""
        slot = self.default_slot
        if slot is None:
            if path is None:
                raise XtagError("no bundle configured (set XTAG_BUNDLE or pass a bundle path)")
            self.default = bundle_name(Path(path))
            slot = self.add(self.default, Path(path))
        return await slot.load(path, wait=wait)

    # models by name
    @property
    def names(self) -> list[str]:
        """The models that are loaded or loading (not the unloaded ones), in configuration order."""
        return [name for name, slot in self.slots.items() if not slot.unloaded]

    @property
    def reloadable(self) -> list[str]:
        """What SIGHUP reloads: every model served, and every configured one unloaded since (from its configured path)."""
        return [name for name, slot in self.slots.items() if not slot.unloaded or name in self.configured]

    def slot(self, name: str) -> ModelSlot:
        """The slot of a model that is served (or loading, or failed); UnknownModel names those there are."""
        slot = self.slots.get(name)
        if slot is None or slot.unloaded:
            raise UnknownModel(f"no model named {name!r} is served; models: {', '.join(self.names) or 'none'}")
        return slot

    async def put(
        self, name: str, path: Path | None, wait: bool = False, version: str | None = None
    ) -> tuple[ServedModel | None, ServedModel]:
        """Load `path` as model `name` (its `version`, default the stable one): a new model, or a new bundle for one
        served (swapped once it is warm); no path: reload its configured one. A new name whose bundle fails is
        dropped again, as if never asked for: the caller got the reason, and a `failed` entry would stay in
        /v1/models and /ready for ever (issue 47)."""
        slot = self.slots.get(name) if version is None else self.traffic[name].versions[version]
        new = slot is None
        if new:
            slot = self.add(name, path)
        try:
            return await slot.load(path, wait=wait)
        except XtagError:
            if new and self.slots.get(name) is slot and slot.current is None:
                del self.slots[name], self.traffic[name]
            raise

    def unload(self, name: str, new_default: str | None = None) -> ServedModel | None:
        """Stop serving `name`; the default only when `new_default`, a ready model, takes its place."""
        slot = self.slot(name)
        if new_default is not None:
            successor = self.slot(new_default)
            if new_default == name or successor.current is None:
                raise DefaultModelBusy(f"new default {new_default!r} must be another model, loaded and ready")
            self.default = new_default
        if name == self.default:
            others = [n for n in self.names if n != name]
            raise DefaultModelBusy(
                f"{name!r} is the default model: name another one to take its place (?new_default=NAME; "
                f"models: {', '.join(others) or 'none'})"
            )
        for other in self.traffic[name].versions.values():
            if other is not slot and not other.unloaded:
                other.unload()
        return slot.unload()

    def describe(self) -> list[dict]:
        """What GET /v1/models and /ready show of each model (no server paths)."""
        return [self._entry(name, slot) for name, slot in self.slots.items()]

    def _entry(self, name: str, slot: ModelSlot) -> dict:
        model = slot.current
        entry = {
            "name": name,
            "default": name == self.default,
            "state": slot.state,
            "error": slot.error,
            "shadow_of": self.shadows.get(name),
            "family": None,
            "version": None,
            "label_count": None,
            "memory_bytes": None,
            "loaded_at": None,
            "versions": [],
            "traffic": None,
        }
        traffic = self.traffic.get(name)
        if traffic is not None:
            entry["traffic"] = traffic.describe()
            entry["versions"] = [self._version(v, s, traffic.weights.get(v, 0)) for v, s in traffic.versions.items()]
        if model is not None:
            entry.update(
                family=model.kind,
                version=model.bundle.version,
                label_count=model.n_labels,
                memory_bytes=bundle_bytes(model.bundle.path),
                loaded_at=model.loaded_at,
            )
        return entry

    @staticmethod
    def _version(version: str, slot: ModelSlot, weight: int) -> dict:
        """One version of a model as GET /v1/models shows it: its state, weight and bundle."""
        model = slot.current
        return {
            "version": version,
            "state": slot.state,
            "error": slot.error,
            "weight": weight,
            "bundle": None if model is None else model.ref["name"],
            "bundle_version": None if model is None else model.ref["version"],
            "loaded_at": None if model is None else model.loaded_at,
        }
