"""The ground truth on disk: a settings file, one record per trained entry, and the assembled table.

Why it exists: a truth takes many minutes to build and must survive being killed. The folder holds
``truth-settings.json`` (what decides the numbers: the space's digest, steps, seeds, optimizer, learning rate,
the architectures), ``entries/`` with one JSON record per (architecture, seed), written once and atomically
(a temporary file renamed into place; a finished record is never rewritten; ``--seeds`` may grow, keeping
them), and ``truth.json`` / ``truth.csv``,
the table assembled from the records when every entry is done. Torch-free: ``naspipe rank`` reads it without
loading a model.

Nothing in the folder is trusted alone: ``load`` assembles the truth from the settings and the entries (each
read only where it is a regular file, an entry of at most ``ENTRY_MAX_BYTES``, and checked: its own architecture
and seed, the settings it was trained with where it records them, an accuracy in
[0, 1] and a finite loss) and refuses a table that disagrees with them; ``naspipe truth`` run again rewrites a
table or CSV that is missing or differs. Architectures are lists of whole numbers >= 0 (``check_archs`` checks
them against the space when it is known).
"""

from __future__ import annotations

import csv
import dataclasses
import io
import json
import math
import os
import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from naspipe.errors import UserError
from naspipe.fileio import jsonfile
from naspipe.fileio.atomic import write_text_atomic
from naspipe.fileio.smallfile import read_small
from naspipe.inputs.wholes import whole
from naspipe.runfolder.runlock import LOCK
from naspipe.spaces.space import SearchSpace, SpaceError, load_space

SETTINGS = "truth-settings.json"
TABLE = "truth.json"
CSV = "truth.csv"
ENTRIES = "entries"
SPACE_JSON = "space.json"  # the space, when it came from a JSON file (a run records only its name)
SHARED_LAYERS = "serial"  # stand-alone training trains the fixed blocks too, every step
BEHAVIOUR, BEHAVIOUR_ON = "behaviour_sha256", "behaviour_on"  # (naspipe.preflight.behaviour)


class TruthError(UserError):
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
    # what the supernet computes (``naspipe.preflight.behaviour``) and where that digest was taken (the kernels, the
    # capability and the CPU: ``naspipe.runfolder.runs.machine_of``); a truth from before it was taken has neither,
    # and is not refused for it
    behaviour_sha256: str | None = None
    behaviour_on: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"space": self.space, "space_digest": self.space_digest, "steps": self.steps,
                "seeds": list(self.seeds), "optimizer": self.optimizer, "lr": self.lr,
                "shared_layers": self.shared_layers, "sample": self.sample, "sample_seed": self.sample_seed,
                "archs": [list(a) for a in self.archs], "kernels": self.kernels,
                **({BEHAVIOUR: self.behaviour_sha256, BEHAVIOUR_ON: self.behaviour_on}
                   if self.behaviour_sha256 is not None else {}), **self.extra}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> TruthSettings:
        """The settings of a file a user can edit, read strictly (TruthError: what is wrong, in one line)."""
        if not isinstance(d, dict):
            raise TruthError(f"must be a JSON object, got {type(d).__name__}")
        known = {"space", "space_digest", "steps", "seeds", "optimizer", "lr", "shared_layers", "sample",
                 "sample_seed", "archs", "kernels", BEHAVIOUR, BEHAVIOUR_ON}
        missing = [k for k in ("space", "space_digest", "steps", "seeds", "optimizer", "lr", "archs") if k not in d]
        if missing:
            raise TruthError(f"has no {', '.join(missing)}")
        for k in ("space", "space_digest", "optimizer"):
            if not isinstance(d[k], str):
                raise TruthError(f"{k} must be a string, got {d[k]!r}")
        if not isinstance(d["seeds"], list) or not d["seeds"]:
            raise TruthError(f"seeds must be a non-empty list, got {d['seeds']!r}")
        seeds = tuple(whole("a seed", x, 0, TruthError) for x in d["seeds"])
        if len(set(seeds)) != len(seeds):
            raise TruthError(f"seeds repeat a seed: {list(seeds)}")
        lr = d["lr"]
        if isinstance(lr, bool) or not isinstance(lr, int | float) or not 0 < lr < math.inf:
            raise TruthError(f"lr must be a finite number > 0, got {lr!r}")
        return cls(space=d["space"], space_digest=d["space_digest"], steps=whole("steps", d["steps"], 1, TruthError),
                   seeds=seeds, optimizer=d["optimizer"], lr=float(lr), archs=parse_archs(d["archs"]),
                   sample=d.get("sample"), sample_seed=d.get("sample_seed"),
                   shared_layers=str(d.get("shared_layers", SHARED_LAYERS)), kernels=str(d.get("kernels", "native")),
                   behaviour_sha256=_text_or_none(d, BEHAVIOUR), behaviour_on=_text_or_none(d, BEHAVIOUR_ON),
                   extra={k: v for k, v in d.items() if k not in known})

    def differences(self, other: TruthSettings) -> list[str]:
        """The names of the settings that differ (empty when the two describe the same truth). The behaviour is
        compared only where both hold one taken on the same kernels and CPU (else the kernels name the change)."""
        a, b = self.to_dict(), other.to_dict()
        if not (a.get(BEHAVIOUR) and b.get(BEHAVIOUR) and a.get(BEHAVIOUR_ON) == b.get(BEHAVIOUR_ON)):
            a, b = ({k: v for k, v in x.items() if k not in (BEHAVIOUR, BEHAVIOUR_ON)} for x in (a, b))
        return [k for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)]


