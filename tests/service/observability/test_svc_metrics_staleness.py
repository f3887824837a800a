"""/metrics tells the truth after a worker dies, and counts overload 503s under the endpoint that was
asked for (issue 30, defect 10)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
from prometheus_client.parser import text_string_to_metric_families
from xtag.config.settings import Settings

from tests.service.svc_support import (  # noqa: F401  (pytest fixtures)
    STARTUP_S,
    LiveServer,
    bundles,
    free_port,
    post_head,
    slow_model,
)

XTAG = Path(sys.executable).with_name("xtag")


def samples(url: str) -> list:
    text = httpx.get(url + "/metrics", timeout=5).text
    return [s for family in text_string_to_metric_families(text) for s in family.samples]


def test_overload_503s_count_under_their_endpoint(bundles, slow_model):
    settings = Settings(_env_file=None, bundle=bundles["a"], max_queue=1, inline_max_texts=0)
    with LiveServer(settings) as server:
        slow_model()
        busy = threading.Thread(target=lambda: httpx.post(server.url + "/v1/predict", json={"text": "x"}, timeout=30))
        busy.start()
        while server.app.state.recent.in_flight < 1:
            time.sleep(0.005)
        assert httpx.post(server.url + "/v1/predict", json={"text": "python"}).status_code == 503
        assert httpx.post(server.url + "/predict/batch", json={"documents": [{"text": "sql"}]}).status_code == 503
        busy.join()
        counted = {
            (s.labels["endpoint"], s.labels["status"]): s.value
            for s in samples(server.url)
            if s.name == "xtag_http_requests_total"
        }
        assert counted[("/v1/predict", "503")] == 1 and counted[("/predict/batch", "503")] == 1
        assert not any(endpoint == "unmatched" for endpoint, _ in counted)


def holder(pids: set[str], server_port: int, client_port: int) -> str:
    """The worker process whose socket serves the connection from `client_port` (/proc/net/tcp, then fds)."""
    inode = None
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        local, remote = (int(address.split(":")[1], 16) for address in fields[1:3])
        if local == server_port and remote == client_port:
            inode = fields[9]
    assert inode is not None, "the connection is not in /proc/net/tcp"
    for pid in pids:
        for fd in Path(f"/proc/{pid}/fd").iterdir():
            try:
                if os.readlink(fd) == f"socket:[{inode}]":
                    return pid
            except OSError:
                pass
    raise AssertionError(f"no worker of {pids} holds socket {inode}")


def test_a_killed_workers_series_leave_the_aggregate(bundles, tmp_path):
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("XTAG_", "PROMETHEUS_MULTIPROC_DIR"))}
    env.update({"XTAG_LOG_LEVEL": "warning", "XTAG_BODY_TIMEOUT_S": "60"})
    log = tmp_path / "serve.log"
    command = [str(XTAG), "serve", str(bundles["a"]), "--host", "127.0.0.1", "--port", str(port), "--workers", "2"]
    proc = subprocess.Popen(command, env=env, cwd=tmp_path, stderr=log.open("w"), start_new_session=True)

    def live() -> tuple[set[str], float]:
        """(pids with a model_info series, requests in flight) from /metrics."""
        found = samples(url)
        pids = {s.labels["pid"] for s in found if s.name == "xtag_model_info" and s.value == 1}
        return pids, sum(s.value for s in found if s.name == "xtag_http_requests_in_flight")

    try:
        deadline = time.monotonic() + STARTUP_S
        pids: set[str] = set()
        while len(pids) < 2 and time.monotonic() < deadline:
            try:
                pids = live()[0]
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        assert len(pids) == 2, log.read_text()[-3000:]
        with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
            s.sendall(post_head("/v1/predict", 100) + b"{")  # in flight until its body deadline
            time.sleep(0.5)
            assert live()[1] == 2  # this request and the scrape
            victim = holder(pids, port, s.getsockname()[1])
            os.kill(int(victim), signal.SIGKILL)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                now, in_flight = live()
                if victim not in now and in_flight == 1:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        now, in_flight = live()
        assert victim not in now, now  # the dead worker's model series is gone
        assert in_flight == 1  # the scrape itself: the dead worker's request no longer counts
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:  # never leave a server behind, workers included
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)
