"""What the transformer-family debtags benchmarks share (from xr_transformer_debtags.py and lightxml_debtags.py):
corpus subsets, training a variant, HTTP and in-process predictors, interleaved latency."""

from __future__ import annotations

import gzip
import json
import shutil
import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
from xtag.models.errors import XtagError
from xtag.training.config import TrainConfig
from xtag.training.export.export_run import export_run
from xtag.training.run import train_run

METRICS = ("P@1", "P@3", "P@5", "PSP@1", "PSP@3", "PSP@5")


LATENCY_TOKENS = 128


def subset(src: Path, dst: Path, limit: int | None) -> Path:
    """The corpus itself, or its first `limit` rows (smoke runs of this script)."""
    if limit is None:
        return src
    with gzip.open(src, "rt") as fh, open(dst, "w") as out:
        for i, line in enumerate(fh):
            if i >= limit:
                break
            out.write(line)
    return dst


def run_variant(name: str, config: TrainConfig, work: Path, seed_from: Path | None, quantize: bool) -> dict:
    """Train (reusing θ0 embeddings of the frozen run when given), export, and report timings."""
    run, bundle = work / f"{name}-run", work / f"{name}-bundle"
    resume = (run / "model").is_dir()
    if seed_from is not None and not resume:  # same θ0 embeddings the frozen run computed: a resume cache hit
        (run / "checkpoints" / "xr").mkdir(parents=True, exist_ok=True)
        config.save(run / "config.json")
        shutil.copyfile(seed_from, run / "checkpoints" / "xr" / "emb_0.npy")
        resume = True
    start = time.perf_counter()
    summary = train_run(config, run, resume=resume, progress=True)
    train_s = time.perf_counter() - start
    start = time.perf_counter()
    manifest = export_run(run, bundle, overwrite=True)
    out = {
        "train_seconds_this_invocation": round(train_s, 1),
        "summary": summary,
        "export_seconds": round(time.perf_counter() - start, 1),
        "export": manifest.get("export"),
    }
    if quantize:
        int8 = config.model_copy(deep=True)
        int8.xr_transformer.export.quantize = True
        int8.save(run / "config.json")
        try:
            out["int8_export"] = export_run(run, work / f"{name}-int8-bundle", overwrite=True).get("export")
        finally:
            config.save(run / "config.json")
    return out


class CachedEncoder:
    """Bench-only: an encoder behind a text → embedding cache, for passes that time or evaluate everything but
    the encoder, or that see the same texts many times; the outputs are the encoder's."""

    def __init__(self, encoder):
        self.encoder, self.dim, self.cache = encoder, encoder.dim, {}

    def encode(self, texts: list[str]) -> np.ndarray:
        missing = [t for t in dict.fromkeys(texts) if t not in self.cache]
        if missing:
            self.cache.update(zip(missing, self.encoder.encode(missing)))
        return np.vstack([self.cache[t] for t in texts])


class HttpPredict:
    """`POST /v1/predict` over one keep-alive connection to a server on `port`. The client is a blocking
    socket that writes the request and reads exactly Content-Length bytes back, so that what is timed
    beyond the server is the loopback round trip, not a Python HTTP client's own parsing or event loop."""

    def __init__(self, port: int, k: int = 5, extra: dict | None = None):
        self.k, self.extra = k, extra or {}  # extra: more request fields (e.g. {"rerank": False})
        self.sock = socket.create_connection(("127.0.0.1", port))
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buffer = b""

    def __call__(self, text: str) -> None:
        body = json.dumps({"text": text, "k": self.k, **self.extra}).encode()
        self.sock.sendall(
            b"POST /v1/predict HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            b"Content-Length: %d\r\n\r\n%s" % (len(body), body)
        )
        while b"\r\n\r\n" not in self.buffer:
            self.buffer += self.sock.recv(65536)
        head, self.buffer = self.buffer.split(b"\r\n\r\n", 1)
        length = next(
            int(line.split(b":", 1)[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length:")
        )
        while len(self.buffer) < length:
            self.buffer += self.sock.recv(65536)
        self.buffer = self.buffer[length:]
        if not head.startswith(b"HTTP/1.1 200"):
            raise XtagError(f"/v1/predict answered {head.splitlines()[0].decode()}")

    def close(self) -> None:
        self.sock.close()


class ThreadServer:
    """`xtag serve`'s app and uvicorn settings (defaults: micro-batching on, one inference thread), run in a
    thread of this process, so that the bare ONNX forward can be timed on the very session the server
    uses: two sessions of one model differ by up to ~1 ms per forward on this VM (memory placement),
    which would otherwise land in the overhead figure."""

    def __init__(self, bundle: Path):
        import threading

        import uvicorn
        from xtag.config.settings import Settings
        from xtag.service.app import create_app
        from xtag.service.server import uvicorn_options

        from bench.helpers.server import free_port

        self.port = free_port()
        settings = Settings(
            _env_file=None,
            bundle=bundle,
            host="127.0.0.1",
            port=self.port,
            log_level="warning",
            load_in_background=False,
        )
        self.app = create_app(settings)
        self.server = uvicorn.Server(uvicorn.Config(self.app, **uvicorn_options(settings)))
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.thread.start()
        deadline = time.time() + 120
        while not self.server.started:
            if time.time() > deadline or not self.thread.is_alive():
                raise XtagError("the in-thread server did not start")
            time.sleep(0.05)
        self.predictor = self.app.state.registry.current.bundle.predictor

    @contextmanager
    def inlining_off(self) -> Iterator[None]:
        """Lone requests go to the worker thread meanwhile (XTAG_INLINE_MAX_TEXTS=0 on this server)."""
        batcher = self.app.state.registry.current.batcher
        batcher.inline_max_texts = 0
        try:
            yield
        finally:
            batcher.inline_max_texts = self.app.state.settings.server.inline_max_texts

    def close(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)


def alternating(calls: dict, n: int, rounds: int = 3, block: int = 10) -> dict[str, list[float]]:
    """Seconds per call of each method on texts 0..n-1, methods taking turns in blocks of `block` texts.

    Load on a shared machine drifts over seconds; taking turns spreads it over all methods alike, and
    blocks (rather than strict alternation) keep one runtime's spinning threads from slowing the
    next method's first call more than once per block.
    """
    times: dict[str, list[float]] = {name: [] for name in calls}
    for call in calls.values():  # warm-up
        for i in range(min(5, n)):
            call(i)
    for _ in range(rounds):
        for lo in range(0, n, block):
            for name, call in calls.items():
                for i in range(lo, min(lo + block, n)):
                    t = time.perf_counter()
                    call(i)
                    times[name].append(time.perf_counter() - t)
    return times


def p50_ms(call, n: int) -> float:
    """Median wall time of call(0..n-1) after 5 warm-up calls, in ms."""
    for i in range(min(5, n)):
        call(i)
    times = []
    for i in range(n):
        start = time.perf_counter()
        call(i)
        times.append(time.perf_counter() - start)
    return float(np.median(times) * 1e3)
