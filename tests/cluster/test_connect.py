"""Joining a Ray cluster: a real local head and worker, and the one-line errors of a wrong address."""

from __future__ import annotations

import pytest
from xtag.cluster.connect import ray_cluster
from xtag.models.errors import XtagError

from tests.ray_support import free_port, local_cluster


@pytest.fixture(scope="module")
def cluster():
    with local_cluster(workers=1) as c:
        yield c


def test_joins_a_head_and_a_worker_and_counts_their_cpus(cluster):
    with ray_cluster(cluster.address) as joined:
        import ray

        assert (joined.nodes, joined.cpus) == (2, 2)
        assert ray.is_initialized()
    assert not ray.is_initialized()  # the driver leaves the cluster when the job ends


def test_an_address_where_nothing_listens_is_one_line_naming_it():
    address = f"127.0.0.1:{free_port()}"
    with pytest.raises(XtagError, match=f"--ray {address}: no Ray cluster answers there") as err:
        with ray_cluster(address):
            pass
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("address", ["127.0.0.1", "head:port", ":6390", "10.0.0.1:70000"])
def test_a_malformed_address_says_what_is_expected(address):
    with pytest.raises(XtagError, match="expected auto, local or HOST:PORT"):
        with ray_cluster(address):
            pass


def test_workers_without_xtag_are_named_before_any_work(cluster, monkeypatch):
    """A node whose workers lack a package the tasks need fails with the install hint, not a pickling trace."""
    import xtag.cluster.connect as connect

    needed = {**connect.driver_versions(), "a-package-no-node-has": "1.0"}
    monkeypatch.setattr(connect, "driver_versions", lambda: needed)
    with pytest.raises(XtagError, match=r"cannot import a-package-no-node-has .*pip install 'xtag\[ray\]'"):
        with ray_cluster(cluster.address):
            pass
