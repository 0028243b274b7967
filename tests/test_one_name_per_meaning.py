"""The house rules of issue 26 that a reading of the source can check: one name per meaning, one home per rule.

Each test reads the package's files (no import, no torch, no process) and fails with the offending names.
"""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

import tomllib

ROOT = Path(__file__).resolve().parents[1]
PKG = ROOT / "naspipe"


def _modules() -> list[Path]:
    return sorted(p for p in PKG.rglob("*.py") if "__pycache__" not in p.parts)


def test_no_two_modules_share_a_base_name():
    """``naspipe.sim.plan`` and ``naspipe.cli.plan`` meant different things under one name; no more."""
    names = Counter(p.name for p in _modules() if p.name != "__init__.py")
    assert [n for n, k in names.items() if k > 1] == []


def test_every_package_data_pattern_matches_a_file():
    """A stale ``package-data`` entry (``spaces/*.json`` after the spaces became Python) ships nothing."""
    conf = tomllib.loads((ROOT / "pyproject.toml").read_text())
    data = conf.get("tool", {}).get("setuptools", {}).get("package-data", {})
    missing = [f"{pkg}: {pattern}" for pkg, patterns in data.items() for pattern in patterns
               if not list((ROOT / pkg.replace(".", "/")).glob(pattern))]
    assert missing == []


def test_one_writability_check():
    defs = [str(p.relative_to(PKG)) for p in _modules() if "def check_writable" in p.read_text()]
    assert defs == ["fileio/atomic.py"], defs


def test_replicas_divide_the_batch_is_stated_in_one_module():
    """Each rule about replicas is checked in one place (``naspipe.spaces.space.replicas_error``)."""
    homes = [str(p.relative_to(PKG)) for p in _modules()
             if re.search(r"(batch_size|\bbs) *% *\w", p.read_text()) or "must divide the batch" in p.read_text()]
    assert homes == ["spaces/space.py"], homes


def test_the_cli_reads_its_arguments_not_their_absence():
    """No ``getattr(args, ...)`` fallbacks and no literal choice lists in the commands."""
    cli = sorted((PKG / "cli").glob("*.py"))
    assert [p.name for p in cli if "getattr(args" in p.read_text()] == []
    assert [p.name for p in cli if re.search(r"choices=\(", p.read_text())] == []


def test_the_shims_are_gone():
    assert not (PKG / "launch.py").exists() and not (PKG / "sched" / "shared.py").exists()
