"""Few-shot supernets trained (issue 42 item 1): the warm start, the reference, the pipeline, a resume across the
warm-up's end, and scoring on each architecture's own sub-supernet.

digits-truth split on cell0 (6 sub-supernets; cell1 and cell2 hold 6 copies of each candidate), momentum so the
optimizer state matters. Mutations each test was seen to catch are named in its docstring.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

import naspipe
from naspipe.cli import main
from naspipe.models import build_stage, make_optimizer
from naspipe.models.warm_start import warm_start
from naspipe.oracle.sequential_trainer import train_reference
from naspipe.runspec.few_shot_run import few_shot_run
from naspipe.runspec.spec import RunSpec
from naspipe.spaces.few_shot import few_shot_space
from naspipe.spaces.shared import SharedLayers
from naspipe.spaces.space import resolve_space

ROOT = Path(__file__).resolve().parents[2]
SPACE = str(ROOT / "data" / "spaces" / "digits-truth.json")
TRUTH = str(ROOT / "data" / "truth" / "digits-truth")
N, W = 24, 8
COMMON = ["--space", SPACE, "--subnets", str(N), "--seed", "2", "--optimizer", "momentum", "--few-shot", "cell0",
          "--few-shot-warmup", str(W), "--no-progress"]


def test_the_warm_start_copies_weights_and_optimizer_state():
    """Mutation caught: the optimizer state not copied (weights only)."""
    sp = few_shot_space(resolve_space(SPACE), "cell0", 1, 2)
    model = build_stage(sp, range(sp.num_blocks), 0, SharedLayers())
    opt = make_optimizer(model.parameters(), "momentum", 0.1)
    src, stale = model.candidate(2, 3 * 6), model.candidate(2, 5 * 6 + 5)  # cell1's dilated3@0 trained; mlp@5 ...
    for m in (src, stale):
        for p in m.parameters():
            p.grad = torch.ones_like(p)
    opt.step()  # ... holds momentum that copy 0 (mlp@0, never trained) lacks: the warm start drops it
    assert warm_start(model, opt) == 2 * 6 * 5
    for k in range(1, 6):
        dst = model.candidate(2, 3 * 6 + k)
        for ps, pd in zip(src.parameters(), dst.parameters(), strict=True):
            assert torch.equal(ps, pd) and pd is not ps
            assert torch.equal(opt.state[pd]["momentum_buffer"], opt.state[ps]["momentum_buffer"])
            assert opt.state[pd]["momentum_buffer"] is not opt.state[ps]["momentum_buffer"]
    assert all(p not in opt.state for p in stale.parameters())


def test_the_reference_trains_the_warmup_one_shot_then_each_copy_from_its_state():
    """Subnets 0..W-1 of a few-shot reference are the one-shot reference's, bit for bit (copy 0 is built and trained
    as the one-shot candidate); subnet W (sub-supernet 4) trains its copies from the one-shot state, so its loss
    and its updated copies equal the one-shot run's. Mutations caught: no warm start in the reference; no optimizer
    state copied; copy 0 used after W."""
    base = resolve_space(SPACE)
    # the warm-up trains cell1's dilated3 and cell2's dwsep3 (in every sub-supernet's cell0 choice), then subnet W
    seq = [(0, j % 6, 3, 2, 0) if j % 2 else (0, j % 6, j % 6, (j + 1) % 6, 0) for j in range(W)] + [(0, 4, 3, 2, 0)]
    one = RunSpec.create(SPACE, subnets=W + 1, sequence=seq)
    few = few_shot_run(one, "cell0", W)
    ref1 = train_reference(base, one.stream, 0, SharedLayers(), optimizer="momentum")
    refk = train_reference(few.space, few.stream, 0, SharedLayers(), optimizer="momentum")
    assert [v.hex() for v in refk.losses.values()] == [v.hex() for v in ref1.losses.values()]
    p1, pk = ref1.model.global_named_parameters(), refk.model.global_named_parameters()
    for block, cand in (("cell1", "dilated3"), ("cell2", "dwsep3")):  # copy 4 of what subnet W picks
        assert any(n.startswith(f"{block}.{cand}.") for n in p1)
        for name, p in p1.items():
            if name.startswith(f"{block}.{cand}."):
                assert torch.equal(pk[name.replace(f".{cand}.", f".{cand}@4.")], p), name
    assert refk.config["few_shot"] == {"block": "cell0", "copies": 6, "warmup": W}


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    out = tmp_path_factory.mktemp("few") / "ref"
    assert main(["reference", *COMMON, "--out", str(out)]) == 0
    return out


@pytest.mark.usefixtures("no_process_left_behind")
def test_a_pipeline_run_and_a_resume_across_the_warmup_verify_against_the_reference(reference, tmp_path, capsys):
    """Two stages (csp-plan), and a run stopped after its checkpoint at 6 < W then resumed across W: identical to the
    reference. A resume with another warm-up is refused by the checkpoint's fingerprint. Mutation caught: no warm
    start at the stages' fence."""
    run = tmp_path / "plan"
    assert main(["train", *COMMON, "--stages", "2", "--policy", "csp-plan", "--out", str(run)]) == 0
    assert main(["verify", str(run), str(reference)]) == 0, capsys.readouterr()
    stopped = tmp_path / "resumed"
    train = ["train", *COMMON, "--stages", "2", "--policy", "csp", "--checkpoint-every", "6", "--out", str(stopped)]
    assert main([*train, "--fault", "raise:1:10"]) == 1
    capsys.readouterr()
    other = [a if a != str(W) else str(W + 2) for a in train]
    assert main([*other, "--resume", str(stopped)]) == 2
    assert "few_shot" in capsys.readouterr().err
    assert main([*train, "--resume", str(stopped)]) == 0
    assert json.loads((stopped / "metrics.json").read_text())["config"]["resumed_from"] == 6
    assert main(["verify", str(stopped), str(reference)]) == 0, capsys.readouterr()


