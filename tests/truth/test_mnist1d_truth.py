"""The MNIST-1D space (``data/spaces/mnist1d-truth.json``, model kind ``cnn1d``): its candidates, a small truth of
it, and ``naspipe rank`` of a short reference run against that truth."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from naspipe.cli import main
from naspipe.spaces.shared import parse_shared
from naspipe.spaces.space import resolve_space
from naspipe.truth import load
from naspipe.truth.records import TABLE, space_size

ROOT = Path(__file__).resolve().parents[2]
SPACE = str(ROOT / "data" / "spaces" / "mnist1d-truth.json")


def test_the_space_has_at_least_300_architectures_of_cells_that_keep_the_shape():
    from naspipe.models import build_stage

    sp = resolve_space(SPACE)
    assert sp.model["kind"] == "cnn1d" and space_size(sp) >= 300
    ops = {c.op for b in sp.blocks if not b.fixed for c in b.candidates}
    assert ops == {"conv", "dwsep", "pointwise", "identity", "pool"}
    model = build_stage(sp, range(sp.num_blocks), 0, parse_shared("serial"))
    x = torch.randn(5, 1, 40)
    cells = [b for b, blk in enumerate(sp.blocks) if not blk.fixed]
    for c in range(sp.blocks[cells[0]].k):
        arch = [0] * sp.num_blocks
        for b in cells:
            arch[b] = c
        assert model(x, arch).shape == (5, 10)
        inner = model.candidate(cells[0], c)(torch.randn(2, sp.model["channels"], 40))
        assert inner.shape == (2, sp.model["channels"], 40)  # every candidate keeps the length


@pytest.fixture(scope="module")
def truth(tmp_path_factory) -> Path:
    """10 architectures (rank's fewest) x 2 seeds, 3 steps each."""
    d = tmp_path_factory.mktemp("truth") / "t"
    assert main(["truth", "--space", SPACE, "--sample", "10", "--seeds", "2", "--steps", "3", "--workers", "1",
                 "--kernels", "portable", "--no-progress", "--out", str(d)]) == 0
    return d


def test_a_small_truth_of_the_mnist1d_space_and_rank_against_it(truth, tmp_path, capsys):
    t = load(truth)
    assert t.settings.space == "mnist1d-truth" and len(t.archs) == 10 and t.settings.seeds == (0, 1)
    assert all(0 <= a <= 1 for accs in t.accuracy.values() for a in accs)
    assert json.loads((truth / TABLE).read_text())["kernels"] == "portable"
    run = tmp_path / "ref"
    assert main(["reference", "--space", SPACE, "--subnets", "12", "--optimizer", "adam", "--shared-layers",
                 "serial", "--no-progress", "--out", str(run)]) == 0
    capsys.readouterr()
    assert main(["rank", str(run), "--truth", str(truth), "--resamples", "50"]) == 0
    out = capsys.readouterr().out
    assert "Kendall tau" in out and "(a) truth seed vs seed" in out
