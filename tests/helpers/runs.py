"""Trained runs several test modules read, made once per session (a pytest plugin loaded by tests/conftest.py).

A fixture here only trains and returns folders; tests that change a run copy it first. Under pytest-xdist the
workers of one session share the folders: the first to ask trains them under a file lock, the others wait for it
and read them.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
from filelock import FileLock

from naspipe.cli import main
from tests.helpers.refusals import TINY


def _shared(tmp_path_factory, name: str, make: Callable[[Path], None]) -> Path:  # noqa: ANN001
    """``name`` under this session's temporary folder (the one all xdist workers share), made once by ``make``."""
    root = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        root = root.parent  # each worker's basetemp is a folder of the session's
    d = root / name
    with FileLock(str(d) + ".lock", timeout=900):
        if not (d / ".done").exists():
            shutil.rmtree(d, ignore_errors=True)  # what a failed first try left
            d.mkdir()
            make(d)
            (d / ".done").touch()
    return d


@pytest.fixture(scope="session")
def two_thread_runs(tmp_path_factory) -> dict[str, Path]:  # noqa: ANN001
    """tiny-transformer, 8 subnets: a 2-stage train and a reference with 2 threads, and a reference with 1."""

    def make(d: Path) -> None:
        assert main(["train", *TINY, "--stages", "2", "--threads", "2", "--out", str(d / "train2")]) == 0
        assert main(["reference", *TINY, "--threads", "2", "--out", str(d / "ref2")]) == 0
        assert main(["reference", *TINY, "--out", str(d / "ref1")]) == 0

    d = _shared(tmp_path_factory, "two_thread_runs", make)
    return {"train2": d / "train2", "ref2": d / "ref2", "ref1": d / "ref1"}
