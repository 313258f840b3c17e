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