def _text_or_none(d: dict[str, Any], key: str) -> str | None:
    v = d.get(key)
    if v is not None and not isinstance(v, str):
        raise TruthError(f"{key} must be a string, got {v!r}")
    return v


def parse_arch(value: Any) -> tuple[int, ...]:
    """An architecture as a file holds it: a list of whole numbers >= 0 (TruthError otherwise)."""
    if not isinstance(value, list) or not value:
        raise TruthError(f"an architecture must be a non-empty list of candidate indices, got {value!r}")
    return tuple(whole(f"a candidate index (in architecture {value})", c, 0, TruthError) for c in value)


def parse_archs(value: Any) -> tuple[tuple[int, ...], ...]:
    """The architectures of a truth: a non-empty list of distinct architectures of one length."""
    if not isinstance(value, list) or not value:
        raise TruthError(f"archs must be a non-empty list of architectures, got {str(value)[:60]}")
    archs = tuple(parse_arch(a) for a in value)
    if len({len(a) for a in archs}) != 1:
        raise TruthError(f"archs have different lengths ({sorted({len(a) for a in archs})})")
    seen: set[tuple[int, ...]] = set()
    for a in archs:
        if a in seen:
            raise TruthError(f"archs list architecture {list(a)} twice")
        seen.add(a)
    return archs


def check_archs(space: SearchSpace, archs: Sequence[Sequence[int]], where: str) -> None:
    """Every architecture is one of ``space``: a candidate index per block, within the block's candidates (0 on
    a fixed block). TruthError names the first that is not, and ``where`` it was read."""
    for a in archs:
        if len(a) != space.num_blocks:
            raise TruthError(f"{where}: architecture {list(a)} has {len(a)} blocks; space {space.name!r} has "
                             f"{space.num_blocks}")
        for blk, c in zip(space.blocks, a, strict=True):
            if not 0 <= c < blk.k:
                what = "a fixed block: its only candidate is 0" if blk.fixed else f"candidates 0..{blk.k - 1}"
                raise TruthError(f"{where}: architecture {list(a)} picks candidate {c} of block {blk.name!r} "
                                 f"({what})")


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


# an entry's record is a few hundred bytes: a larger file is no entry (and is not read into memory)
ENTRY_MAX_BYTES = 1 << 20


def read_file(path: Path, limit: int | None = None, again: str = "") -> str:
    """The text of a file of the truth folder, only where it is a regular file (through links) of at most ``limit``
    bytes: a named pipe blocked the reader, a link to /dev/zero read forever (``naspipe.fileio.smallfile``).
    FileNotFoundError where it is not there; TruthError (one line naming it, then ``again``) where it is something
    else or too large; OSError or UnicodeDecodeError where it cannot be read."""
    return read_small(path, limit, what="a truth's entry", again=again, error=TruthError)


