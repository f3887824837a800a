"""POST /v1/admin/reload: load a bundle beside the served one and switch only if it loads and warms up.

Swapping the model is the most powerful thing the API does, so the route is fenced: the admin credential
(XTAG_ADMIN_KEY; without one configured the whole admin plane is off, and SIGHUP is the local way to reload),
targets only under XTAG_BUNDLE_ROOT, one reload at a time and at most one per XTAG_RELOAD_INTERVAL_S per model
(each costs a whole load and warm-up of CPU beside the traffic), a JSON Content-Type (a foreign web page
cannot send one without a CORS preflight), and answers that name no server paths, but for a refused bundle
switch: it names the bundle root, the working directory and the absolute paths looked at, so that the admin
sees how a relative path was read.
"""

from __future__ import annotations

import math
import os
import signal
import time
from pathlib import Path

from fastapi import APIRouter, Request
from xtag.models.errors import XtagError
from xtag.service.deps import ModelRepositoryDep, ReloadBody, SettingsDep, openapi_body
from xtag.service.http.problems import Problem, problem_responses
from xtag.service.observability.prometheus import served_name
from xtag.service.schemas import ReloadRequest, ReloadResponse
from xtag.service.state.model_slot import ReloadInProgress

router = APIRouter(tags=["admin"])


async def reload_model(
    request_app,
    bundle: str | Path | None = None,
    wait: bool = True,
    name: str | None = None,
    version: str | None = None,
) -> dict:
    """Shared by the routes and SIGHUP: (re)load model `name` (default: the default model; its `version`, default
    the stable one) from `bundle` (default: its configured path); returns the reload summary; raises XtagError and
    keeps the old model."""
    start = time.perf_counter()
    state = request_app.state
    try:
        if name is None:
            old, new = await state.registry.load(bundle, wait=wait)
        else:
            old, new = await state.registry.put(name, bundle, wait=wait, version=version)
    except ReloadInProgress:
        raise
    except XtagError:
        state.metrics.reloads.labels(_reloaded_name(state, bundle, name), "failed").inc()
        raise
    state.metrics.reloads.labels(served_name(new), "ok").inc()
    status = "unchanged" if old is not None and old.bundle.version == new.bundle.version else "reloaded"
    return {
        "status": status,
        "model": new.ref,
        "previous": old.ref if old else None,
        "took_ms": round((time.perf_counter() - start) * 1e3, 3),
    }


def _reloaded_name(state, bundle: str | Path | None, name: str | None) -> str:
    """The served name a failed reload was for: the one asked for, else the default model's (else the bundle's)."""
    if name is not None:
        return name
    if state.registry.default is not None:
        return state.registry.default
    return Path(bundle).name if bundle is not None else ""


async def reload_all(request_app) -> dict[str, str]:
    """Reload every model, the default first (SIGHUP, start), then each model's other versions; {name: why} of the
    failed (NAME/VERSION for another version: it serves no traffic while it has no model). A configured model that
    was unloaded (DELETE) comes back from its configured path: SIGHUP is the way back without an admin key."""
    failed = {}
    registry = request_app.state.registry
    names = sorted(registry.reloadable, key=lambda n: n != registry.default)
    for name in names:
        try:
            unloaded = registry.slots[name].unloaded
            await reload_model(request_app, registry.configured[name] if unloaded else None, name=name)
        except XtagError as exc:
            failed[name] = str(exc)
    for name in names:
        for version, slot in registry.traffic[name].versions.items():
            if slot is not registry.slots[name]:
                try:
                    await reload_model(request_app, slot.path, name=name, version=version)
                except XtagError as exc:
                    failed[f"{name}/{version}"] = str(exc)
    return failed


def throttle(request: Request, name: str) -> None:
    """429 with Retry-After for an HTTP load of `name` sooner than XTAG_RELOAD_INTERVAL_S after its last load: two
    clients looping on reload held 20 of 25 CPU seconds and took another model's p99 from 12 to 255 ms (issue 47).
    Per model, from the later of the last HTTP load attempted and the served model's own load (at start, SIGHUP):
    with several workers each HTTP reload rolls them all (SIGHUP), and fresh workers must not take the next one
    at once. Wall-clock times (loaded_at is one); a clock set back never blocks longer than one interval."""
    interval = request.app.state.settings.admin.reload_interval_s
    if interval <= 0:
        return
    slot = request.app.state.registry.slots.get(name)
    loaded = slot.current.loaded_at if slot is not None and slot.current is not None else -math.inf
    started, now = request.app.state.reload_started, time.time()
    ago = now - max(started.get(name, -math.inf), loaded)
    wait = min(interval - ago, interval)
    if wait > 0:
        raise Problem(
            429,
            "reload-rate-limited",
            f"model {name} was loaded {max(ago, 0):.1f} s ago; one HTTP reload or PUT per model every {interval:g} s "
            f"(XTAG_RELOAD_INTERVAL_S); retry in {wait:.1f} s (SIGHUP is not limited)",
            headers={"Retry-After": str(math.ceil(wait))},
        )
    started[name] = now


def _still_serving(request: Request) -> str:
    current = request.app.state.registry.current
    return f"; still serving {current.ref['name']} {current.ref['version']}" if current else ""


