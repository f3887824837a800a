"""`xtag rollout status|weights|promote|rollback` against a running server with a model of two versions: each
change made through the admin routes with XTAG_ADMIN_KEY, and a refused one printed as an error with the reason."""

from __future__ import annotations

import json
import shutil
import time

from typer.testing import CliRunner
from xtag.config.settings import Settings

from tests.service.svc_support import ADMIN_KEY, STARTUP_S, LiveServer, bundles  # noqa: F401  (pytest fixture)
from xtag.cli import app


def test_rollout_commands_drive_the_admin_routes(tmp_path, bundles, monkeypatch):
    for version, key in (("1", "a"), ("2", "b")):
        shutil.copytree(bundles[key], tmp_path / "tags" / version)
    (tmp_path / "models.toml").write_text('[models.tags]\nversions = {"1" = "tags/1", "2" = "tags/2"}\nstable = "1"\n')
    monkeypatch.setenv("XTAG_ADMIN_KEY", ADMIN_KEY)
    runner = CliRunner()
    settings = Settings(_env_file=None, bundle_root=tmp_path, admin_key=ADMIN_KEY)
    with LiveServer(settings) as server:
        run = lambda *args: runner.invoke(app, ["rollout", *args, "--url", server.url])  # noqa: E731
        deadline = time.monotonic() + STARTUP_S
        while "loading" in run("status").output and time.monotonic() < deadline:  # version 2 loads after 1
            time.sleep(0.05)
        r = run("weights", "tags", "1=95", "2=5", "--reason", "canary")
        assert r.exit_code == 0, r.output
        assert "tags: weights: 1 95 %, 2 5 %" in r.output
        r = run("status", "tags")
        assert r.exit_code == 0 and "* 1" in r.output and "5 %" in r.output, r.output
        r = run("weights", "tags", "1=60", "2=5")
        assert r.exit_code == 2 and "weights sum to 65, not 100" in r.output
        r = run("promote", "tags", "2", "--json")
        assert r.exit_code == 0 and json.loads(r.output)["stable"] == "2"
        r = run("rollback", "tags")
        assert r.exit_code == 0 and "tags: rollback: 1 100 % (stable 1)" in r.output
        r = run("status", "--json")
        assert json.loads(r.output)[0]["traffic"]["weights"] == {"1": 100, "2": 0}
