"""The ground truth on disk: a settings file, one record per trained entry, and the assembled table.

Why it exists: a truth takes many minutes to build and must survive being killed. The folder holds
``truth-settings.json`` (what decides the numbers: the space's digest, steps, seeds, optimizer, learning rate,
the architectures), ``entries/`` with one JSON record per (architecture, seed), written once and atomically
(a temporary file renamed into place; a finished record is never rewritten; ``--seeds`` may grow, keeping
them), and ``truth.json`` / ``truth.csv``,
the table assembled from the records when every entry is done. Torch-free: ``naspipe rank`` reads it without
loading a model.
"""

from __future__ import annotations

import csv
import json
import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from naspipe.fileio import jsonfile
from naspipe.fileio.atomic import atomic_path, write_text_atomic
from naspipe.spaces.space import SearchSpace

SETTINGS = "truth-settings.json"
TABLE = "truth.json"
CSV = "truth.csv"
ENTRIES = "entries"
SPACE_JSON = "space.json"  # the space, when it came from a JSON file (a run records only its name)
SHARED_LAYERS = "serial"  # stand-alone training trains the fixed blocks too, every step


class TruthError(ValueError):
    """A truth folder that cannot be used here (other space or settings, missing entries); one line."""


@dataclass(frozen=True)
class TruthSettings:
    """What decides a truth's numbers; two truths with equal settings hold the same bits."""

    space: str
    space_digest: str
    steps: int
    seeds: tuple[int, ...]
    optimizer: str
    lr: float
    archs: tuple[tuple[int, ...], ...]
    sample: int | None = None
    sample_seed: int | None = None
    shared_layers: str = SHARED_LAYERS
    # the CPU kernels every entry is trained with (naspipe.lifecycle.kernels); a truth from before they were
    # recorded was trained natively
    kernels: str = "native"
    extra: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"space": self.space, "space_digest": self.space_digest, "steps": self.steps,
                "seeds": list(self.seeds), "optimizer": self.optimizer, "lr": self.lr,
                "shared_layers": self.shared_layers, "sample": self.sample, "sample_seed": self.sample_seed,
                "archs": [list(a) for a in self.archs], "kernels": self.kernels, **self.extra}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> TruthSettings:
        known = {"space", "space_digest", "steps", "seeds", "optimizer", "lr", "shared_layers", "sample",
                 "sample_seed", "archs", "kernels"}
        return cls(space=str(d["space"]), space_digest=str(d["space_digest"]), steps=int(d["steps"]),
                   seeds=tuple(int(s) for s in d["seeds"]), optimizer=str(d["optimizer"]), lr=float(d["lr"]),
                   archs=tuple(tuple(int(c) for c in a) for a in d["archs"]), sample=d.get("sample"),
                   sample_seed=d.get("sample_seed"), shared_layers=str(d.get("shared_layers", SHARED_LAYERS)),
                   kernels=str(d.get("kernels", "native")),
                   extra={k: v for k, v in d.items() if k not in known})

    def differences(self, other: TruthSettings) -> list[str]:
        """The names of the settings that differ (empty when the two describe the same truth)."""
        a, b = self.to_dict(), other.to_dict()
        return [k for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)]


def space_size(space: SearchSpace) -> int:
    n = 1
    for blk in space.blocks:
        n *= blk.k
    return n


def arch_at(space: SearchSpace, index: int) -> tuple[int, ...]:
    """Architecture number ``index`` in the order of ``itertools.product`` over the blocks' candidates."""
    out = []
    for blk in reversed(space.blocks):
        index, c = divmod(index, blk.k)
        out.append(c)
    return tuple(reversed(out))


def choose_archs(space: SearchSpace, sample: int | None, sample_seed: int = 0) -> tuple[tuple[int, ...], ...]:
    """Every architecture of ``space`` (``sample`` None) or a seeded sample of ``sample`` distinct ones, in
    enumeration order (a space of astronomically many is sampled without listing it)."""
    n = space_size(space)
    if sample is None or sample >= n:
        idx: Sequence[int] = range(n)
    else:
        idx = sorted(random.Random(f"truth-sample:{sample_seed}").sample(range(n), sample))
    return tuple(arch_at(space, i) for i in idx)


def entry_name(arch: Sequence[int], seed: int) -> str:
    return f"{'-'.join(str(c) for c in arch)}_s{seed}.json"


def write_entry(folder: Path, record: dict[str, Any]) -> Path:
    """Store one finished entry; an entry already stored is kept as it is (append-only)."""
    path = folder / ENTRIES / entry_name(record["arch"], record["seed"])
    if not path.exists():
        write_text_atomic(path, json.dumps(record, sort_keys=True) + "\n")
    return path