def candidates(bundle: str, root: Path) -> list[Path]:
    """Where `bundle` may be, as written (normalised, symlinks not followed): an absolute path as it is; a relative
    one under the bundle root first, then under the server's working directory (where `xtag serve bundles/x`
    was typed, so `bundles/y` names its sibling there too)."""
    bases = [root] + ([Path(cwd)] if (cwd := _working_directory()) else [])
    return list(dict.fromkeys(Path(os.path.normpath(base / bundle)) for base in bases))


def _working_directory() -> str | None:
    try:
        return os.getcwd()
    except OSError:  # removed under the running server
        return None


def resolve_target(request: Request, bundle: str) -> Path:
    """The bundle directory asked for, symlinks resolved, if it lies under the bundle root and holds a manifest.

    403 only for a path that is outside the root as written (decided on the string, so it tells nothing about
    the filesystem); for anything under it one 404 alike for "missing", "not a bundle", a symlink that leads
    out of the root, and a name the filesystem refuses (a NUL byte, a component over 255 bytes, a symlink
    loop, which raised 500s), so the endpoint cannot be used to probe what exists there. Both answers name the
    root and the absolute paths looked at (the caller holds the admin key: they are the caller's own string,
    joined to the root or the working directory)."""
    settings = request.app.state.settings
    root, as_configured = settings.reload_root(), settings.reload_root(resolve=False)
    if root is None:
        raise Problem(403, "outside-bundle-root", "no bundle root: set XTAG_BUNDLE_ROOT")
    how = (
        f"the bundle root is {as_configured} (XTAG_BUNDLE_ROOT, default: the configured bundle's parent "
        "directory); a relative path is looked up under it, then under the server's working directory "
        f"{_working_directory()}"
    )
    tried = [path for path in candidates(bundle, as_configured) if path.is_relative_to(as_configured)]
    tried += [path for path in candidates(bundle, root) if path.is_relative_to(root) and path not in tried]
    if not tried:
        shown = " or ".join(map(str, candidates(bundle, as_configured)))
        raise Problem(
            403, "outside-bundle-root", f"the bundle must lie under the bundle root, and {shown} does not; {how}"
        )
    for path in tried:
        try:
            target = path.resolve()
            if target.is_relative_to(root) and (target / "manifest.json").is_file():
                return target
        except (OSError, ValueError, RuntimeError):  # ENAMETOOLONG, embedded NUL, symlink loop
            pass
    raise Problem(  # 404: nothing servable is there (schemathesis counts a 422 to a schema-valid path as ST202)
        404,
        "not-a-bundle",
        f"{bundle!r} is not a bundle directory under the bundle root (tried {', '.join(map(str, tried))}); "
        f"{how}{_still_serving(request)}",
    )


@router.post(
    "/v1/admin/reload",
    response_model=ReloadResponse,
    openapi_extra=openapi_body(ReloadRequest),
    summary="Reload the bundle (or switch to another); the old one keeps serving if the new one fails",
    description="`{}` re-reads the configured bundle (an empty body is accepted too, with a JSON Content-Type: "
    "a POST without one is what a foreign web page can send, and gets 415); `bundle` switches to a directory "
    "under XTAG_BUNDLE_ROOT. Needs XTAG_ADMIN_KEY (X-Admin-Key or Authorization: Bearer): without one "
    "configured the admin plane is off (403) and SIGHUP is the way to reload. At most one HTTP reload per model "
    "every XTAG_RELOAD_INTERVAL_S (429 with Retry-After).",
    responses=problem_responses(
        {
            400: "invalid JSON or UTF-8",
            401: "missing or wrong admin key",
            403: "no XTAG_ADMIN_KEY configured (the admin plane is off), or a bundle outside XTAG_BUNDLE_ROOT",
            409: "another reload is in progress, or a bundle switch asked of a multi-worker server",
            413: "body too large",
            415: "not application/json",
            404: "no bundle there: missing, not a bundle, or a name the filesystem refuses (not-a-bundle)",
            422: "invalid field, or the new bundle did not load or warm up; the old one still serves",
            429: "this model was reloaded less than XTAG_RELOAD_INTERVAL_S ago (Retry-After says when to retry)",
        }
    ),
)
async def reload(request: Request, body: ReloadBody, settings: SettingsDep, registry: ModelRepositoryDep) -> dict:
    target: Path | None = None
    if body.bundle is not None:
        if settings.server.workers > 1:
            raise Problem(
                409,
                "multi-worker",
                "switching to another bundle path needs a single worker; with several, "
                "update the configured path (XTAG_BUNDLE) and restart, or reload it in place",
            )
        target = resolve_target(request, body.bundle)
    throttle(request, registry.default or "")
    try:
        summary = await reload_model(request.app, target, wait=False)
    except ReloadInProgress as exc:
        raise Problem(409, "reload-in-progress", str(exc), headers={"Retry-After": "1"}) from exc
    except XtagError as exc:
        raise Problem(422, "reload-failed", f"{exc}{_still_serving(request)}") from exc
    if settings.server.uvicorn_supervisor_pid == os.getppid():  # roll every sibling worker onto it
        os.kill(os.getppid(), signal.SIGHUP)
    return summary
