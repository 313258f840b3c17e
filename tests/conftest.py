"""Shared fixtures."""

from __future__ import annotations

import os

import pytest


@pytest.fixture(scope="session")
def default_model_path() -> str:
    """Path of the default model's GGUF file (SmolLM2-135M-Instruct, Q4_1), fetched on first use."""
    from ossa import models

    return models.resolve("smollm2-135m")


@pytest.fixture(scope="session")
def tmp_models_dir(tmp_path_factory: pytest.TempPathFactory) -> str:
    return str(tmp_path_factory.mktemp("models"))


def pytest_configure(config: pytest.Config) -> None:
    # Keep the kernels' thread count fixed unless a test sets it.
    os.environ.setdefault("OMP_NUM_THREADS", "2")
    # Tests run several thread pools at once (a server thread, the engine, the client); OpenMP's
    # busy-waiting workers would steal the cores they need. Benchmarks leave the default.
    os.environ.setdefault("OMP_WAIT_POLICY", "passive")


@pytest.fixture(scope="session")
def ray_cluster():
    """A local Ray cluster: a head and two worker "nodes" on this machine, 1 CPU each (Serve's
    controller and proxy need none), shut down with everything it started at the end of the session.
    Its processes get the proxy settings `ossa serve --ray` gives a cluster it starts."""
    import ray
    from ray.cluster_utils import Cluster

    from ossa.ray.serve import PROXY_ENV

    for key, value in PROXY_ENV.items():
        os.environ.setdefault(key, value)
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
    for _ in range(2):
        cluster.add_node(num_cpus=1)
    ray.init(address=cluster.address, log_to_driver=False)
    cluster.wait_for_nodes()
    try:
        yield cluster
    finally:
        from ray import serve

        serve.shutdown()
        ray.shutdown()
        cluster.shutdown()
