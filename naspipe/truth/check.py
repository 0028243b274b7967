"""``naspipe truth --check DIR``: retrain a few random entries of a finished truth and compare them bit for bit.

Why it exists: a shipped or downloaded truth is only as good as its claim that its numbers are what its settings
give. An entry's bits depend on its (architecture, seed), the settings and the CPU kernels it was trained with
(``naspipe.lifecycle.kernels``), never on the worker or the order, so any entry can be trained again wherever its
kernels give the same bits (``portable``: every x86-64 CPU, or one vendor's where the optimizer takes a square
root; ``avx2``: one vendor's; ``native``: one kind of CPU) and must come out identical: held-out accuracy and
loss, the final training loss and the digest of the trained weights. Elsewhere the verdict says why it differs.
The entries retrained are a seeded random sample (the seed is printed, so a failure can be repeated); they are
trained in worker processes started under the truth's kernels.
"""

from __future__ import annotations

import os
import random
from dataclasses import dataclass
from pathlib import Path

from naspipe.lifecycle import kernels
from naspipe.spaces.space import SpaceError, resolve_space
from naspipe.truth.records import SPACE_JSON, TruthError, load, read_entry, read_settings

FIELDS = ("accuracy", "loss", "train_loss", "params_sha256")


@dataclass(frozen=True)
class CheckResult:
    ok: bool
    line: str  # the one-line verdict


def space_spec(folder: Path, name: str) -> str:
    """How a worker resolves the truth's space: its ``space.json`` when it came from a file, else its name."""
    return str(folder / SPACE_JSON) if (folder / SPACE_JSON).is_file() else name


def check_truth(folder: str | Path, sample: int = 3, seed: int | None = None) -> CheckResult:
    """Retrain ``sample`` random entries (``random.Random(seed)``; a fresh seed when None) of the truth in
    ``folder`` under its kernels and compare their records bit for bit. TruthError (one line) when the folder
    holds no finished truth or its kernels cannot run here."""
    d = Path(folder)
    settings = read_settings(d)
    if settings is None:
        raise TruthError(f"{d} holds no truth (no truth-settings.json)")
    load(d)  # the truth is whole and consistent (settings, entries, table), as rank reads it
    kind = settings.kernels
    if (why := kernels.kind_error(kind)) is not None:
        raise TruthError(f"{d} was built with kernels {kind}: {why}")
    entries = [(a, s) for a in settings.archs for s in settings.seeds]
    missing = [e for e in entries if read_entry(d, *e) is None]
    if missing:
        raise TruthError(f"{d} is not finished: {len(missing)} of {len(entries)} entries are missing")
    if seed is None:
        seed = random.SystemRandom().randrange(2**32)
    chosen = random.Random(seed).sample(entries, min(int(sample), len(entries)))
    spec = space_spec(d, settings.space)
    import naspipe.supernet  # noqa: F401 - registers the module:function resolver

    try:  # resolved here first: a space the workers cannot resolve is one line, not a worker's failure
        if resolve_space(spec).digest() != settings.space_digest:
            raise TruthError(f"{d}'s space {spec!r} resolves to another space than the one it was built on "
                             f"({settings.space_digest[:12]})")
    except SpaceError as e:
        raise TruthError(f"{d}'s space cannot be resolved here: {str(e).splitlines()[0]}") from None
    jobs = [(spec, settings.space_digest, a, s, settings.steps, settings.optimizer, settings.lr) for a, s in chosen]
    from naspipe.truth.standalone import train_job
    from naspipe.truth.workers import results, worker_pool

    with worker_pool(min(len(jobs), os.cpu_count() or 1), kind) as pool:
        done = list(results(pool, train_job, jobs, ordered=True))
    failed = next((line for ok, line in done if not ok), None)
    if failed is not None:
        raise TruthError(f"retraining failed: {failed}")
    again = [rec for _, rec in done]
    where = f"kernels {kind} on {kernels.cpu_name()}; --sample {len(jobs)} --check-seed {seed}"
    why = _built_elsewhere(kind, settings.optimizer, settings.behaviour_on)
    for (arch, s), rec in zip(chosen, again, strict=True):
        old = read_entry(d, arch, s) or {}
        for k in FIELDS:
            if old.get(k) != rec[k]:
                return CheckResult(False, f"differ: entry {list(arch)} seed {s}: {k} {old.get(k)!r} retrained is "
                                          f"{rec[k]!r}{why} ({where})")
    return CheckResult(True, f"identical: {len(jobs)} of {len(entries)} entries retrained bit for bit ({where})")


def _built_elsewhere(kind: str, optimizer: str, built_on: str | None) -> str:
    """Why a truth built on ``built_on`` (its settings' ``behaviour_on``: ``portable AVX2 on GenuineIntel ...``;
    None in a truth from before it was recorded) is not to be met bit for bit here, as a parenthesis for the
    verdict ('' where it is)."""
    if kind == kernels.NATIVE and kernels.cpu_name() not in str(built_on):
        return " (a truth built with native kernels agrees only on the kind of CPU that built it)"
    if not kernels.vendor_bound(kind, optimizer):
        return ""
    take = f"{optimizer}'s square root" if optimizer in kernels.SQRT_OPTIMIZERS else "MKL"
    if built_on is None:
        return (f" (the truth does not say which CPU built it: under kernels {kind}, {take} gives the same bits only "
                "on CPUs of one vendor; docs/reproducibility.md)")
    if kernels.vendor_of(built_on) != kernels.cpu_vendor():
        return (f" (built under {built_on}: {take} gives the same bits only on CPUs of one vendor under kernels "
                f"{kind}; docs/reproducibility.md)")
    return ""