def read_entry(folder: Path, arch: Sequence[int], seed: int) -> dict[str, Any] | None:
    """The stored record of an entry (None when it is not stored); TruthError when it cannot be read, or is no
    regular file of at most ``ENTRY_MAX_BYTES`` (``read_file``)."""
    path = folder / ENTRIES / entry_name(arch, seed)
    again = "; delete it to train it again"
    try:
        return jsonfile.loads(read_file(path, ENTRY_MAX_BYTES, again))
    except FileNotFoundError:
        return None
    except TruthError:
        raise
    except (OSError, ValueError) as e:
        raise TruthError(f"{path}: unreadable entry ({e}){again}") from None


# what an entry records of the settings that trained it (older entries record none of them: not checked there)
RECORDED = ("space_digest", "steps", "optimizer", "lr")


def check_entry(path: Path, record: Any, arch: Sequence[int], seed: int, settings: TruthSettings) -> None:
    """An entry's record is the entry its file names, trained with ``settings``, with an accuracy in [0, 1] and
    a finite loss >= 0 (TruthError naming the file and what is wrong; deleting it trains it again)."""
    again = "; delete it to train it again"
    if not isinstance(record, dict):
        raise TruthError(f"{path}: an entry must be a JSON object, got {type(record).__name__}{again}")
    for k in ("arch", "seed", "name", "accuracy", "loss"):
        if k not in record:
            raise TruthError(f"{path}: the entry has no {k!r}{again}")
    if record["arch"] != list(arch) or record["seed"] != seed or isinstance(record["seed"], bool):
        raise TruthError(f"{path}: the entry is of architecture {record['arch']!r} seed {record['seed']!r}, not "
                         f"the {list(arch)} seed {seed} its name says{again}")
    for k, high in (("accuracy", 1.0), ("loss", math.inf)):
        v = record[k]
        if isinstance(v, bool) or not isinstance(v, int | float) or not 0 <= v <= high or math.isinf(v):
            bound = "a number in [0, 1]" if k == "accuracy" else "a finite number >= 0"
            raise TruthError(f"{path}: {k} must be {bound}, got {v!r}{again}")
    if not isinstance(record["name"], str):
        raise TruthError(f"{path}: name must be a string, got {record['name']!r}{again}")
    want = {"space_digest": settings.space_digest, "steps": settings.steps, "optimizer": settings.optimizer,
            "lr": settings.lr}
    for k in RECORDED:
        if k in record and record[k] != want[k]:
            raise TruthError(f"{path}: the entry was trained with {k} {record[k]!r}, the truth's settings say "
                             f"{want[k]!r}{again}")


def pending(folder: Path, settings: TruthSettings) -> list[tuple[tuple[int, ...], int]]:
    """The (architecture, seed) entries not yet stored, seed-major so a partial truth covers whole seeds."""
    done = {p.name for p in (folder / ENTRIES).glob("*.json")}
    return [(a, s) for s in settings.seeds for a in settings.archs if entry_name(a, s) not in done]


def read_settings(folder: Path) -> TruthSettings | None:
    path = folder / SETTINGS
    try:
        text = read_file(path)
    except FileNotFoundError:
        return None
    except TruthError:
        raise
    except (OSError, ValueError) as e:
        raise TruthError(f"{path}: not a truth settings file ({e})") from None
    try:
        return TruthSettings.from_dict(jsonfile.loads(text))
    except (KeyError, TypeError, ValueError) as e:
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
        if BEHAVIOUR in diff and not set(diff) & {"space", "space_digest", "kernels"}:
            raise TruthError(f"{folder} holds a truth of another behaviour of supernet {settings.space!r} (behaviour "
                             f"{str(old.behaviour_sha256)[:12]} vs {str(settings.behaviour_sha256)[:12]}: the same "
                             "structure and settings, another forward or backward: what its code reads changed "
                             "since the truth was started); build it with the code it was started with, or in "
                             "another folder")
        if diff:
            raise TruthError(f"{folder} holds a truth with other settings ({', '.join(diff)}); "
                             "choose another folder")
    elif folder.exists() and any(p.name != LOCK for p in folder.iterdir()):  # (the build's own lock file)
        raise TruthError(f"{folder} is not empty and holds no truth; choose another folder")
    (folder / ENTRIES).mkdir(parents=True, exist_ok=True)
    if old is None:
        write_text_atomic(folder / SETTINGS, json.dumps(settings.to_dict(), indent=1) + "\n")


