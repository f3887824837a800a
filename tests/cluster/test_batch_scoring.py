"""`xtag predict --ray`: a corpus's shards scored on a real local cluster (a head and a worker node, 1 CPU each)
give the local command's rows, resume, survive a killed worker, and report bad rows as the local reader does."""

from __future__ import annotations

import json
import os
import signal
import threading
import time

import pytest
from typer.testing import CliRunner
from xtag.cluster.batch_scoring import ScoringJob, score_on_ray
from xtag.cluster.shards import plan_shards
from xtag.models.tagging.tagger import TagOptions

from tests.conftest import make_rows, write_jsonl
from tests.ray_support import free_port, local_cluster
from xtag.cli import app

runner = CliRunner()


def read_jsonl_shards(out) -> list[dict]:
    """Every row of a folder of JSON-lines shards, in shard-name order."""
    return [json.loads(line) for path in sorted(out.glob("*.jsonl")) for line in path.read_text().splitlines()]


@pytest.fixture(scope="module")
def cluster():
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    with local_cluster(workers=1) as c:
        yield c


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """Two files of 60 rows: the glob the cluster reads, and the one file the local command reads."""
    folder = tmp_path_factory.mktemp("scoring")
    rows = make_rows(120, seed=3)
    (folder / "parts").mkdir()
    write_jsonl(folder / "parts" / "a.jsonl", rows[:60])
    write_jsonl(folder / "parts" / "b.jsonl", rows[60:])
    return folder / "parts" / "*.jsonl", write_jsonl(folder / "all.jsonl", rows)


def _predict(bundle, *args: str):
    return runner.invoke(app, ["predict", str(bundle), *args, "--no-progress"])


@pytest.fixture(scope="module")
def scored(cluster, corpus, tiny_bundle, tmp_path_factory):
    """The glob scored on the cluster in shards of 25 lines, beside the local command's output."""
    out, local = tmp_path_factory.mktemp("scored") / "preds", tmp_path_factory.mktemp("local") / "preds.jsonl"
    ray = _predict(
        tiny_bundle, "--corpus", str(corpus[0]), "--out", str(out), "--ray", cluster.address, "--shard-rows", "25"
    )
    assert ray.exit_code == 0, ray.output
    assert _predict(tiny_bundle, "--corpus", str(corpus[1]), "--out", str(local)).exit_code == 0
    return out, [json.loads(line) for line in local.read_text().splitlines()]


def test_top_k_of_every_text_equals_the_local_commands(scored):
    out, local = scored
    assert sorted(p.name for p in out.iterdir()) == [
        "a.000000001-000000025.jsonl",
        "a.000000026-000000050.jsonl",
        "a.000000051-000000060.jsonl",
        "b.000000001-000000025.jsonl",
        "b.000000026-000000050.jsonl",
        "b.000000051-000000060.jsonl",
    ]
    assert read_jsonl_shards(out) == local  # same ids, labels, scores, in the corpus's order
    assert all(len(row["labels"]) == 10 for row in local)


def test_resume_rewrites_only_the_missing_shards(scored, cluster, corpus, tiny_bundle):
    out, local = scored
    lost = out / "b.000000026-000000050.jsonl"
    lost.unlink()
    (out / "a.000000001-000000025.jsonl.tmp-999").write_text('{"half": ')  # a worker killed mid-write left it
    kept = {p.name: p.stat().st_mtime_ns for p in out.iterdir() if p.suffix == ".jsonl"}
    args = ["--corpus", str(corpus[0]), "--out", str(out), "--ray", cluster.address, "--shard-rows", "25", "--resume"]
    r = _predict(tiny_bundle, *args)
    assert r.exit_code == 0, r.output
    assert "1 shard files (5 kept from a previous run)" in r.output
    assert {p.name: p.stat().st_mtime_ns for p in out.iterdir() if p.name in kept} == kept
    assert sorted(p.name for p in out.iterdir()) == sorted([*kept, lost.name])  # the partial write is gone
    assert read_jsonl_shards(out) == local


def test_parquet_shards_hold_the_same_rows(cluster, corpus, tiny_bundle, scored, tmp_path):
    import pyarrow.parquet as pq

    out = tmp_path / "preds"
    args = ["--corpus", str(corpus[0]), "--out", str(out), "--ray", cluster.address, "--out-format", "parquet"]
    assert _predict(tiny_bundle, *args).exit_code == 0
    rows = [row for path in sorted(out.glob("*.parquet")) for row in pq.read_table(path).to_pylist()]
    assert rows == scored[1]


def test_a_malformed_row_is_named_by_file_and_line_as_locally(cluster, tiny_bundle, tmp_path):
    rows = [json.dumps(r) for r in make_rows(30, seed=4)]
    rows[16] = '{"id": "broken", "text": '
    bad = tmp_path / "bad.jsonl"
    bad.write_text("\n".join(rows) + "\n")
    local = _predict(tiny_bundle, "--corpus", str(bad), "--out", str(tmp_path / "local.jsonl"))
    ray = _predict(tiny_bundle, "--corpus", str(bad), "--out", str(tmp_path / "p"), "--ray", cluster.address)
    assert ray.exit_code == local.exit_code == 2
    why = f"bad JSON: Expecting value at column 26, near {rows[16]!r}"
    assert ray.output.strip() == local.output.strip() == f"error: {bad}:17:26: {why}"

    args = ["--corpus", str(bad), "--out", str(tmp_path / "p"), "--ray", cluster.address, "--skip-bad-rows"]
    skipped = _predict(tiny_bundle, *args, "--shard-rows", "10")
    assert skipped.exit_code == 0, skipped.output
    assert f"warning: {bad}: skipped 1 malformed row: line 17 ({why})" in skipped.output
    ids = [row["id"] for row in read_jsonl_shards(tmp_path / "p")]
    assert ids == [f"doc{i}" for i in range(30) if i != 16]


def test_a_worker_killed_mid_run_is_retried_and_the_output_equals_an_undisturbed_run(
    cluster, corpus, tiny_bundle, scored, tmp_path
):
    """One line per shard, so the run is still going when the worker node's task processes are killed."""
    out = tmp_path / "preds"
    job = ScoringJob(bundle=tiny_bundle, out=out, options=TagOptions(k=10))
    shards = plan_shards(str(corpus[0]), 1)
    failed: list[Exception] = []

    def score() -> None:
        try:
            score_on_ray(job, shards, cluster.address, progress=False)
        except Exception as exc:  # seen by the assertion below, not lost in the thread
            failed.append(exc)

    run = threading.Thread(target=score)
    run.start()
    while run.is_alive() and not (out.exists() and any(out.glob("*.jsonl"))):
        time.sleep(0.01)
    victims = cluster.task_pids(1)
    finished_before = len(list(out.glob("*.jsonl")))
    for pid in victims:
        os.kill(pid, signal.SIGKILL)
    run.join(timeout=300)
    assert not run.is_alive() and not failed
    assert victims and finished_before < len(shards)  # killed mid-run, not after the last shard
    assert read_jsonl_shards(out) == scored[1]


def test_a_wrong_address_is_one_line_naming_it(tiny_bundle, corpus, tmp_path):
    address = f"127.0.0.1:{free_port()}"
    r = _predict(tiny_bundle, "--corpus", str(corpus[0]), "--out", str(tmp_path / "p"), "--ray", address)
    assert r.exit_code == 2
    assert r.output.startswith(f"error: --ray {address}: no Ray cluster answers there")
    assert r.output.count("\n") == 1
