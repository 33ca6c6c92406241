"""A real local cluster for the Python tests: `meridian up` with two agents at two
sites (tests/fleets/two-sites-fast.yaml), TLS and tokens as a user gets them; the
coordinator and agents are the build's own processes. Stopped after the session."""

from __future__ import annotations

import os
import subprocess
import tempfile

import pytest

import meridian

SOURCE_DIR = os.environ.get("MERIDIAN_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))
BIN = os.environ.get("MERIDIAN_BIN", os.path.join(SOURCE_DIR, "build", "dev", "meridian"))


@pytest.fixture(scope="session")
def cluster_dir():
    d = tempfile.mkdtemp(prefix="meridian-python-")
    os.chmod(d, 0o711)
    fleet = os.path.join(SOURCE_DIR, "tests", "fleets", "two-sites-fast.yaml")
    up = subprocess.run([BIN, "up", "--fleet", fleet, "--dir", d], capture_output=True, text=True, timeout=300)
    if up.returncode != 0:
        subprocess.run([BIN, "down", "--dir", d], capture_output=True)
        pytest.fail(f"meridian up failed ({up.returncode}):\n{up.stdout}\n{up.stderr}")
    yield d
    subprocess.run([BIN, "down", "--dir", d], capture_output=True, timeout=120)


@pytest.fixture(scope="session")
def client(cluster_dir) -> meridian.Client:
    return meridian.connect(dir=cluster_dir)


@pytest.fixture(scope="session")
def meridian_bin() -> str:
    return BIN
