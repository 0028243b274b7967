"""Trained runs several test modules read, made once per session (a pytest plugin loaded by tests/conftest.py).

A fixture here only trains and returns folders; tests that change a run copy it first.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from naspipe.cli import main
from tests.helpers.refusals import TINY


@pytest.fixture(scope="session")
def two_thread_runs(tmp_path_factory) -> dict[str, Path]:  # noqa: ANN001
    """tiny-transformer, 8 subnets: a 2-stage train and a reference with 2 threads, and a reference with 1."""
    d = tmp_path_factory.mktemp("threads")
    runs = {"train2": d / "train2", "ref2": d / "ref2", "ref1": d / "ref1"}
    assert main(["train", *TINY, "--stages", "2", "--threads", "2", "--out", str(runs["train2"])]) == 0
    assert main(["reference", *TINY, "--threads", "2", "--out", str(runs["ref2"])]) == 0
    assert main(["reference", *TINY, "--out", str(runs["ref1"])]) == 0
    return runs
