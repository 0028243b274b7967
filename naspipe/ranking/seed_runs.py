"""Supernets equal but the seed: the check that runs differ in the seed alone, for ``naspipe rank --seeds`` (the seed
band) and ``--ensemble`` (of ``naspipe rank`` and ``naspipe search``: ``naspipe.ranking.ensemble``).

Why it exists: a seed band measured on supernets of another optimizer or learning rate says nothing of the run, and
an average of runs that differ in more than the seed is no ensemble of seeds; the same run twice is one run. Each is
refused in one line naming the runs, as given to the flag, and the field that differs (``runs.differences``).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from naspipe.errors import UserError


def identity_of(run_dir: Path) -> dict[str, Any]:
    """What decides a run's numbers: its ``run.json`` identity, or (a run without one) its recorded config."""
    from naspipe.runfolder import runs
    from naspipe.search.run import read_config

    data = runs.read_run(run_dir)  # RunFileError (a ValueError) names a malformed file
    return dict(data["identity"]) if data is not None else dict(read_config(run_dir))


# what a change of the supernet's seed changes in a run's identity (the seed, and the subnet sequence it draws)
SEED_DERIVED = ("seed", "sequence_sha256", "subnets_sha256")


def _beyond_seed(a: dict[str, Any], b: dict[str, Any]) -> list[tuple[str, Any, Any]]:
    """How two runs' identities differ in more than the seed (and what it draws), ``runs.differences``' form."""
    from naspipe.runfolder import runs

    diffs = [d for d in runs.differences(a, b) if d[0] not in SEED_DERIVED]
    sampled = a.get("sampler") is not None and b.get("sampler") is not None  # None: a stream given directly
    if sampled and a["sampler"] != b["sampler"] and all(k != "sampler" for k, _, _ in diffs):
        diffs.append(("sampler", a.get("sampler"), b.get("sampler")))
    return diffs


def check_seed_runs(seeds: Sequence[str | Path], run: str | Path | None = None, flag: str = "--seeds") -> None:
    """``seeds`` are two or more runs equal in everything but the seed, each of another seed, and equal but the
    seed to ``run`` (the run ranked, where given: a seed band of supernets of another configuration, another lr,
    says nothing of it). UserError naming the runs (as given to ``flag``) and the field that differs."""
    from naspipe.runfolder import runs

    if len(seeds) < 2:
        raise UserError(f"{flag} needs two or more runs equal but the seed (got {len(seeds)})")
    ids = [identity_of(Path(s)) for s in seeds]
    first, a = seeds[0], ids[0]
    for s, b in zip(seeds[1:], ids[1:], strict=True):
        if diffs := _beyond_seed(a, b):
            raise UserError(f"{flag} {first} and {s} differ in more than the seed: "
                             f"{runs.describe_differences(diffs)}")
    seen: dict[Any, str | Path] = {}
    for s, b in zip(seeds, ids, strict=True):
        if b.get("seed") in seen:
            raise UserError(f"{flag} {seen[b.get('seed')]} and {s} are the same run (both of seed "
                             f"{b.get('seed')}): each seed once")
        seen[b.get("seed")] = s
    if run is None:
        return
    mine = identity_of(Path(run))
    for s, b in zip(seeds, ids, strict=True):
        if diffs := _beyond_seed(mine, b):
            raise UserError(f"--seeds {s} and the run {run} differ in more than the seed: "
                             f"{runs.describe_differences(diffs)} (the seed band must come from supernets equal to "
                             "the run but the seed)")