@dataclass
class Truth:
    """A finished truth: per architecture, accuracy and loss per seed (in ``settings.seeds`` order); ``folder``:
    where it was read (``naspipe.rank`` finds the truth's ``space.json`` there)."""

    settings: TruthSettings
    accuracy: dict[tuple[int, ...], tuple[float, ...]]
    loss: dict[tuple[int, ...], tuple[float, ...]]
    names: dict[tuple[int, ...], str]
    folder: Path | None = None

    @property
    def archs(self) -> tuple[tuple[int, ...], ...]:
        return self.settings.archs

    def mean_accuracy(self, arch: tuple[int, ...]) -> float:
        a = self.accuracy[arch]
        return sum(a) / len(a)

    def mean_loss(self, arch: tuple[int, ...]) -> float:
        x = self.loss[arch]
        return sum(x) / len(x)

    def first(self, n: int) -> Truth:
        """The truth of its first ``n`` architectures (in its own order), held in memory: what a benchmark's smoke
        run ranks instead of the whole table (the statistics are the same functions on fewer architectures)."""
        if not 1 <= n <= len(self.archs):
            raise ValueError(f"a truth of {len(self.archs)} architectures has no first {n}")
        keep = self.archs[:n]
        return dataclasses.replace(
            self, settings=dataclasses.replace(self.settings, archs=keep),
            accuracy={a: self.accuracy[a] for a in keep}, loss={a: self.loss[a] for a in keep},
            names={a: self.names[a] for a in keep})

    def to_dict(self) -> dict[str, Any]:
        rows = [{"arch": list(a), "name": self.names[a], "accuracy": list(self.accuracy[a]),
                 "loss": list(self.loss[a]), "accuracy_mean": self.mean_accuracy(a), "loss_mean": self.mean_loss(a)}
                for a in self.archs]
        s = self.settings.to_dict()
        s.pop("archs")
        return {**s, "entries": rows}


def assemble(folder: Path) -> Truth:
    """The truth of a folder whose entries are all stored, each checked (``check_entry``); TruthError naming
    what is missing or wrong."""
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
        for s, r in zip(settings.seeds, recs, strict=True):
            check_entry(folder / ENTRIES / entry_name(a, s), r, a, s, settings)
        acc[a] = tuple(float(r["accuracy"]) for r in recs)  # type: ignore[index]
        loss[a] = tuple(float(r["loss"]) for r in recs)  # type: ignore[index]
        names[a] = str(recs[0]["name"])  # type: ignore[index]
    if missing:
        total = len(settings.archs) * len(settings.seeds)
        raise TruthError(f"{folder}: {missing} of {total} entries are missing (run naspipe truth again to "
                         "finish it)")
    return Truth(settings, acc, loss, names, folder)


def table_texts(truth: Truth) -> tuple[str, str]:
    """What ``truth.json`` (settings and rows) and ``truth.csv`` (one row per architecture) hold."""
    seeds = truth.settings.seeds
    buf = io.StringIO(newline="")
    w = csv.writer(buf)
    w.writerow(["arch", "name", *[f"accuracy_s{s}" for s in seeds], *[f"loss_s{s}" for s in seeds],
                "accuracy_mean", "loss_mean"])
    for a in truth.archs:
        w.writerow(["-".join(map(str, a)), truth.names[a], *map(repr, truth.accuracy[a]),
                    *map(repr, truth.loss[a]), repr(truth.mean_accuracy(a)), repr(truth.mean_loss(a))])
    return json.dumps(truth.to_dict(), indent=1, allow_nan=False) + "\n", buf.getvalue()


