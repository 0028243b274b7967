"""The quality part of ``benchmarks/samplers.py`` (issue 24): the comparison of two samplers' supernets against a
truth calls a difference only where its interval, which holds the seed noise, excludes zero."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from sampler_quality import compare, reference_args  # noqa: E402

FEW = 200  # bootstrap resamples: the verdicts hold whatever the interval's width


def _runs(columns: list[np.ndarray]) -> list[dict]:
    return [{"accuracy": c.tolist(), "loss": (-c).tolist(), "kendall_tau": {"value": 0.0}} for c in columns]


def test_a_sampler_that_ranks_like_the_truth_differs_and_an_equal_one_is_within_seed_noise():
    rng = np.random.default_rng(0)
    truth = rng.normal(size=40)
    noisy = [truth + rng.normal(scale=3.0, size=40) for _ in range(3)]  # tau about 0.2
    exact = [truth + rng.normal(scale=0.01, size=40) for _ in range(3)]  # tau about 1
    better = compare(truth.tolist(), _runs(noisy), _runs(exact), resamples=FEW)
    assert better["tau_difference"]["verdict"] == "difference" and better["tau_difference"]["low"] > 0
    assert better["regret_difference"]["value"] <= 0
    same = compare(truth.tolist(), _runs(noisy), _runs(noisy), resamples=FEW)
    assert same["tau_difference"] == {"value": 0.0, "low": 0.0, "high": 0.0, "verdict": "within seed noise"}
    worse = compare(truth.tolist(), _runs(exact), _runs(noisy), resamples=FEW)
    assert worse["tau_difference"]["verdict"] == "difference" and worse["tau_difference"]["high"] < 0


def test_the_reference_is_trained_with_the_truths_own_settings():
    truth = Path(__file__).resolve().parents[2] / "data" / "truth" / "digits-truth"
    args = reference_args(truth)
    assert args == ["--space", str(truth / "space.json"), "--optimizer", "momentum", "--lr", "0.02",
                    "--shared-layers", "serial"]
