"""Shared fixtures: the `ferrox` binary of this checkout (the reference the bindings must
equal) and one `Llama` on the catalog's 0.5B model for the whole session."""

import os
import subprocess
import sys

import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
MODEL = "qwen2.5-coder:0.5b-instruct"


@pytest.fixture(scope="session")
def ferrox_bin():
    path = os.path.join(ROOT, "target", "release", "ferrox")
    if not os.path.exists(path):
        subprocess.run(["cargo", "build", "--release", "-p", "ferrox-cli"], cwd=ROOT, check=True)
    return path


def run_cli(ferrox_bin, *args):
    """The CLI's stdout for `args` (it must succeed)."""
    r = subprocess.run([ferrox_bin, *args], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    return r.stdout


@pytest.fixture(scope="session")
def model_path(ferrox_bin):
    """The 0.5B model's file (pulled by the CLI when missing; it prints the path)."""
    return run_cli(ferrox_bin, "pull", MODEL).strip()


@pytest.fixture(scope="session")
def llm(model_path):
    import ferrox

    return ferrox.Llama(model_path=model_path, n_ctx=2048, seed=7, verbose=False)


def python_script(code, timeout=300, **popen):
    """Runs `code` in a fresh interpreter (this one's), returning the finished process."""
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout, **popen
    )
