"""XR-Linear trained as Ray tasks on a real local cluster (a head and a worker as processes): the same tree and
rankers as a local run, sub-trees resumed one by one, a worker killed mid-task retried to the same result."""

from __future__ import annotations

import json
import threading

import numpy as np
import pytest
import scipy.sparse as sp
from typer.testing import CliRunner
from xtag.models.errors import XtagError
from xtag.models.xlinear.model import XLinearModel
from xtag.training.tree.build import TreePlan
from xtag.training.xlinear import subtrees
from xtag.training.xlinear.config import XLinearConfig
from xtag.training.xlinear.ray_train import train_xlinear_on_ray
from xtag.training.xlinear.train import train_xlinear

from tests.ray_support import local_cluster
from xtag.cli import app

CONFIG = XLinearConfig(n_jobs=1, tree={"max_leaf_size": 6, "branching": 4, "seed": 7})


@pytest.fixture(scope="module")
def cluster():
    with local_cluster(workers=1) as c:
        yield c


@pytest.fixture(scope="module")
def data() -> tuple[sp.csr_matrix, sp.csr_matrix]:
    """600 documents, 300 labels (each in at least one document): a tree of several levels."""
    rng = np.random.default_rng(3)
    n, d, L = 600, 400, 300
    X = sp.random(n, d, density=0.04, random_state=rng, format="csr", dtype=np.float32)
    Y = sp.random(n, L, density=0.01, random_state=rng, format="csr", dtype=np.float32)
    Y = (Y + sp.csr_matrix((np.ones(L, np.float32), (rng.integers(0, n, L), np.arange(L))), shape=(n, L))).tocsr()
    Y.data[:] = 1
    return X, Y


@pytest.fixture(scope="module")
def local_model(data) -> XLinearModel:
    return train_xlinear(*data, CONFIG, progress=False)


def assert_same_model(a: XLinearModel, b: XLinearModel) -> None:
    assert np.array_equal(a.chain.leaf_labels, b.chain.leaf_labels)
    assert all(np.array_equal(p, q) for p, q in zip(a.chain.ptrs, b.chain.ptrs, strict=True))
    for x, y in zip(a.levels, b.levels, strict=True):
        assert x.W.shape == y.W.shape
        for name in ("indptr", "indices", "data"):
            assert np.array_equal(getattr(x.W, name), getattr(y.W, name))
        assert np.array_equal(x.bias, y.bias)


def test_tree_and_rankers_are_identical_to_a_local_run(cluster, data, local_model, tmp_path):
    events: list[dict] = []
    model = train_xlinear_on_ray(*data, CONFIG, cluster.address, tmp_path, progress=False, log=events.append)
    model.save(tmp_path / "model")  # the lower levels streamed from the sub-trees' files
    assert_same_model(XLinearModel.load(tmp_path / "model"), local_model)
    ray_event = next(e for e in events if e["event"] == "ray")
    assert (ray_event["nodes"], ray_event["subtrees"]) == (2, len(list(tmp_path.glob("ray/subtree_*.npz"))))
    assert ray_event["subtrees"] >= 4


def test_resume_skips_the_finished_subtrees(cluster, data, local_model, tmp_path):
    train_xlinear_on_ray(*data, CONFIG, cluster.address, tmp_path, progress=False)
    saved = sorted((tmp_path / "ray").glob("subtree_*.npz"))
    saved[1].unlink()  # as if the run had died before this one finished
    kept = {p: p.stat().st_mtime_ns for p in saved if p != saved[1]}
    events: list[dict] = []
    model = train_xlinear_on_ray(*data, CONFIG, cluster.address, tmp_path, progress=False, log=events.append)
    assert_same_model(model.load(), local_model)
    trained = [e["index"] for e in events if e["event"] == "subtree"]
    assert trained == [1]
    assert {"what": "top levels"}.items() <= next(e for e in events if e["event"] == "resume").items()
    assert all(p.stat().st_mtime_ns == t for p, t in kept.items())  # only the driver writes, and only new parts


def test_a_worker_killed_mid_task_is_retried_to_the_same_model(cluster, data, local_model, tmp_path):
    stop, killed = threading.Event(), []
    killer = threading.Thread(target=lambda: killed.append(cluster.kill_running("_subtree_task", stop)))
    killer.start()
    try:
        model = train_xlinear_on_ray(*data, CONFIG, cluster.address, tmp_path, progress=False)
    finally:
        stop.set()
        killer.join()
    assert killed[0] is not None, "no sub-tree task was seen running"
    assert_same_model(model.load(), local_model)


def test_without_a_checkpoint_folder_the_parts_live_in_a_temporary_one(cluster, data, local_model):
    model = train_xlinear_on_ray(*data, CONFIG, cluster.address, progress=False)
    assert all(path.exists() for path in model.parts)
    assert_same_model(model.load(), local_model)


def test_matcher_aware_negatives_are_refused_in_one_line(data):
    config = CONFIG.model_copy(update={"negatives": "tfn+man"})
    with pytest.raises(XtagError, match=r"^--ray: xlinear.negatives=tfn\+man needs") as err:
        train_xlinear_on_ray(*data, config, "127.0.0.1:1")
    assert "\n" not in str(err.value)


def test_xtag_train_ray_writes_the_local_runs_model(cluster, corpus_files, tmp_path):
    runner, runs = CliRunner(), {}
    for name, extra in (("local", []), ("ray", ["--ray", cluster.address])):
        args = ["train", "--corpus", str(corpus_files[0]), "--out", str(tmp_path / name), "--no-progress"]
        result = runner.invoke(app, [*args, "--max-leaf-size", "2", "--branching", "2", "--threads", "1", *extra])
        assert result.exit_code == 0, result.output
        runs[name] = XLinearModel.load(tmp_path / name / "model")
    assert_same_model(runs["ray"], runs["local"])
    log = [json.loads(line) for line in (tmp_path / "ray" / "train_log.jsonl").read_text().splitlines()]
    assert any(e["event"] == "subtree" for e in log)


def test_a_family_without_ray_training_refuses_the_flag_naming_itself(corpus_files, tmp_path):
    args = ["train", "--corpus", str(corpus_files[0]), "--out", str(tmp_path / "r"), "--model", "lightxml"]
    result = CliRunner().invoke(app, [*args, "--ray", "auto"])
    assert result.exit_code != 0
    assert "--ray auto: model lightxml does not support training on a Ray cluster" in result.output
    assert "Traceback" not in result.output


def test_subtrees_start_at_the_first_level_with_two_nodes_per_cpu():
    plan = TreePlan.of(36395, [2, 16, 16])  # 2, 32 and 512 clusters
    assert [subtrees.split_level(plan, cpus) for cpus in (1, 2, 16, 17, 1000)] == [1, 2, 2, 3, 3]
    parts = subtrees.split(plan, 2)
    assert len(parts) == 32 and parts[0].lo == 0 and parts[-1].hi == 36395
    assert all(a.hi == b.lo for a, b in zip(parts, parts[1:]))
