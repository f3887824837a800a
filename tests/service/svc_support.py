"""Helpers and fixtures for the service tests: tiny bundles from an in-code corpus, apps, live uvicorn servers.

The fixtures live here, not in a conftest.py, so that tests/service adds no second `conftest` module
beside tests/conftest.py (whose helpers other tests import by that name); test modules import them.
"""

from __future__ import annotations

import json
import shutil
import socket
import threading
import time
from pathlib import Path

import httpx
import pytest
import uvicorn
from fastapi.testclient import TestClient
from xtag.config.settings import Settings
from xtag.service.app import create_app
from xtag.training.config import TrainConfig
from xtag.training.export.export_run import export_run
from xtag.training.run import train_run
from xtag.training.tree.build import TreeConfig
from xtag.training.xlinear.config import XLinearConfig

TOPICS = {
    "lang::python": "python interpreter script module pip package",
    "lang::c": "c compiler pointer header gcc library",
    "use::gaming": "game player level arcade puzzle fun",
    "works-with::image": "image photo picture pixel raster png",
    "works-with::audio": "audio sound music mp3 player volume",
    "use::networking": "network socket http server tcp proxy",
    "works-with::db": "database sql query table postgres index",
    "use::editing": "editor text edit syntax highlight vim",
}
TAIL = ("role::rare-thing", "quasar nebula telescope astronomy")  # a label seen in 2 training documents


def tiny_corpus(variant: int = 0) -> list[dict]:
    """60-odd deterministic documents over 8 frequent labels and one tail label."""
    names = list(TOPICS)
    rows = []
    for i in range(64):
        a, b = names[i % 8], names[(i * 3 + 1 + variant) % 8]
        labels = sorted({a, b})
        text = f"{TOPICS[a]} {TOPICS[b].split()[i % 6]} doc{i % 5} tool"
        rows.append({"id": f"d{i}", "text": text, "labels": labels})
    for i in range(2):
        rows.append(
            {
                "id": f"tail{i}",
                "text": f"{TAIL[1]} {TOPICS['works-with::image']} tool",
                "labels": [TAIL[0], "works-with::image"],
            }
        )
    return rows


def build_bundle(folder: Path, name: str, variant: int = 0) -> Path:
    corpus = folder / f"{name}.jsonl"
    corpus.write_text("\n".join(json.dumps(r) for r in tiny_corpus(variant)) + "\n")
    cfg = TrainConfig(corpus=corpus, xlinear=XLinearConfig(tree=TreeConfig(max_leaf_size=4), n_jobs=1))
    run = folder / f"run-{name}"
    train_run(cfg, run, progress=False)
    bundle = folder / name
    export_run(run, bundle, name)
    return bundle


STARTUP_S = 120.0  # a deadline, not a wait: on a loaded 2-core machine a start can take tens of seconds
ADMIN_KEY = "adm1n-s3cret"
ADMIN = {"X-Admin-Key": ADMIN_KEY}


def poisoned_bundle(bundles: dict[str, Path], out: Path, array: str) -> Path:
    """A copy of tiny-a whose last ranker level has NaN in `array` ("data": the weights, or "bias"), its manifest
    re-hashed (export itself refuses NaN since issue 30: this is a bundle edited after export)."""
    shutil.copytree(bundles["a"], out)
    return poison(out, "rankers/level_2.npz", array)


def synthetic_bundle(folder: Path, name: str, labels: int = 2000, features: int = 20000, density: float = 0.01) -> Path:
    """An XR-Linear bundle of random rankers (no training: seconds), as large as a real one's engine arrays
    (the defaults: about 20 MB), exported through the normal path (training/export/export_run.py)."""
    import numpy as np
    import scipy.sparse as sp
    from xtag.models.features.tfidf import TfidfConfig, TfidfFeaturizer
    from xtag.models.inference.types import RankerLevel
    from xtag.models.label_tree import ClusterChain
    from xtag.models.labels import LabelVocab
    from xtag.models.xlinear.model import RankerConfig, XLinearModel
    from xtag.training.run import save_model

    rng = np.random.default_rng(0)
    texts = [" ".join(f"w{j}" for j in range(i, features, 64)) for i in range(64)]  # every word once
    featurizer, _ = TfidfFeaturizer.fit(texts, TfidfConfig(min_df=1, ngram_max=1))
    clusters = 64
    chain = ClusterChain(
        [np.array([0, clusters]), np.linspace(0, labels, clusters + 1).astype(np.int64)], np.arange(labels)
    )
    levels = [
        RankerLevel(sp.random(n, featurizer.dim, density=density, format="csr", dtype=np.float32, random_state=rng),
                    rng.normal(size=n).astype(np.float32))
        for n in (clusters, labels)
    ]  # fmt: skip
    vocab = LabelVocab([f"tag::t{j}" for j in range(labels)], [1] * labels, 1)
    run = folder / f"run-{name}"
    run.mkdir(parents=True)
    (run / "config.json").write_text(TrainConfig(corpus=folder / "none.jsonl").model_dump_json())
    save_model(run, vocab, featurizer, XLinearModel(chain, levels, RankerConfig(n_features=featurizer.dim)))
    export_run(run, folder / name, name)
    return folder / name


