"""Trained supernet weights in a run directory, so a finished run can be searched (``naspipe search``).

Format: ``RUN_DIR/weights.pt`` is a plain ``dict`` {global parameter name -> CPU tensor}, the names of
``StageModel.global_named_parameters()`` (``"cell3.conv5.op.weight"``, ``"stem.conv.bias"``), written by
``torch.save`` and read with ``torch.load(..., weights_only=True)`` (no pickled code runs on load). A
pipeline run may instead write one ``weights-stage{S}.pt`` per stage with the same naming; readers merge
them and refuse a name that appears twice. A plain dict of tensors keeps the file independent of the
partition, the optimizer and this package's classes.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

import torch
from torch import Tensor, nn

from naspipe.errors import UserError
from naspipe.fileio.atomic import atomic_path
from naspipe.fileio.smallfile import open_regular
from naspipe.models import StageModel, build_stage
from naspipe.models.stage import global_name
from naspipe.runfolder.results import merge_disjoint
from naspipe.spaces.shared import SharedLayers
from naspipe.spaces.space import SearchSpace

WEIGHTS = "weights.pt"
STAGE_WEIGHTS_GLOB = "weights-stage*.pt"


class WeightsError(UserError):
    """A weights file is missing, unreadable or does not fit the model (the message names the file)."""


def _named(model_or_named: nn.Module | Mapping[str, Tensor] | Iterable[tuple[str, Tensor]]) -> dict[str, Tensor]:
    if isinstance(model_or_named, StageModel):
        items: Iterable[tuple[str, Tensor]] = model_or_named.global_named_parameters().items()
    elif isinstance(model_or_named, nn.Module):
        items = model_or_named.named_parameters()
    elif isinstance(model_or_named, Mapping):
        items = model_or_named.items()
    else:
        items = model_or_named
    return {str(n): t.detach().cpu().clone().contiguous() for n, t in items}


def save_weights(model_or_named: nn.Module | Mapping[str, Tensor] | Iterable[tuple[str, Tensor]],
                 path: str | Path) -> Path:
    """Write ``{global name: tensor}`` to ``path`` (atomically: ``naspipe.fileio.atomic``).

    ``model_or_named``: a ``StageModel`` (its global names are used), or name -> tensor pairs.
    """
    path = Path(path)
    tensors = _named(model_or_named)
    with atomic_path(path) as tmp, open(tmp, "wb") as f:
        try:
            torch.save(tensors, f)
        except RuntimeError as e:  # torch's writer wraps the file's error (a full disk) in its own
            if isinstance(e.__context__, OSError):
                raise e.__context__ from None
            raise
    return path


def weight_files(path: str | Path) -> list[Path]:
    """The files holding a run's weights: ``path`` itself if it is a file, else ``weights.pt`` or the
    ``weights-stage*.pt`` of the directory ``path``; raises WeightsError when there are none."""
    p = Path(path)
    if p.is_file():
        return [p]
    if not p.is_dir():
        raise WeightsError(f"no such run directory or weights file: {str(p)!r}")
    if (p / WEIGHTS).exists() or (p / WEIGHTS).is_symlink():  # (read_weights refuses one that is no regular file)
        return [p / WEIGHTS]
    stages = sorted(p.glob(STAGE_WEIGHTS_GLOB))
    if not stages:
        raise WeightsError(f"{p}: no {WEIGHTS} (nor {STAGE_WEIGHTS_GLOB}); train with a naspipe that saves "
                           "weights (naspipe reference writes weights.pt)")
    return stages


def read_weights(path: str | Path) -> dict[str, Tensor]:
    """Global name -> tensor from a weights file or a run directory (stage files merged)."""
    out: dict[str, Tensor] = {}
    for f in weight_files(path):
        try:
            with open_regular(f, error=WeightsError) as fh:  # (a named pipe there would block torch.load for ever)
                data = torch.load(fh, map_location="cpu", weights_only=True)
        except WeightsError:
            raise
        except Exception as e:  # noqa: BLE001 - torch raises many kinds for a corrupt or foreign file
            raise WeightsError(f"{f}: not a readable weights file ({type(e).__name__}: {str(e)[:120]})") from None
        if not isinstance(data, dict) or not all(isinstance(k, str) and isinstance(v, Tensor) for k, v in data.items()):
            raise WeightsError(f"{f}: must hold a dict of parameter name -> tensor")
        merge_disjoint(out, data, f, "weights", WeightsError)
    return out


def load_into(model: StageModel, tensors: Mapping[str, Tensor], source: str = "weights") -> StageModel:
    """Copy ``tensors`` into ``model`` (in place); names and shapes must match exactly."""
    params = model.global_named_parameters()
    missing = sorted(set(params) - set(tensors))
    extra = sorted(set(tensors) - set(params))
    if missing or extra:
        what = []
        if missing:
            what.append(f"{len(missing)} missing (e.g. {missing[0]!r})")
        if extra:
            what.append(f"{len(extra)} unknown (e.g. {extra[0]!r})")
        raise WeightsError(f"{source}: parameters do not match space {model.space.name!r}: {', '.join(what)}")
    with torch.no_grad():
        for name, p in params.items():
            t = tensors[name]
            if tuple(t.shape) != tuple(p.shape) or t.dtype != p.dtype:
                raise WeightsError(f"{source}: {name!r} is {t.dtype} {tuple(t.shape)}, the model expects "
                                   f"{p.dtype} {tuple(p.shape)}")
            p.copy_(t)
    return model


def load_weights(space: SearchSpace, path: str | Path, seed: int,
                 shared: SharedLayers | None = None, *,
                 states: Sequence[tuple[str | Path, Mapping[str, Tensor]]] | None = None) -> StageModel:
    """The whole supernet of ``space`` (every block) with the weights at ``path`` (file or run directory).

    The model is built with ``build_stage(space, range(num_blocks), seed, shared)`` and then overwritten, so
    ``seed`` only matters for a parameter the file lacks, which is an error anyway. ``states``: instead of the
    weights at ``path``, the stages' model ``state_dict``s of one pipeline run as ``(source, state)``, e.g. a
    checkpoint's (``naspipe.runtime.checkpoint.saved_models``): their parameters are loaded, their buffers are not
    (the final weights hold none either, so both score alike).
    """
    model = build_stage(space, range(space.num_blocks), seed, shared or SharedLayers())
    if states is None:
        return load_into(model, read_weights(path), source=str(path))
    buffers = {n for n, _ in model.named_buffers()}  # (a stage's state_dict names what the whole model names)
    tensors: dict[str, Tensor] = {}
    for source, state in states:
        part = {global_name(n): t for n, t in state.items() if n not in buffers}
        merge_disjoint(tensors, part, source, "checkpoint", WeightsError)
    return load_into(model, tensors, source=str(states[0][0]) if states else str(path))
