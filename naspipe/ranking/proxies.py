"""Zero-cost proxies: how well a network scored at initialisation, with no training at all, ranks a truth.

Why it exists: a supernet's Kendall tau against the stand-alone truth means little until it is set beside what no
training at all achieves. A zero-cost proxy scores each architecture of the truth on the very network the truth
trained it from (``naspipe.truth.standalone.train_entry``: the supernet model ``train_reference`` builds at the
truth's seed, run along the architecture's path), before its first step:

* ``synflow`` (Tanaka et al. 2020; Abdelfattah et al., ICLR 2021): every parameter replaced by its absolute value,
  in double precision, evaluation mode (batch norm, if any, on its running statistics), an input of all ones (one
  sample); ``R`` the sum of the output; the score is the sum over the path's parameters of ``|theta * dR/dtheta|``.
  No data, no labels.
* ``gradnorm``: the sum over the path's parameters of the L2 norm of the gradient of the training loss on the
  first training batch the truth trains the architecture on (batch 0 of the seed, ``make_batch``).
* ``params``: the number of parameters on the path (the fixed blocks' and the chosen candidates'): the baseline
  every zero-cost proxy paper sets beside them (Abdelfattah et al.), since a proxy may only be counting size.

Scores are computed with one intra-op thread, as the truth's workers do (the caller's count is restored), so the
same call gives the same bits twice; a proxy whose scores are NaN or infinite, or all equal, ranks nothing and is
refused in one line, as a diverged run is. ``rank_proxy`` reports the same statistics, intervals and floor (a) as
``naspipe.ranking.compare.rank``; with two seeds or more (``seeds``) the score is the mean over them, and the
proxy's own seed-to-seed agreement stands where a supernet's floor (b) would.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from naspipe.errors import UserError
from naspipe.inputs.wholes import whole
from naspipe.lifecycle.threads import intra_op_threads
from naspipe.ranking.compare import RankReport, Scored, SeedRuns, check_truth_ranks
from naspipe.ranking.stats import (
    MIN_ARCHS,
    RESAMPLES,
    TooFewArchitectures,
    agreement,
    kendall,
    pairwise_tau,
    seed_floor,
)
from naspipe.truth.records import Truth, TruthError, check_archs, load, space_of

if TYPE_CHECKING:
    from naspipe.models.stage import StageModel
    from naspipe.spaces.space import SearchSpace

PROXIES = ("synflow", "gradnorm", "params")


class ProxyError(UserError):
    """A proxy that cannot be computed or ranks nothing (an unknown name, NaN scores, every score equal)."""


def check_kind(kind: object) -> str:
    """``kind`` if it names a proxy of ``PROXIES``; ProxyError (one line) otherwise."""
    if not isinstance(kind, str) or kind not in PROXIES:
        raise ProxyError(f"unknown proxy {kind!r:.40}: one of {', '.join(PROXIES)}")
    return kind


def initial_model(space: SearchSpace, seed: int) -> StageModel:
    """The supernet model ``train_reference`` starts a truth entry from (seed ``seed``, the truth's shared layers),
    before any step: every architecture's initial weights, as the truth trained them."""
    from naspipe.models import build_stage
    from naspipe.spaces.shared import parse_shared
    from naspipe.truth.records import SHARED_LAYERS

    return build_stage(space, range(space.num_blocks), seed, parse_shared(SHARED_LAYERS))


def _tensor(x: Any, what: str) -> Any:
    import torch

    if not isinstance(x, torch.Tensor):
        raise ProxyError(f"{what} is a {type(x).__name__}, not one tensor: this proxy takes a supernet whose batch "
                         "input and output are tensors")
    return x


def _path_score(model: StageModel, per_param: Callable[[Any, Any], Any]) -> float:
    """The sum over parameters holding a gradient (the path's) of ``per_param(parameter, gradient)``; the
    gradients are cleared."""
    total = 0.0
    for p in model.parameters():
        if p.grad is not None:
            total += float(per_param(p.detach(), p.grad))
            p.grad = None
    return total


def synflow_scorer(model: StageModel, seed: int) -> Callable[[Sequence[int]], float]:
    """Synflow of each architecture on ``model``, which it linearises (absolute values, double precision,
    evaluation mode) for good: pass a model of its own."""
    import torch

    from naspipe.models import input_of, make_batch

    x = _tensor(input_of(model.space, make_batch(model.space, seed, 0)), "the batch input")
    ones = torch.ones((1, *x.shape[1:]), dtype=torch.float64 if x.is_floating_point() else x.dtype)
    model.double().eval()
    with torch.no_grad():
        for p in model.parameters():
            p.abs_()

    def score(arch: Sequence[int]) -> float:
        out = _tensor(model(ones, arch), "the supernet's output")
        out.sum().backward()
        return _path_score(model, lambda p, g: (p * g).abs().sum())

    return score


def gradnorm_scorer(model: StageModel, seed: int) -> Callable[[Sequence[int]], float]:
    """The gradient norm of each architecture on ``model`` (left as built) and batch 0 of ``seed``."""
    from naspipe.models import input_of, make_batch, target_of

    batch = make_batch(model.space, seed, 0)
    x, target = input_of(model.space, batch), target_of(model.space, batch)

    def score(arch: Sequence[int]) -> float:
        model.loss(model(x, arch), target).backward()
        return _path_score(model, lambda p, g: g.norm())

    return score


def params_scorer(model: StageModel, seed: int) -> Callable[[Sequence[int]], float]:
    """The number of parameters each architecture's path holds (the same at every seed)."""
    fixed = sum(p.numel() for p in model.fixed_named_parameters().values())
    return lambda arch: float(fixed + sum(p.numel() for p in model.subnet_parameters(arch)))


SCORERS = {"synflow": synflow_scorer, "gradnorm": gradnorm_scorer, "params": params_scorer}


def score_archs(space: SearchSpace, archs: Sequence[Sequence[int]], kind: str, seed: int = 0) -> list[float]:
    """``kind``'s score of each of ``archs`` at initialisation (seed ``seed``), in their order; ProxyError for
    scores that are NaN or infinite or all equal."""
    import math

    check_kind(kind)
    seed = whole("seed", seed, 0)
    with intra_op_threads(1):
        scorer = SCORERS[kind](initial_model(space, seed), seed)
        scores = [scorer(tuple(a)) for a in archs]
    bad = sum(not math.isfinite(s) for s in scores)
    if bad:
        raise ProxyError(f"{kind} at seed {seed} is NaN or infinite for {bad} of {len(scores)} architectures; it "
                         "ranks nothing")
    if len(set(scores)) == 1:
        raise ProxyError(f"{kind} at seed {seed} scores every architecture alike ({scores[0]:.6g}); it ranks nothing")
    return scores


def truth_space(truth: Truth, space: Any = None) -> SearchSpace:
    """The truth's space: ``space`` where given, else its ``space.json``, else its name resolved; each checked
    against the truth's digest (TruthError, one line)."""
    import naspipe.supernet  # noqa: F401 - registers the module:function resolver
    from naspipe.spaces.space import resolve_space

    t = truth.settings
    sp = resolve_space(space) if space is not None else (space_of(truth) or resolve_space(t.space))
    if sp.digest() != t.space_digest:
        raise TruthError(f"space {sp.name!r} ({sp.digest()[:12]}) is not the truth's space {t.space!r} "
                         f"({t.space_digest[:12]}); give the truth's space with --space")
    check_archs(sp, truth.archs, f"the truth {truth.folder}" if truth.folder else "the truth")
    return sp


def proxy_scores(truth: str | Path | Truth, kind: str, seed: int = 0, space: Any = None) -> list[float]:
    """``kind``'s score of each of the truth's architectures at initialisation, in the truth's order."""
    tr = truth if isinstance(truth, Truth) else load(truth)
    return score_archs(truth_space(tr, space), tr.archs, kind, seed)


def _seeds(seeds: Sequence[int]) -> tuple[int, ...]:
    if isinstance(seeds, str | bytes) or not isinstance(seeds, Sequence) or not seeds:
        raise ProxyError(f"proxy seeds must be a non-empty list of whole numbers, got {seeds!r:.60}")
    out = tuple(whole("proxy seed", s, 0) for s in seeds)
    if len(set(out)) != len(out):
        raise ProxyError(f"proxy seeds must differ, got {list(out)}")
    return out


@dataclass(frozen=True)
class ProxyReport(RankReport):
    """``rank``'s report for a proxy: ``run`` holds the proxy's scores (mean over ``proxy_seeds``; no loss),
    ``seed_runs`` each seed's (two seeds or more): the proxy's seed-to-seed tau stands where floor (b) would."""

    proxy: str = ""
    proxy_seeds: tuple[int, ...] = (0,)
    seed_runs: SeedRuns | None = None

    def label(self) -> str:
        s = self.proxy_seeds
        return (f"{self.proxy} at initialisation (no training), the truth's initial weights of seed"
                f"{'s' if len(s) > 1 else ''} {', '.join(map(str, s))}{' (mean score)' if len(s) > 1 else ''}")

    def per_architecture(self) -> list[dict[str, Any]]:
        rows = super().per_architecture()
        for row in rows:
            row["proxy_score"] = row.pop("run_accuracy")
            del row["run_loss"]
        return rows

    def to_dict(self) -> dict[str, Any]:
        out = super().to_dict()
        sr = self.seed_runs
        out["run"] = None
        out["proxy"] = {"kind": self.proxy, "seeds": list(self.proxy_seeds), "label": self.label(),
                        "seed_vs_seed": sr.floor.to_dict() if sr else None,
                        "seed_taus": list(sr.taus) if sr else [], "seed_band": sr.band if sr else 0.0}
        return out

    def text(self) -> str:
        lines = super().text().splitlines()
        sr = self.seed_runs
        if sr is not None:
            floor_b = (f"  (b) proxy seed vs seed      {sr.floor.text()}  ({len(sr.runs)} seeds; their tau vs truth "
                       f"{', '.join(f'{x:.2f}' for x in sr.taus)}: band +-{sr.band:.2f})")
        else:
            floor_b = "  (b) proxy seed vs seed      not measured (pass --proxy-seeds S S ...)"
        def swap(line: str) -> str:
            if line.startswith("run:"):
                return f"proxy: {self.label()}"
            if line.startswith("  (b) "):
                return floor_b
            return line.replace("(c) this run vs truth  ", "(c) this proxy vs truth")

        return "\n".join(swap(line) for line in lines)


def rank_proxy(truth: str | Path | Truth, kind: str, *, seeds: Sequence[int] = (0,), space: Any = None,
               resamples: int = RESAMPLES) -> ProxyReport:
    """Score every architecture of ``truth`` with proxy ``kind`` at initialisation (the mean over ``seeds``) and
    compare with the truth as ``rank`` compares a run; see the module. Refused in one line (a UserError): an unknown
    proxy, seeds that are not distinct whole numbers, a truth of too few architectures or that ranks nothing, a
    proxy that ranks nothing."""
    t0 = time.perf_counter()
    check_kind(kind)
    seeds = _seeds(seeds)
    resamples = whole("resamples", resamples, 1)
    if not isinstance(truth, Truth | str | os.PathLike):
        raise UserError(f"truth must be a truth folder (a path) or a loaded Truth, got {type(truth).__name__}")
    tr = truth if isinstance(truth, Truth) else load(truth)
    if len(tr.archs) < MIN_ARCHS:
        raise TooFewArchitectures(f"the truth {tr.folder or ''} holds {len(tr.archs)} architectures: too few to "
                                  f"rank (at least {MIN_ARCHS})")
    check_truth_ranks(tr)
    sp = truth_space(tr, space)
    n = len(tr.archs)
    per_seed = [Scored(f"{kind} seed {s}", score_archs(sp, tr.archs, kind, s), [0.0] * n, {"seed": s})
                for s in seeds]
    mean = [sum(col) / len(col) for col in zip(*(p.accuracy for p in per_seed), strict=True)]
    scored = Scored(f"proxy {kind}", mean, [0.0] * n, {"proxy": kind, "seeds": list(seeds)})
    target = [tr.mean_accuracy(a) for a in tr.archs]
    seed_runs = None
    if len(per_seed) > 1:
        floor = pairwise_tau([p.accuracy for p in per_seed], resamples=resamples)
        assert floor is not None  # (two columns or more)
        seed_runs = SeedRuns(tuple(per_seed), floor, tuple(kendall(target, p.accuracy) for p in per_seed))
    return ProxyReport(tr, scored, agreement(target, mean, resamples=resamples), seed_floor(tr, resamples),
                       wall_s=time.perf_counter() - t0, proxy=kind, proxy_seeds=seeds, seed_runs=seed_runs)