def poison(bundle: Path, rel: str, key: str | None = None) -> Path:
    """Set every value of the bundle's float array `rel` (a .npy, or member `key` of a .npz) to NaN and re-hash
    it in the manifest."""
    import numpy as np
    from xtag.models.bundle.manifest import sha256

    if key is None:
        np.save(bundle / rel, np.full_like(np.load(bundle / rel), np.nan))
    else:
        with np.load(bundle / rel) as z:
            arrays = {k: z[k] for k in z.files}
        arrays[key] = np.full_like(arrays[key], np.nan)
        np.savez(bundle / rel, **arrays)
    manifest = json.loads((bundle / "manifest.json").read_text())
    manifest["files"][rel] = sha256(bundle / rel)
    (bundle / "manifest.json").write_text(json.dumps(manifest))
    return bundle


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_ready(target, timeout: float = STARTUP_S, alive=lambda: None, path: str = "/ready") -> None:
    """Poll /ready (or `path`, e.g. one model's /v1/models/NAME/ready) until 200 with a generous deadline (a loaded
    machine loads slowly). `target` is a base URL or a client (TestClient); `alive()` may raise to stop early (a
    server process that exited)."""
    get = (lambda: httpx.get(target + path, timeout=2)) if isinstance(target, str) else (lambda: target.get(path))
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        alive()
        try:
            if get().status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.02)
    raise AssertionError(f"not ready in {timeout} s")


def post_head(path: str, length: int, extra: str = "") -> bytes:
    """The head of a JSON POST whose body (`length` bytes) the caller sends, or not."""
    return (
        f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        f"Content-Length: {length}\r\n{extra}\r\n"
    ).encode()


def read_response(sock: socket.socket, timeout: float) -> tuple[int, dict[str, str], bytes]:
    """One HTTP/1.1 response (with Content-Length) from a raw socket; status 0 when the server closed
    the connection without an answer."""
    sock.settimeout(timeout)
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        if not chunk:
            return 0, {}, data
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = {name.strip().lower(): value.strip() for name, _, value in (x.partition(":") for x in lines[1:])}
    while len(body) < int(headers.get("content-length", 0)):
        chunk = sock.recv(65536)
        if not chunk:
            break
        body += chunk
    return int(lines[0].split()[1]), headers, body


class LiveServer:
    """uvicorn on 127.0.0.1 in a thread (same options as `xtag serve`)."""

    def __init__(self, settings: Settings):
        from xtag.service.server import uvicorn_options

        # the port is a field of the `server` group: a flat `port` in model_copy's update was ignored, and every
        # LiveServer listened on 8000, shared with any other server there (another test run's)
        server = settings.server.model_copy(update={"port": free_port(), "host": "127.0.0.1"})
        self.settings = settings.model_copy(update={"server": server})
        self.url = f"http://127.0.0.1:{self.settings.server.port}"
        self.app = create_app(self.settings)
        self.server = uvicorn.Server(
            uvicorn.Config(self.app, **{**uvicorn_options(self.settings), "log_level": "warning"})
        )
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self) -> LiveServer:
        self.thread.start()
        wait_ready(self.url)
        return self

    def __exit__(self, *exc) -> None:
        self.server.should_exit = True
        self.thread.join(10)


PREDICT_S = 0.5


@pytest.fixture
def slow_model(monkeypatch):
    """slow_model() makes every predictor call take at least PREDICT_S: a few requests fill the server.
    It returns a list that grows by one as each call starts, so a test can wait until a request really
    holds its prediction slot (the in-flight gauge counts it earlier, while its body is still read)."""
    from xtag.service.state.model_slot import ServedModel

    predict = ServedModel.predict
    started: list[float] = []

    def slow(self, *args, **kwargs):
        started.append(time.monotonic())
        time.sleep(PREDICT_S)
        return predict(self, *args, **kwargs)

    def install() -> list[float]:
        monkeypatch.setattr(ServedModel, "predict", slow)
        return started

    return install


_BUILT: dict[str, Path] = {}


@pytest.fixture(scope="session")
def bundles(tmp_path_factory) -> dict[str, Path]:
    """Two good bundles (different content) and a broken copy of the first; built once per session."""
    if _BUILT:
        return _BUILT
    folder = tmp_path_factory.mktemp("bundles")
    a = build_bundle(folder, "tiny-a", 0)
    b = build_bundle(folder, "tiny-b", 2)
    broken = folder / "broken"
    shutil.copytree(a, broken)
    (broken / "labels.json").write_text('{"names": ["x"], "frequencies": [1], "n_train_docs": 1}')
    _BUILT.update({"a": a, "b": b, "broken": broken})
    return _BUILT


@pytest.fixture
def make_client(bundles):
    """TestClient factory: make_client(**settings) → a started client whose model is ready."""
    clients = []

    def make(wait: bool = True, **overrides) -> TestClient:
        overrides.setdefault("bundle", bundles["a"])
        overrides.setdefault("reload_interval_s", 0)  # tests reload back to back; the limit has its own tests
        client = TestClient(create_app(Settings(_env_file=None, **overrides)))
        client.__enter__()
        clients.append(client)
        if wait:
            wait_ready(client)
        return client

    yield make
    for c in clients:
        c.__exit__(None, None, None)


@pytest.fixture
def client(make_client) -> TestClient:
    return make_client()


@pytest.fixture
def live_server(bundles):
    with LiveServer(Settings(_env_file=None, bundle=bundles["a"])) as server:
        yield server
