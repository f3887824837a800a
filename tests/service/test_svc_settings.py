"""One Settings object (issue 39): the encoders' runtime settings reach every ONNX session of a bundle from the
service's Settings and from the CLI's, and no product module reads an XTAG_* variable on its own."""

from __future__ import annotations

import re
from pathlib import Path

from typer.testing import CliRunner
from xtag.config.settings import Settings, flat_fields
from xtag.models import threads
from xtag.models.threads import thread_count

from tests.service.svc_support import (  # noqa: F401  (pytest fixtures)
    bundles,
    make_client,
    wait_ready,
)
from xtag.cli import app
from xtag.cli.options import load_bundle_or_fail

ROOT = Path(__file__).resolve().parents[2]
PRODUCT = ("models", "training", "evaluation", "service", "xtag")
# os.environ.get("XTAG_..."), os.getenv("XTAG_..."), os.environ["XTAG_..."] not assigned to (serve() hands
# settings to its workers by writing them)
ENV_READ = re.compile(r"""(?:environ\.get|getenv)\s*\(\s*f?["']XTAG_|environ\[\s*f?["']XTAG_[^\]]*\](?!\s*=[^=])""")


def _threads(bundle) -> int:
    """intra_op_num_threads of the bundle's text-encoder session (an XR-Transformer bundle)."""
    return bundle.predictor.featurizer.encoder.session.get_session_options().intra_op_num_threads


def test_the_servers_encoder_threads_setting_reaches_the_encoder_session(make_client, xr_bundle):
    client = make_client(bundle=xr_bundle[1], encoder_threads=1)
    assert _threads(client.app.state.registry.current.bundle) == 1
    other = make_client(bundle=xr_bundle[1])  # default 0: the process's count, not onnxruntime's host cores
    assert _threads(other.app.state.registry.current.bundle) == thread_count()


def test_the_cli_loads_a_bundle_with_the_same_settings(xr_bundle, monkeypatch):
    monkeypatch.setenv("XTAG_ENCODER_THREADS", "1")
    assert _threads(load_bundle_or_fail(xr_bundle[1])) == 1


def test_a_bad_runtime_setting_fails_the_cli_in_one_line_naming_the_variable(tiny_bundle, monkeypatch):
    monkeypatch.setenv("XTAG_ENCODER_THREADS", "-1")
    result = CliRunner().invoke(app, ["predict", str(tiny_bundle), "a text"])
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert "invalid setting XTAG_ENCODER_THREADS" in result.output


def test_settings_read_the_runtime_variables(monkeypatch):
    monkeypatch.setenv("XTAG_ENCODER_THREADS", "3")
    monkeypatch.setenv("XTAG_TENSORRT_CACHE", "/var/cache/trt")
    options = Settings(_env_file=None).runtime_options()
    assert (options.encoder_threads, options.tensorrt_cache) == (3, "/var/cache/trt")


def test_no_product_module_reads_an_xtag_variable_itself():
    """Every XTAG_* setting comes through config/settings.py; models/ gets RuntimeOptions passed down. The one
    exception, XTAG_THREADS, is read by models/threads.py when xtag is imported, before any settings exist (the
    pools size themselves as their libraries load); it is a Settings field too, so that serve validates it."""
    assert threads.ENV == "XTAG_THREADS" and "threads" in flat_fields()
    readers = [
        f"{path.relative_to(ROOT)}:{n}"
        for package in PRODUCT
        for path in sorted((ROOT / package).rglob("*.py"))
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if ENV_READ.search(line)
    ]
    assert not readers, readers