def read_entry(folder: Path, arch: Sequence[int], seed: int) -> dict[str, Any] | None:
    path = folder / ENTRIES / entry_name(arch, seed)
    try:
        return jsonfile.loads(path.read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as e:
        raise TruthError(f"{path}: unreadable entry ({e}); delete it to train it again") from None


def pending(folder: Path, settings: TruthSettings) -> list[tuple[tuple[int, ...], int]]:
    """The (architecture, seed) entries not yet stored, seed-major so a partial truth covers whole seeds."""
    done = {p.name for p in (folder / ENTRIES).glob("*.json")}
    return [(a, s) for s in settings.seeds for a in settings.archs if entry_name(a, s) not in done]


def read_settings(folder: Path) -> TruthSettings | None:
    path = folder / SETTINGS
    try:
        return TruthSettings.from_dict(jsonfile.loads(path.read_text()))
    except FileNotFoundError:
        return None
    except (OSError, KeyError, TypeError, ValueError) as e:
        raise TruthError(f"{path}: not a truth settings file ({e})") from None


def start(folder: Path, settings: TruthSettings) -> None:
    """Create the folder for ``settings``, or check that the truth already there has the same settings."""
    old = read_settings(folder)
    if old is not None:
        diff = old.differences(settings)
        if diff == ["seeds"] and settings.seeds[:len(old.seeds)] == old.seeds:
            # more seeds: every stored entry keeps its bits (an entry depends on its architecture and seed only)
            write_text_atomic(folder / SETTINGS, json.dumps(settings.to_dict(), indent=1) + "\n")
            for name in (TABLE, CSV):
                (folder / name).unlink(missing_ok=True)
            return
        if diff:
            raise TruthError(f"{folder} holds a truth with other settings ({', '.join(diff)}); "
                             "choose another folder")
    elif folder.exists() and any(folder.iterdir()):
        raise TruthError(f"{folder} is not empty and holds no truth; choose another folder")
    (folder / ENTRIES).mkdir(parents=True, exist_ok=True)
    if old is None:
        write_text_atomic(folder / SETTINGS, json.dumps(settings.to_dict(), indent=1) + "\n")


@dataclass
class Truth:
    """A finished truth: per architecture, accuracy and loss per seed (in ``settings.seeds`` order)."""

    settings: TruthSettings
    accuracy: dict[tuple[int, ...], tuple[float, ...]]
    loss: dict[tuple[int, ...], tuple[float, ...]]
    names: dict[tuple[int, ...], str]

    @property
    def archs(self) -> tuple[tuple[int, ...], ...]:
        return self.settings.archs

    def mean_accuracy(self, arch: tuple[int, ...]) -> float:
        a = self.accuracy[arch]
        return sum(a) / len(a)

    def mean_loss(self, arch: tuple[int, ...]) -> float:
        x = self.loss[arch]
        return sum(x) / len(x)

    def to_dict(self) -> dict[str, Any]:
        rows = [{"arch": list(a), "name": self.names[a], "accuracy": list(self.accuracy[a]),
                 "loss": list(self.loss[a]), "accuracy_mean": self.mean_accuracy(a), "loss_mean": self.mean_loss(a)}
                for a in self.archs]
        s = self.settings.to_dict()
        s.pop("archs")
        return {**s, "entries": rows}


def assemble(folder: Path) -> Truth:
    """The truth of a folder whose entries are all stored (TruthError naming what is missing)."""
    settings = read_settings(folder)
    if settings is None:
        raise TruthError(f"{folder}: no {SETTINGS} (is this a naspipe truth folder?)")
    acc: dict[tuple[int, ...], tuple[float, ...]] = {}
    loss: dict[tuple[int, ...], tuple[float, ...]] = {}
    names: dict[tuple[int, ...], str] = {}
    missing = 0
    for a in settings.archs:
        recs = [read_entry(folder, a, s) for s in settings.seeds]
        if any(r is None for r in recs):
            missing += sum(r is None for r in recs)
            continue
        acc[a] = tuple(float(r["accuracy"]) for r in recs)  # type: ignore[index]
        loss[a] = tuple(float(r["loss"]) for r in recs)  # type: ignore[index]
        names[a] = str(recs[0]["name"])  # type: ignore[index]
    if missing:
        total = len(settings.archs) * len(settings.seeds)
        raise TruthError(f"{folder}: {missing} of {total} entries are missing (run naspipe truth again to "
                         "finish it)")
    return Truth(settings, acc, loss, names)


def write_table(folder: Path, truth: Truth) -> None:
    """``truth.json`` (settings and rows) and ``truth.csv`` (one row per architecture)."""
    write_text_atomic(folder / TABLE, json.dumps(truth.to_dict(), indent=1) + "\n")
    seeds = truth.settings.seeds
    with atomic_path(folder / CSV) as tmp, open(tmp, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["arch", "name", *[f"accuracy_s{s}" for s in seeds], *[f"loss_s{s}" for s in seeds],
                    "accuracy_mean", "loss_mean"])
        for a in truth.archs:
            w.writerow(["-".join(map(str, a)), truth.names[a], *map(repr, truth.accuracy[a]),
                        *map(repr, truth.loss[a]), repr(truth.mean_accuracy(a)), repr(truth.mean_loss(a))])


def load(folder: str | Path) -> Truth:
    """A finished truth folder (``truth.json`` must be there and match its entries' settings)."""
    d = Path(folder)
    if not d.is_dir():
        raise TruthError(f"no such truth folder: {str(d)!r}")
    if not (d / TABLE).is_file():
        if (d / SETTINGS).is_file():
            assemble(d)  # names the missing entries
        raise TruthError(f"{d}: no {TABLE} (is this a naspipe truth folder?)")
    try:
        data = jsonfile.loads((d / TABLE).read_text())
        head = {k: v for k, v in data.items() if k != "entries"}
        settings = TruthSettings.from_dict({**head, "archs": [r["arch"] for r in data["entries"]]})
        rows = data["entries"]
        acc = {tuple(r["arch"]): tuple(float(x) for x in r["accuracy"]) for r in rows}
        loss = {tuple(r["arch"]): tuple(float(x) for x in r["loss"]) for r in rows}
        names = {tuple(r["arch"]): str(r["name"]) for r in rows}
    except (OSError, KeyError, TypeError, ValueError) as e:
        raise TruthError(f"{d / TABLE}: not a truth table ({e})") from None
    for a in settings.archs:
        if len(acc[a]) != len(settings.seeds) or len(loss[a]) != len(settings.seeds):
            raise TruthError(f"{d / TABLE}: entry {list(a)} has {len(acc[a])} accuracies for "
                             f"{len(settings.seeds)} seeds (missing entries)")
    return Truth(settings, acc, loss, names)
