"""`xtag predict --k` follows the service's rule for k (issue 47): a k above the label count or XTAG_MAX_K is
refused with the words the server answers 422 with (before, the CLI silently returned every label), and no k at
all is 10 cut to the label count, in both."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from tests.service.svc_support import bundles, make_client  # noqa: F401  (pytest fixtures)
from xtag.cli import app

runner = CliRunner()


def cli_error(*args: str) -> str:
    result = runner.invoke(app, list(args))
    lines = result.output.strip().splitlines()
    assert result.exit_code == 2 and len(lines) == 1 and lines[0].startswith("error: "), result.output
    return lines[0].removeprefix("error: ")


@pytest.mark.parametrize(("k", "max_k"), [(1_000_000, 1000), (5, 3)])
def test_predict_refuses_the_k_the_server_refuses_with_the_same_words(bundles, make_client, monkeypatch, k, max_k):
    monkeypatch.setenv("XTAG_MAX_K", str(max_k))
    answer = make_client(max_k=max_k).post("/v1/predict", json={"text": "python script", "k": k})
    assert answer.status_code == 422, answer.text
    said = cli_error("predict", str(bundles["a"]), "python script", "--k", str(k))
    assert said == answer.json()["detail"] and f"k: {k} is above the maximum of" in said, said


def test_predict_without_k_gives_at_most_the_label_count_as_the_server_does(bundles, make_client, monkeypatch):
    monkeypatch.delenv("XTAG_MAX_K", raising=False)
    served = make_client().post("/v1/predict", json={"text": "python script"}).json()["labels"]
    result = runner.invoke(app, ["predict", str(bundles["a"]), "python script"])
    assert result.exit_code == 0, result.output
    assert len(result.output.strip().splitlines()) == len(served) == 9  # the tiny bundles have 9 labels, under 10
