"""The curl examples of the README and of the docs pages (docs/**/*.md), run with curl against a live server of a
tiny bundle: documentation that does not work is a bug. Every `curl` command in a code block runs (pointed at the
test server's port) and must get a 2xx JSON answer; an example with an elided part (`...`) cannot run as written
and is left out, but at least the plain predict and batch examples must be runnable, in the README and in the
endpoints page alike."""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.service.svc_support import bundles, live_server  # noqa: F401  (pytest fixtures)

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
ENDPOINTS = ROOT / "docs" / "api" / "endpoints.md"
DOCUMENTS = [README, *sorted((ROOT / "docs").rglob("*.md"))]
CURL = shutil.which("curl")
pytestmark = pytest.mark.skipif(CURL is None, reason="curl is not installed")


def curl_examples(text: str) -> list[str]:
    """Each curl command of the README's fenced code blocks, continuation lines and quoted newlines kept."""
    commands = []
    for block in re.findall(r"^```[^\n]*\n(.*?)^```", text, flags=re.S | re.M):
        lines = block.splitlines(keepends=True)
        starts = [i for i, line in enumerate(lines) if line.lstrip().startswith("curl ")]
        for n, i in enumerate(starts):
            end = starts[n + 1] if n + 1 < len(starts) else len(lines)
            commands.append(shlex.join(_one_command("".join(lines[i:end]))))
    return commands


def _one_command(command: str) -> list[str]:
    """The words of the first shell command in `command`: it ends at the first line break that is neither
    inside quotes (a JSON body may span lines) nor escaped by a backslash."""
    quote = None
    text = command.replace("\\\n", " ")
    for i, ch in enumerate(text):
        if quote:
            quote = None if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch == "\n":
            text = text[:i]
            break
    return shlex.split(text, comments=True)


def runnable(command: str) -> bool:
    return "..." not in command


@pytest.mark.parametrize("page", [README, ENDPOINTS], ids=["README", "endpoints"])
def test_readme_has_curl_examples(page):
    examples = curl_examples(page.read_text())
    assert len(examples) >= (2 if page == README else 3), examples
    assert sum(runnable(c) for c in examples) >= 2, examples
    assert any("/v1/predict/batch" in c for c in examples) and any("/v1/predict " in c for c in examples), examples


def test_readme_curl_examples_work(live_server):
    port = live_server.url.rsplit(":", 1)[1]
    ran = 0
    for example in (c for page in DOCUMENTS for c in curl_examples(page.read_text())):
        if not runnable(example):
            continue
        args = [a.replace("localhost:8000", f"127.0.0.1:{port}") for a in shlex.split(example)]
        assert any(f"127.0.0.1:{port}" in a for a in args), f"example does not use localhost:8000: {example}"
        out = subprocess.run(
            [CURL, *args[1:], "--show-error", "--write-out", "\n%{http_code}", "--max-time", "60"],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert out.returncode == 0, (example, out.stderr)
        body, _, status = out.stdout.rpartition("\n")
        assert status.startswith("2"), (example, status, body)
        answer = json.loads(body)
        assert isinstance(answer, dict) and answer, (example, body)
        if "/predict/batch" in example:
            assert answer["results"] and all("labels" in r for r in answer["results"])
        elif "/predict" in example:
            assert answer["labels"] and answer["model"]["name"] == "tiny-a"
        ran += 1
    assert ran >= 5  # the README's two and the endpoints page's three
