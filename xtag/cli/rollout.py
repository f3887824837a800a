"""`xtag rollout status|weights|promote|rollback`: a model's versions and the traffic between them, on a running
server (GET /v1/models, and the admin routes of service/routes/rollout.py, with XTAG_ADMIN_KEY or --admin-key)."""

from __future__ import annotations

import json
from typing import Annotated

import typer

from xtag.cli.options import echo_json, fail

app = typer.Typer(no_args_is_help=True, help="Model versions: the traffic split, promote and rollback on a server.")

URL = typer.Option(help="the server's base URL")
TIMEOUT = typer.Option(help="seconds to wait for the server")
REASON = typer.Option(help="said in the server's log line of the change")
AS_JSON = typer.Option("--json", help="print the server's answer as JSON")


def call(url: str, method: str, path: str, body: dict | None, timeout: float, admin: bool) -> dict:
    """The server's JSON answer, or `fail` with its problem's detail (or why it could not be reached)."""
    import urllib.error
    import urllib.request

    from xtag.config.settings import Settings
    from xtag.models.errors import XtagError

    keys = Settings().admin
    key = keys.admin_key if admin else keys.api_key
    headers = {"Content-Type": "application/json"}
    if key is not None:
        headers["X-Admin-Key" if admin else "X-API-Key"] = key.get_secret_value()
    target = url.rstrip("/") + path
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(target, data=data, method=method, headers=headers)  # noqa: S310
    try:
        with urllib.request.urlopen(request, timeout=timeout) as answer:  # noqa: S310  (an operator's URL)
            return json.loads(answer.read())
    except urllib.error.HTTPError as exc:
        try:
            detail = json.loads(exc.read()).get("detail")
        except ValueError:
            detail = None
        fail(XtagError(f"{method} {target}: {exc.code} {detail or exc.reason}"))
    except (urllib.error.URLError, OSError, ValueError) as exc:
        fail(XtagError(f"{target}: cannot reach the server ({getattr(exc, 'reason', None) or exc})"))


def render(entry: dict) -> str:
    traffic = entry.get("traffic") or {}
    lines = [
        f"{entry['name']}: stable {traffic.get('stable')}"
        + (f", held by {traffic['held_by']}" if traffic.get("held_by") else "")
    ]
    for v in entry.get("versions", []):
        mark = "*" if v["version"] == traffic.get("stable") else " "
        bundle = f"{v['bundle']} {v['bundle_version']}" if v.get("bundle") else "–"
        why = f"  ({v['error']})" if v.get("error") else ""
        lines.append(f"  {mark} {v['version']:<12} {v['weight']:>3} %  {v['state']:<8} {bundle}{why}")
    return "\n".join(lines)


def changed(answer: dict, as_json: bool) -> None:
    if as_json:
        echo_json(answer)
        return
    split = ", ".join(f"{v} {w} %" for v, w in answer["weights"].items() if w)
    typer.echo(f"{answer['model']}: {answer['action']}: {split} (stable {answer['stable']})")


@app.command("status")
def status(
    name: Annotated[str | None, typer.Argument(help="one model (default: every model)")] = None,
    url: Annotated[str, URL] = "http://127.0.0.1:8000",
    as_json: Annotated[bool, AS_JSON] = False,
    timeout: Annotated[float, TIMEOUT] = 10.0,
) -> None:
    """Each model's versions: state, weight and bundle; * marks the stable one."""
    if name is None:
        entries = call(url, "GET", "/v1/models", None, timeout, admin=False)["models"]
    else:
        entries = [call(url, "GET", f"/v1/models/{name}", None, timeout, admin=False)]
    if as_json:
        echo_json(entries)
        return
    typer.echo("\n".join(render(e) for e in entries if e["state"] != "unloaded"))


@app.command("weights")
def weights(
    name: Annotated[str, typer.Argument(help="the model")],
    split: Annotated[list[str], typer.Argument(help="VERSION=WEIGHT for each version given traffic (sum 100)")],
    reason: Annotated[str | None, REASON] = None,
    url: Annotated[str, URL] = "http://127.0.0.1:8000",
    as_json: Annotated[bool, AS_JSON] = False,
    timeout: Annotated[float, TIMEOUT] = 10.0,
) -> None:
    """Split a model's requests between its versions, e.g. `xtag rollout weights tags 1=95 2=5`."""
    from xtag.models.errors import XtagError

    table = {}
    for item in split:
        version, sep, weight = item.partition("=")
        if not sep or not weight.strip().isdigit():
            fail(XtagError(f"{item!r} is not VERSION=WEIGHT (a whole number of percent)"))
        table[version.strip()] = int(weight)
    body = {"weights": table, "reason": reason}
    changed(call(url, "PUT", f"/v1/admin/models/{name}/traffic", body, timeout, admin=True), as_json)


@app.command("promote")
def promote(
    name: Annotated[str, typer.Argument(help="the model")],
    version: Annotated[str, typer.Argument(help="the version that takes all traffic and becomes stable")],
    reason: Annotated[str | None, REASON] = None,
    url: Annotated[str, URL] = "http://127.0.0.1:8000",
    as_json: Annotated[bool, AS_JSON] = False,
    timeout: Annotated[float, TIMEOUT] = 10.0,
) -> None:
    """Give one version all of a model's traffic and make it the stable version."""
    body = {"version": version, "reason": reason}
    changed(call(url, "POST", f"/v1/admin/models/{name}/promote", body, timeout, admin=True), as_json)


@app.command("rollback")
def rollback(
    name: Annotated[str, typer.Argument(help="the model")],
    reason: Annotated[str | None, REASON] = None,
    url: Annotated[str, URL] = "http://127.0.0.1:8000",
    as_json: Annotated[bool, AS_JSON] = False,
    timeout: Annotated[float, TIMEOUT] = 10.0,
) -> None:
    """All of a model's traffic back on its stable version at once (or on the previous stable one, when the stable
    version has it all already)."""
    changed(call(url, "POST", f"/v1/admin/models/{name}/rollback", {"reason": reason}, timeout, admin=True), as_json)
