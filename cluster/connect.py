"""Joining a Ray cluster: the one place that turns an address into a connected driver, or into one clear line.

Ray itself retries an unreachable address for minutes, printing a log line every few seconds, and a worker
without xtag fails much later with an unpickling trace. Both are checked here before any work is sent:
the address answers on TCP, and every node's workers import the same xtag as the driver.
"""

from __future__ import annotations

import importlib.metadata
import ipaddress
import logging
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from xtag.config.settings import ClusterEnvironment
from xtag.models.errors import XtagError

INSTALL_HINT = "pip install 'xtag[ray]'"
START_HINT = "start one with `ray start --head --node-ip-address 127.0.0.1 --port 6390` (docs/ray.md)"
CONNECT_TIMEOUT_S = 3.0
# What the workers must import for xtag's tasks: xtag itself (the same version as the driver) and Ray Data's
# reader, which the `ray` extra brings.
WORKER_PACKAGES = ("xtag", "pyarrow")


@dataclass(frozen=True)
class Cluster:
    """What the driver joined: the address as given, and the nodes and CPUs that can take tasks."""

    address: str
    nodes: int
    cpus: int


def require_ray():
    """The ray module, or the error that says how to install it."""
    try:
        import ray
    except ImportError as exc:
        raise XtagError(f"--ray needs Ray, which is not installed here: {INSTALL_HINT}") from exc
    return ray


def parse_address(address: str) -> tuple[str, int] | None:
    """HOST:PORT as a pair; None for 'auto' and 'local'."""
    if address in ("auto", "local"):
        return None
    host, sep, port = address.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise XtagError(
            f"--ray {address!r}: expected auto, local or HOST:PORT (the head's GCS port, e.g. 127.0.0.1:6390)"
        )
    return host.strip("[]"), int(port)


def check_reachable(address: str) -> None:
    """One TCP connect to the head, so a wrong address fails in seconds with its name, not after Ray's retries."""
    target = parse_address(address)
    if target is None:
        return
    try:
        socket.create_connection(target, timeout=CONNECT_TIMEOUT_S).close()
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        raise XtagError(f"--ray {address}: no Ray cluster answers there ({reason}); {START_HINT}") from exc


@contextmanager
def ray_cluster(address: str, num_cpus: int | None = None) -> Iterator[Cluster]:
    """Connected to `address` for the duration ('local': a Ray runtime started here, with `num_cpus`).

    'auto' is Ray's own: RAY_ADDRESS, or the cluster that `ray start` left on this machine.
    """
    ray = require_ray()
    check_reachable(address)
    if ray.is_initialized():
        raise XtagError("a Ray session is already open in this process; one job joins one cluster")
    kwargs: dict = {"logging_level": logging.WARNING, "log_to_driver": False, "include_dashboard": False}
    target = parse_address(address)
    if target is None and address == "local":
        kwargs["num_cpus"] = num_cpus
    else:
        kwargs.pop("include_dashboard")
        kwargs["address"] = address
        if target and _is_loopback(target[0]):
            kwargs["_node_ip_address"] = target[0]  # a cluster started with --node-ip-address 127.0.0.1
    try:
        ray.init(**kwargs)
    except ConnectionError as exc:
        given = ClusterEnvironment().ray_address
        where = f"RAY_ADDRESS={given}" if given else "this machine"
        raise XtagError(f"--ray {address}: no Ray cluster found on {where}; {START_HINT}") from exc
    try:
        yield _checked(ray, address)
    finally:
        ray.shutdown()


def _is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


def driver_versions() -> dict[str, str]:
    """The versions of WORKER_PACKAGES here, which every worker must match."""
    return {name: importlib.metadata.version(name) for name in WORKER_PACKAGES}


def _checked(ray, address: str) -> Cluster:
    """The cluster, once every alive node's workers import the driver's xtag and Ray Data's reader."""
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    here = driver_versions()
    # importlib.metadata.version pickles by reference to the standard library, so the probe itself runs on a
    # worker without xtag, and reports the missing package instead of failing to unpickle xtag code.
    probe = ray.remote(num_cpus=0, max_retries=0)(importlib.metadata.version)
    nodes = [n for n in ray.nodes() if n.get("Alive")]
    for node in nodes:
        on_node = NodeAffinitySchedulingStrategy(node["NodeID"], soft=False)
        for name, version in here.items():
            try:
                theirs = ray.get(probe.options(scheduling_strategy=on_node).remote(name))
            except ray.exceptions.RayTaskError as exc:
                raise XtagError(
                    f"--ray {address}: the workers on node {node['NodeManagerAddress']} cannot import {name} "
                    f"({type(exc.cause).__name__}); install xtag with its Ray extra on every node: {INSTALL_HINT}"
                ) from None
            if theirs != version:
                raise XtagError(
                    f"--ray {address}: node {node['NodeManagerAddress']} has {name} {theirs}, this driver {version}; "
                    "install the same version on every node"
                )
    cpus = int(sum(n.get("Resources", {}).get("CPU", 0) for n in nodes))
    return Cluster(address=address, nodes=len(nodes), cpus=cpus)
