"""XTAG_EVICT=lru: many models on one server in less memory than they take together, as Ray Serve's model
multiplexing does. A model loads on its first prediction request and the least recently used one is evicted to
make room under XTAG_MAX_MEMORY_MB; the default (XTAG_EVICT=never) loads every model at start and refuses a load
that does not fit (service/state/memory.py).

- The default model and the shadows are pinned: loaded at start, never evicted (the default answers /ready and
  the unnamed routes; a shadow is never asked for by a request, so it could not come back).
- A request holds its model from the moment it has it until its answer is sent (`hold`, released by the
  observability middleware through the scope's DONE_KEY): a model with requests in flight is never evicted, since
  its memory would not be freed before they end. An idle victim is taken first; when every candidate is busy the
  least recently used one drains: its new requests wait (as for a load) while those in flight finish, then it goes.
  Without the drain, a model kept busy by its clients would hold its memory for ever and the waiting load with it.
- Concurrent first requests for a model share one load; one lazy load runs at a time, so that two cannot both
  find the same free memory. A request waits for its model's load at most XTAG_LOAD_WAIT_S, then gets 503 with
  Retry-After, as does one whose model cannot fit even with every unpinned model evicted.
"""

from __future__ import annotations

import asyncio
import logging
import time

from prometheus_client import Counter, Histogram
from xtag.models.errors import XtagError
from xtag.service.state.memory import bundle_bytes, resident_mb
from xtag.service.state.model_repository import ModelRepository
from xtag.service.state.model_slot import ModelSlot, ServedModel

log = logging.getLogger("xtag.service")
WAIT_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)


class NoRoom(XtagError):
    """The model cannot be loaded now: it does not fit, or its load took longer than the request may wait."""


class EvictionMetrics:
    """Loads, evictions and the time requests waited for a load, per model, on the app's registry."""

    def __init__(self, registry) -> None:
        self.loads = Counter(
            "xtag_model_loads", "models loaded on a request (XTAG_EVICT=lru)", ["model"], registry=registry
        )
        self.evictions = Counter(
            "xtag_model_evictions",
            "models evicted, least recently used first, to make room for another (XTAG_EVICT=lru)",
            ["model"],
            registry=registry,
        )
        self.wait = Histogram(
            "xtag_model_load_wait_seconds",
            "how long a request waited for its model to load (XTAG_EVICT=lru)",
            ["model"],
            buckets=WAIT_BUCKETS,
            registry=registry,
        )


