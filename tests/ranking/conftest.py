"""A tiny truth and seed runs of its space, made once per session, for the proxy and ensemble tests."""

from __future__ import annotations

from pathlib import Path

import pytest

from naspipe.cli import main
from tests.helpers.runs import _shared

ROOT = Path(__file__).resolve().parents[2]
SPACE = str(ROOT / "data" / "spaces" / "digits-truth.json")


@pytest.fixture(scope="session")
def seed_runs(tmp_path_factory) -> dict[str, Path]:  # noqa: ANN001
    """``truth``: 40 architectures of digits-truth x 2 seeds, 3 steps; ``ref`` and ``ref1``: reference supernets
    equal but the seed (0, 1), 40 subnets; ``sgd``: seed 1 with another optimizer (no seed run of ``ref``)."""

    def make(d: Path) -> None:
        assert main(["truth", "--space", SPACE, "--sample", "40", "--seeds", "2", "--steps", "3", "--workers", "1",
                     "--no-progress", "--out", str(d / "truth")]) == 0
        common = ["--space", SPACE, "--subnets", "40", "--shared-layers", "serial", "--no-progress"]
        for name, extra in (("ref", ["--optimizer", "momentum"]), ("ref1", ["--optimizer", "momentum", "--seed", "1"]),
                            ("sgd", ["--optimizer", "sgd", "--seed", "1"])):
            assert main(["reference", *common, *extra, "--out", str(d / name)]) == 0

    d = _shared(tmp_path_factory, "ranking_seed_runs", make)
    return {name: d / name for name in ("truth", "ref", "ref1", "sgd")}
