"""Search a trained supernet: load a run directory, evaluate subnets with inherited weights, write search.json.

The torch side of ``naspipe.search``. A subnet's score is ``naspipe.models.evaluate`` on held-out batches
(``heldout_batches``) with the supernet's trained weights, unchanged (no fine-tuning): the one-shot NAS
proxy. The run's ``metrics.json`` (written by ``naspipe reference`` and ``naspipe train``) gives the space
and seed; its weights come from ``weights.pt`` or ``weights-stage*.pt`` (``naspipe.models.weights``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from naspipe.errors import UserError
from naspipe.fileio import jsonfile
from naspipe.fileio.smallfile import read_small
from naspipe.inputs.wholes import whole
from naspipe.models import Batch, StageModel, evaluate, heldout_batches, model_kind
from naspipe.models.weights import load_weights
from naspipe.runfolder import runs
from naspipe.runfolder.results import RESULTS_MAX_BYTES
from naspipe.search.constraints import Constraint
from naspipe.search.result import SearchResult
from naspipe.search.strategies import EvaluateFn, search_space
from naspipe.search.subnet_costs import SearchCosts
from naspipe.spaces.shared import SharedLayers, parse_shared
from naspipe.spaces.space import SearchSpace, SpaceError, Subnet, resolve_space
from naspipe.supernet.load import recorded_space

SEARCH_JSON = "search.json"


class RunError(UserError):
    """A run directory cannot be searched (missing files, unknown space); the message says why."""


@dataclass
class LoadedRun:
    space: SearchSpace
    model: StageModel
    seed: int
    shared: SharedLayers
    config: dict[str, Any]


def model_param_counts(model: StageModel) -> dict[tuple[int, int], int]:
    """``{(block, candidate): parameter count}`` of a whole-supernet model."""
    return {(b, c): sum(p.numel() for p in model.candidate_parameters(b, c))
            for b, blk in enumerate(model.space.blocks) for c in range(blk.k)}


def cost_model(space: SearchSpace, model: StageModel | None = None, profile: str | Path | None = None) -> SearchCosts:
    """The space's cost model with the model's real parameter counts and, if given, a latency profile."""
    costs = SearchCosts.from_space(space)
    if model is not None:
        costs = costs.with_param_counts(model_param_counts(model), source="model parameter counts")
    if profile is not None:
        costs = costs.with_profile_file(profile)
    return costs


def make_evaluator(model: StageModel, batches: Sequence[Batch]) -> EvaluateFn:
    """``subnet -> {"accuracy", "loss"}`` on ``batches`` with one intra-op thread (bit-stable), memoised."""
    cache: dict[Subnet, dict[str, float]] = {}

    def run(subnet: Subnet) -> dict[str, float]:
        if subnet not in cache:
            threads = torch.get_num_threads()
            torch.set_num_threads(1)
            try:
                cache[subnet] = evaluate(model, subnet, batches)
            finally:
                torch.set_num_threads(threads)
        return cache[subnet]
    return run


def search_model(model: StageModel, *, strategy: str = "evolution", budget: int = 100,
                 constraints: Sequence[Constraint] | Sequence[str] | str = (), seed: int = 0,
                 costs: SearchCosts | None = None,
                 batches: Sequence[Batch] | None = None, **strategy_args: Any) -> SearchResult:
    """Search a whole-supernet ``model`` in memory (``batches``: default all held-out batches)."""
    space = model.space
    batches = heldout_batches(space) if batches is None else list(batches)
    costs = costs or cost_model(space, model)
    result = search_space(space, costs, make_evaluator(model, batches), strategy=strategy, budget=budget,
                          constraints=constraints, seed=seed, **strategy_args)
    result.settings["heldout_batches"] = len(batches)
    return result


def read_config(run_dir: str | Path) -> dict[str, Any]:
    """The config a run recorded in its ``metrics.json`` (it holds 'space' and 'seed'); RunError (one line) for a
    folder without one, an unreadable file, or a config without those keys. Reads no weights."""
    run_dir = Path(run_dir)
    path = run_dir / runs.METRICS
    try:
        data = jsonfile.loads(read_small(path, RESULTS_MAX_BYTES, what="a metrics.json", error=RunError))
    except FileNotFoundError:
        raise RunError(f"{run_dir}: no metrics.json (is this a naspipe run directory?)") from None
    except RunError:
        raise
    except (OSError, ValueError) as e:  # (malformed, not UTF-8, nested too deeply)
        raise RunError(f"{path}: unreadable ({e})") from None
    cfg = data.get("config") if isinstance(data, dict) else None
    if not isinstance(cfg, dict) or "space" not in cfg or "seed" not in cfg:
        raise RunError(f"{path}: has no config with 'space' and 'seed'")
    return cfg


def _space_hint(recorded: str, given: object) -> str:
    """What to do when the recorded space does not resolve: a module:function needs its module importable, a
    space loaded from a JSON file needs that file (its name alone says nothing)."""
    from naspipe.supernet.load import is_spec

    if given is not None:
        return "check the --space given"
    if is_spec(recorded):
        module = recorded.partition(":")[0]
        return f"a module:function: search needs module {module!r} importable here, its folder on PYTHONPATH"
    return "if it was loaded from a JSON file, pass that file with --space"


def load_trained_run(run_dir: str | Path, space: str | SearchSpace | None = None, *,
                     states: Sequence[tuple[str | Path, Mapping[str, torch.Tensor]]] | None = None) -> LoadedRun:
    """The trained supernet of a run directory. ``space`` overrides the recorded one (needed for a space
    loaded from a JSON file, whose name alone cannot be resolved). ``states``: the supernet of one of the run's
    checkpoints instead of its final weights (``naspipe.runtime.checkpoint.saved_models``, as
    ``naspipe.models.weights.load_weights`` takes them)."""
    d = Path(run_dir)
    if not d.is_dir():
        raise RunError(f"no such run directory: {str(d)!r}")
    cfg = read_config(d)
    try:
        sp = resolve_space(space if space is not None else recorded_space(d, str(cfg["space"])))
    except SpaceError as e:
        raise RunError(f"{e} (the run recorded space {cfg['space']!r}; {_space_hint(str(cfg['space']), space)})") \
            from None
    if sp.name != cfg["space"]:
        raise RunError(f"the run trained space {cfg['space']!r}, not {sp.name!r}")
    try:
        model_kind(sp)
    except ValueError as e:
        raise RunError(str(e)) from None
    try:
        seed = int(cfg["seed"])
        shared = parse_shared(str(cfg.get("shared_layers", "frozen")))
    except (TypeError, ValueError) as e:
        raise RunError(f"{d / 'metrics.json'}: bad config ({e})") from None
    split = _recorded_split(d)
    if split:  # a few-shot run (naspipe.models.sub_supernets): each architecture is scored on its own sub-supernet
        from naspipe.models.sub_supernets import few_shot_model

        model = few_shot_model(sp, split, d, seed, shared, states=states)
    else:
        model = load_weights(sp, d, seed, shared, states=states)  # WeightsError (a ValueError) names the file
    return LoadedRun(sp, model, seed, shared, {**cfg, **({runs.FEW_SHOT: split} if split else {})})


def _recorded_split(run_dir: Path) -> dict[str, Any] | None:
    """The few-shot split a run recorded in ``run.json`` (None: a one-shot run, or no ``run.json``)."""
    try:
        ident = (runs.read_run(run_dir) or {}).get("identity", {})
    except runs.RunFileError as e:
        raise RunError(str(e)) from None
    return ident.get(runs.FEW_SHOT) or None


def search_run(run_dir: str | Path, *, strategy: str = "evolution", budget: int = 100,
               constraints: Sequence[Constraint] | Sequence[str] | str = (), seed: int = 0,
               profile: str | Path | None = None,
               heldout: int | None = None, space: str | SearchSpace | None = None, write: bool = True,
               top: int = 10, **strategy_args: Any) -> SearchResult:
    """Search the supernet trained in ``run_dir``; with ``write`` also store ``RUN_DIR/search.json`` (its ``top``
    subnets). ``heldout``: how many held-out batches score a subnet (default all)."""
    if heldout is not None:  # (a heldout or top that is not a whole number is refused here; None: every batch)
        whole("heldout", heldout, 1, RunError)
    whole("top", top, 0, RunError)
    run = load_trained_run(run_dir, space)
    try:
        batches = heldout_batches(run.space, heldout)
    except ValueError as e:
        raise RunError(str(e)) from None
    result = search_model(run.model, strategy=strategy, budget=budget, constraints=constraints, seed=seed,
                          costs=cost_model(run.space, run.model, profile), batches=batches, **strategy_args)
    result.settings["run_dir"] = str(run_dir)
    if write:
        Path(run_dir, SEARCH_JSON).write_text(json.dumps(result.to_dict(top), indent=1) + "\n")
    return result