def write_table(folder: Path, truth: Truth) -> list[str]:
    """Write ``truth.json`` and ``truth.csv`` where they are missing or differ from the truth's; the names of the
    files written."""
    wrote = []
    for name, text in zip((TABLE, CSV), table_texts(truth), strict=True):
        try:
            same = read_file(folder / name) == text
        except (OSError, ValueError):  # (a TruthError: no regular file; replaced by one)
            same = False
        if not same:
            write_text_atomic(folder / name, text)
            wrote.append(name)
    return wrote


def _table_difference(table: Any, truth: Truth) -> str | None:
    """How ``truth.json``'s content differs from the truth assembled from the entries (None: it does not)."""
    want = truth.to_dict()
    if not isinstance(table, dict):
        return "not a JSON object"
    table = {"kernels": "native", **table}  # (a table from before kernels were recorded: trained natively)
    for k in want:
        if k != "entries" and table.get(k) != want[k]:
            return f"its {k} is {str(table.get(k))[:40]}, the settings say {str(want[k])[:40]}"
    rows = table.get("entries")
    if not isinstance(rows, list):
        return "it has no list of entries"
    have = [r.get("arch") if isinstance(r, dict) else None for r in rows]
    archs = [list(a) for a in truth.archs]
    for a in archs:
        if have.count(a) > 1:
            return f"it lists architecture {a} {have.count(a)} times"
    if extra := [a for a in have if a not in archs]:
        return f"it lists architecture {extra[0]}, which the truth does not hold"
    if lost := [a for a in archs if a not in have]:
        many = "" if len(archs) == 1 else "s"
        return f"it lacks {len(lost)} of the {len(archs)} architecture{many} (first {lost[0]})"
    for row, wrow in zip(rows, want["entries"], strict=False):
        if row != wrow:
            key = next((k for k in wrow if row.get(k) != wrow[k]), "order")
            return f"architecture {row.get('arch')}: its {key} differs from the entries'"
    return None


def load(folder: str | Path) -> Truth:
    """A finished truth folder: assembled from its settings and entries (``assemble``), with a ``truth.json``
    that agrees with them (TruthError, one line, otherwise)."""
    if not isinstance(folder, str | os.PathLike):
        raise TruthError(f"a truth folder is a path, got {type(folder).__name__}")
    d = Path(folder)
    try:
        is_dir = d.is_dir()
    except OSError as e:
        raise TruthError(f"cannot read truth folder {str(d)[:80]!r}...: {e.strerror or e}") from None
    if not is_dir:
        raise TruthError(f"{str(d)!r} is a file, not a truth folder" if d.exists()
                         else f"no such truth folder: {str(d)!r}")
    truth = assemble(d)
    try:
        text = read_file(d / TABLE)
    except FileNotFoundError:
        raise TruthError(f"{d}: no {TABLE} (run the same naspipe truth command to write it)") from None
    except TruthError:
        raise
    except (OSError, ValueError) as e:
        raise TruthError(f"{d / TABLE}: unreadable ({e})") from None
    try:
        table = jsonfile.loads(text)
    except ValueError as e:
        why: str | None = f"not valid JSON ({e})"
    else:
        why = _table_difference(table, truth)
    if why is not None:
        raise TruthError(f"{d / TABLE} disagrees with the truth's entries ({why}); run the same naspipe truth "
                         "command to rewrite it")
    return truth


def space_of(truth: Truth) -> SearchSpace | None:
    """The truth's recorded space (``space.json``, written for a space from a JSON file), checked to be the space
    the truth's settings name by digest; None when the folder has none."""
    if truth.folder is None:
        return None
    path = truth.folder / SPACE_JSON
    if not path.is_file():
        return None
    try:
        sp = load_space(path)
    except SpaceError as e:
        raise TruthError(f"the truth's {path} is not a search space ({str(e).splitlines()[0]})") from None
    t = truth.settings
    if sp.digest() != t.space_digest:
        raise TruthError(f"the truth's {path} is space {sp.name!r} ({sp.digest()[:12]}), not the space "
                         f"{t.space!r} ({t.space_digest[:12]}) it was built on; restore it from the build's --space")
    return sp
