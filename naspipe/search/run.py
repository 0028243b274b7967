"""Search a trained supernet: load a run directory, evaluate subnets with inherited weights, write search.json.

The torch side of ``naspipe.search``. A subnet's score is ``naspipe.models.evaluate`` on held-out batches
(``heldout_batches``) with the supernet's trained weights, unchanged (no fine-tuning): the one-shot NAS
proxy. The run's ``metrics.json`` (written by ``naspipe reference`` and ``naspipe train``) gives the space
and seed; its weights come from ``weights.pt`` or ``weights-stage*.pt`` (``naspipe.models.weights``).

An ensemble (``search_run(members=...)``: ``naspipe search RUN --ensemble RUN2 ...`` or ``--ensemble-last N``,
checked and built by ``naspipe.ranking.ensemble.search_ensemble`` as ``naspipe rank`` checks them) scores each
subnet with the mean accuracy and loss over its supernets, on the same held-out batches (``mean_evaluator``).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from naspipe.errors import UserError
from naspipe.fileio import jsonfile
from naspipe.fileio.smallfile import read_small
from naspipe.inputs.wholes import whole
from naspipe.lifecycle.threads import intra_op_threads
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
    source: str = ""  # the folder its weights came from: the run's, or its checkpoint's


@dataclass(frozen=True)
class Member:
    """One supernet of an ensemble that ``search_run`` averages: of the run folder ``run``, its final weights or
    (``checkpoint``) those of its checkpoint at that position; ``after``: the subnets it had trained, where the
    ensemble is one run's last supernets (None otherwise)."""

    run: str | Path
    checkpoint: int | None = None
    after: int | None = None


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
            with intra_op_threads(1):
                cache[subnet] = evaluate(model, subnet, batches)
        return cache[subnet]
    return run


def mean_evaluator(evaluators: Sequence[EvaluateFn]) -> EvaluateFn:
    """``subnet -> {"accuracy", "loss"}``, each the plain mean over ``evaluators`` (an ensemble's supernets), summed
    in their order: the arithmetic of ``naspipe.ranking.ensemble.mean_scored``, so a subnet scores as ``naspipe rank``
    scores that architecture with the same ensemble."""
    def run(subnet: Subnet) -> dict[str, float]:
        scores = [e(subnet) for e in evaluators]
        return {key: sum(float(s[key]) for s in scores) / len(scores) for key in ("accuracy", "loss")}
    return run


def search_model(model: StageModel, *, strategy: str = "evolution", budget: int = 100,
                 constraints: Sequence[Constraint] | Sequence[str] | str = (), seed: int = 0,
                 costs: SearchCosts | None = None, batches: Sequence[Batch] | None = None,
                 ensemble: Sequence[StageModel] = (), **strategy_args: Any) -> SearchResult:
    """Search a whole-supernet ``model`` in memory (``batches``: default all held-out batches). ``ensemble``: more
    supernets of its space; each subnet is then scored with the mean over ``model`` and them (``mean_evaluator``,
    each on the same batches)."""
    space = model.space
    batches = heldout_batches(space) if batches is None else list(batches)
    costs = costs or cost_model(space, model)
    evaluate = make_evaluator(model, batches)
    if ensemble:
        evaluate = mean_evaluator([evaluate, *(make_evaluator(m, batches) for m in ensemble)])
    result = search_space(space, costs, evaluate, strategy=strategy, budget=budget,
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
                     checkpoint: int | None = None) -> LoadedRun:
    """The trained supernet of a run directory. ``space`` overrides the recorded one (needed for a space
    loaded from a JSON file, whose name alone cannot be resolved). ``checkpoint``: the supernet of the run's
    checkpoint at that position instead of its final weights (``naspipe.runtime.checkpoint.saved_models``: every
    stage's model state; CheckpointError, one line, for a missing or corrupted one); ``source`` names its folder."""
    d = Path(run_dir)
    if not d.is_dir():
        raise RunError(f"no such run directory: {str(d)!r}")
    cfg = read_config(d)
    states, source = None, str(run_dir)
    if checkpoint is not None:
        from naspipe.runtime.checkpoint import position_dir, root_of, saved_models

        states, source = saved_models(root_of(d), checkpoint), str(position_dir(root_of(d), checkpoint))
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
    return LoadedRun(sp, model, seed, shared, {**cfg, **({runs.FEW_SHOT: split} if split else {})}, source)


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
               top: int = 10, members: Sequence[Member] = (), **strategy_args: Any) -> SearchResult:
    """Search the supernet trained in ``run_dir``; with ``write`` also store ``RUN_DIR/search.json`` (its ``top``
    subnets). ``heldout``: how many held-out batches score a subnet (default all). ``members``: an ensemble, two
    ``Member`` or more of one space, whose mean scores each subnet (the first's model gives the costs);
    ``naspipe.ranking.ensemble.search_ensemble`` builds them from ``run_dir`` after the checks of ``naspipe rank``."""
    if heldout is not None:  # (a heldout or top that is not a whole number is refused here; None: every batch)
        whole("heldout", heldout, 1, RunError)
    whole("top", top, 0, RunError)
    given = [members] if isinstance(members, str | Path) else list(members)
    if given and (len(given) < 2 or not all(isinstance(m, Member) for m in given)):
        raise RunError(f"members must be two naspipe.search.run.Member or more (an ensemble), got {given!r:.80}")
    members = given or [Member(run_dir)]
    loaded = [load_trained_run(m.run, space, checkpoint=m.checkpoint) for m in members]
    run = loaded[0]
    for other in loaded[1:]:
        if other.space.digest() != run.space.digest():
            raise RunError(f"{other.source} trained space {other.space.name!r} ({other.space.digest()[:12]}), "
                           f"not {run.source}'s ({run.space.digest()[:12]}): an ensemble is of one space")
    try:
        batches = heldout_batches(run.space, heldout)
    except ValueError as e:
        raise RunError(str(e)) from None
    result = search_model(run.model, strategy=strategy, budget=budget, constraints=constraints, seed=seed,
                          costs=cost_model(run.space, run.model, profile), batches=batches,
                          ensemble=[r.model for r in loaded[1:]], **strategy_args)
    result.settings["run_dir"] = str(run_dir)
    if len(loaded) > 1:
        result.ensemble = tuple(r.source for r in loaded)
        after = [m.after for m in members if m.after is not None]
        result.after_subnets = tuple(after) if len(after) == len(members) else ()
    if write:
        Path(run_dir, SEARCH_JSON).write_text(json.dumps(result.to_dict(top), indent=1) + "\n")
    return result