class LazyModels:
    """The lazily loaded models of a ModelRepository: who holds each, when it was last used, the load under way."""

    def __init__(self, registry: ModelRepository, limit_mb: float, wait_s: float, metrics: EvictionMetrics):
        self.registry, self.limit_mb, self.wait_s, self.metrics = registry, limit_mb, wait_s, metrics
        self.pinned = {registry.default, *registry.shadows}  # loaded at start, never evicted
        self.in_flight: dict[str, int] = {}
        self.waiting: dict[str, int] = {}  # requests woken by their model's load, not yet holding it
        self.last_used: dict[str, float] = {}
        self.loads: dict[str, asyncio.Task] = {}  # model → its load under way, shared by the requests that wait
        self.draining: set[str] = set()  # chosen to make room, waiting for its requests in flight to end
        self.one_load = asyncio.Lock()  # bound to the serving loop on first use
        self.changed = asyncio.Event()  # set (and replaced) when a request lets its model go, or one is evicted
        for name, slot in registry.slots.items():
            if name not in self.pinned:
                slot.idle = True

    async def hold(self, name: str) -> tuple[ServedModel, float]:
        """The model `name`, loaded for this request if need be, counted in flight until `release(name)`; with
        the seconds waited (0.0 when it was there). Raises NoRoom (503), UnknownModel (404)."""
        slot = self.registry.slot(name)
        start = None
        while slot.current is None or name in self.draining:
            if slot.current is None and not slot.idle:  # loading by an admin call, or failed: as without eviction
                raise NoRoom(slot.last_error or f"model {name} is loading; try again shortly")
            start = time.perf_counter() if start is None else start
            remaining = self.wait_s - (time.perf_counter() - start)
            late = f"model {name} did not load within {self.wait_s:g} s (XTAG_LOAD_WAIT_S)"
            if name in self.draining:  # it goes once its requests end: wait, then load it again
                try:
                    await asyncio.wait_for(self.changed.wait(), max(remaining, 0.0))
                except TimeoutError:
                    raise NoRoom(late) from None
                continue
            task = self.loads.get(name)
            if task is None:
                task = self.loads[name] = asyncio.get_running_loop().create_task(self._load(slot))
                task.add_done_callback(lambda _, name=name: self.loads.pop(name, None))
            self.waiting[name] = self.waiting.get(name, 0) + 1  # counted busy from the load's end until it holds
            try:
                await asyncio.wait_for(asyncio.shield(task), max(remaining, 0.0))
            except TimeoutError:
                raise NoRoom(late) from None
            finally:
                self.waiting[name] -= 1
                if name in self.draining and not self.busy(name):
                    self._changed()
            if slot.current is not None:  # woken by its load: it serves this request, even if chosen to drain since
                break
        waited = 0.0 if start is None else time.perf_counter() - start
        if start is not None:
            self.metrics.wait.labels(name).observe(waited)
        self.in_flight[name] = self.in_flight.get(name, 0) + 1
        self.last_used[name] = time.monotonic()
        return slot.current, waited

    def release(self, name: str) -> None:
        self.in_flight[name] -= 1
        self.last_used[name] = time.monotonic()
        if name in self.draining and not self.busy(name):
            self._changed()

    def busy(self, name: str) -> bool:
        """Requests hold the model, or were woken by its load and are about to: the load just done must serve them
        before another load may evict it again (else two models evict each other and no request ever gets one)."""
        return bool(self.in_flight.get(name) or self.waiting.get(name))

    def _changed(self) -> None:
        self.changed.set()
        self.changed = asyncio.Event()

    def victim(self, loading: str) -> str | None:
        """The model to make room with: loaded, not pinned, not `loading`; the least recently used of those with
        no request in flight, else the least recently used (it drains first)."""
        loaded = [
            name
            for name, slot in self.registry.slots.items()
            if slot.current is not None and name != loading and name not in self.pinned
        ]
        ranked = sorted(loaded, key=lambda name: (self.busy(name), self.last_used.get(name, 0.0)))
        return ranked[0] if ranked else None

    def evict(self, name: str) -> None:
        slot = self.registry.slots[name]
        slot.unload()
        slot.unloaded, slot.idle = False, True  # still served: it loads again on its next request
        self.metrics.evictions.labels(name).inc()
        log.info(
            "model %s: evicted (least recently used) to make room; RSS %s MB",
            name,
            resident_mb(),
            extra={"event": "model_evicted", "model": name},
        )

    async def _load(self, slot: ModelSlot) -> None:
        """Evict what must go for `slot`'s bundle to fit (least recently used first, a busy one once its requests
        in flight have ended), then load it; NoRoom when even then it cannot fit."""
        async with self.one_load:
            if slot.current is not None:
                return
            need = bundle_bytes(slot.path) / 2**20
            while (resident_mb() or 0.0) + need > self.limit_mb:
                victim = self.victim(slot.name)
                if victim is None:
                    raise NoRoom(
                        f"model {slot.name} needs about {need:.0f} MB beside the {resident_mb() or 0:.0f} MB resident, "
                        f"over XTAG_MAX_MEMORY_MB={self.limit_mb:g}, with every other model evicted but the pinned "
                        "(the default and the shadows)"
                    )
                self.draining.add(victim)
                try:
                    while self.busy(victim):
                        await self.changed.wait()
                    self.evict(victim)
                finally:
                    self.draining.discard(victim)
                    self._changed()  # its waiting requests load it again
            await slot.load()
            self.metrics.loads.labels(slot.name).inc()
