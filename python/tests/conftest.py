"""Fixtures for the Python frontend's tests: real clusters, started and
stopped with the `shoal` CLI (SHOAL_CLI, set by ctest) in a temp dir of
their own."""

import os
import subprocess
import tempfile

import pytest

import shoal


def _cli():
    return os.environ.get("SHOAL_CLI", "shoal")


def _env(temp_dir):
    env = dict(os.environ)
    env["SHOAL_TEMP_DIR"] = temp_dir
    env.pop("SHOAL_ADDRESS", None)
    env.pop("SHOAL_TOKEN", None)
    return env


@pytest.fixture
def local_cluster(monkeypatch):
    """shoal.init() with no cluster to find: it starts its own."""
    with tempfile.TemporaryDirectory(prefix="shoal-py-") as temp_dir:
        monkeypatch.setenv("SHOAL_TEMP_DIR", temp_dir)
        monkeypatch.delenv("SHOAL_ADDRESS", raising=False)
        monkeypatch.delenv("SHOAL_TOKEN", raising=False)
        shoal.init(num_cpus=2, resources={"slot": 3})
        yield temp_dir
        shoal.shutdown()


@pytest.fixture
def started_cluster(monkeypatch):
    """A cluster `shoal start --head` started; yields its temp dir."""
    with tempfile.TemporaryDirectory(prefix="shoal-py-") as temp_dir:
        env = _env(temp_dir)
        subprocess.run([_cli(), "start", "--head", "--port", "0",
                        "--num-cpus", "1", "--node-ip-address", "127.0.0.1",
                        "--temp-dir", temp_dir],
                       env=env, check=True, capture_output=True, timeout=60)
        monkeypatch.setenv("SHOAL_TEMP_DIR", temp_dir)
        monkeypatch.delenv("SHOAL_ADDRESS", raising=False)
        monkeypatch.delenv("SHOAL_TOKEN", raising=False)
        try:
            yield temp_dir
        finally:
            shoal.shutdown()
            subprocess.run([_cli(), "stop", "--temp-dir", temp_dir], env=env,
                           capture_output=True, timeout=60)