@pytest.mark.usefixtures("no_process_left_behind")
@pytest.mark.parametrize("policy,stages", [("csp-bw", 3), ("csp-chain", 2)])
def test_the_other_exact_policies_verify_against_the_reference(reference, tmp_path, capsys, policy, stages):
    """csp-bw (the split backward) on 3 stages and csp-chain: identical to the reference too (sequential, csp-cp and
    csp-plan:plan=3 verified identical by hand on 2026-12-07; bsp differs by design)."""
    run = tmp_path / policy
    assert main(["train", *COMMON, "--stages", str(stages), "--policy", policy, "--out", str(run)]) == 0
    assert main(["verify", str(run), str(reference)]) == 0, capsys.readouterr()


def test_the_run_records_its_split_and_verify_names_it(reference, tmp_path, capsys):
    ident = json.loads((reference / "run.json").read_text())["identity"]
    assert ident["few_shot"] == {"block": "cell0", "copies": 6, "warmup": W}
    assert ident["space"] == "digits-truth" and ident["space_sha256"] == resolve_space(SPACE).digest()
    one = naspipe.reference(SPACE, tmp_path / "one", subnets=N, seed=2, optimizer="momentum")
    assert main(["verify", str(reference), str(one)]) == 1
    assert "few-shot split block 'cell0' (6 copies) after 8 subnets vs none (one-shot)" in capsys.readouterr().out


def test_rank_and_search_score_each_architecture_on_its_own_sub_supernet(reference, capsys):
    """Mutation caught: scoring on copy 0 (the one-shot warm-up's weights) instead of copy a[cell0]."""
    from naspipe.models import evaluate, heldout_batches
    from naspipe.search.run import load_trained_run

    run = load_trained_run(reference, SPACE)
    assert run.space == resolve_space(SPACE) and run.config["few_shot"]["warmup"] == W
    batches = heldout_batches(run.space, 2)
    for a in ((0, 5, 0, 1, 0), (0, 1, 4, 4, 0)):
        own = (0, a[1], a[2] * 6 + a[1], a[3] * 6 + a[1], 0)
        assert evaluate(run.model, a, batches) == evaluate(run.model.inner, own, batches)
    assert main(["rank", str(reference), "--truth", TRUTH]) == 0
    assert "Kendall tau" in capsys.readouterr().out


def test_the_python_api_takes_the_split(tmp_path):
    cfg = naspipe.TrainConfig.create(SPACE, tmp_path / "run", stages=2, subnets=N, few_shot="cell2", few_shot_warmup=3,
                                     policy="csp")
    assert cfg.space.few_shot.label == "cell2" and cfg.sequence[3] == cfg.space.expand(3, cfg.space.collapse(
        cfg.sequence[3]))
    with pytest.raises(naspipe.RunSpecError, match="fixed block"):
        naspipe.reference(SPACE, tmp_path / "ref", subnets=N, few_shot="head")
