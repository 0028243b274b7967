"""Everything that works for presets works for a user supernet (``tests/helpers/user_supernets.py:good``): every
policy, the shared-layer policies, context switching, checkpoints and resume, run-time generated sequences.

In-process ``naspipe`` calls (the session's fork server has ``tests/`` on its path, as a user's PYTHONPATH).
"""

from __future__ import annotations

import json

import pytest

from naspipe.cli import main
from naspipe.sched.policies import POLICIES

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("no_process_left_behind")]

SPEC = "user_supernets:good"
REPRODUCIBLE = ("sequential", "csp", "csp-chain", "csp-bw")


def _common(n: int = 10, *extra: str) -> list[str]:
    return ["--space", SPEC, "--subnets", str(n), "--seed", "3", "--no-progress", *extra]


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> dict:
    refs = {}
    root = tmp_path_factory.mktemp("refs")
    for shared in ("frozen", "serial", "delayed:2"):
        out = root / shared.replace(":", "_")
        assert main(["reference", *_common(10, "--shared-layers", shared), "--out", str(out)]) == 0
        refs[shared] = out
    return refs


@pytest.mark.parametrize("policy", sorted(POLICIES))
def test_every_policy_trains_a_user_supernet(tmp_path, reference, policy):
    out = tmp_path / "run"
    assert main(["train", *_common(), "--policy", policy, "--stages", "2", "--out", str(out)]) == 0
    rc = main(["verify", str(out), str(reference["serial"])])
    if policy in REPRODUCIBLE:
        assert rc == 0


@pytest.mark.parametrize("shared", ["serial", "delayed:2"])
def test_shared_layer_policies_match_their_reference(tmp_path, reference, shared):
    out = tmp_path / "run"
    assert main(["train", *_common(10, "--shared-layers", shared), "--stages", "3", "--jitter-ms", "1",
                 "--out", str(out)]) == 0
    assert main(["verify", str(out), str(reference[shared])]) == 0


def test_context_switching_checkpoints_and_resume(tmp_path, reference):
    mem = tmp_path / "mem"
    assert main(["train", *_common(), "--stages", "2", "--device-memory", "60%", "--out", str(mem)]) == 0
    assert main(["verify", str(mem), str(reference["serial"])]) == 0
    run = tmp_path / "run"
    assert main(["train", *_common(), "--stages", "2", "--checkpoint-every", "4", "--fault", "kill:1:7",
                 "--out", str(run)]) == 1
    assert main(["train", *_common(), "--stages", "2", "--checkpoint-every", "4", "--resume", str(run)]) == 0
    assert main(["verify", str(run), str(reference["serial"])]) == 0


def test_run_time_generated_sequences(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    assert main(["train", *_common(12, "--sampler", "evolution:4"), "--stages", "2", "--out", str(a)]) == 0
    assert main(["reference", *_common(12, "--sampler", "evolution:4"), "--out", str(b)]) == 0
    assert main(["verify", str(a), str(b)]) == 0
    # the sequence file speaks label dicts, and replays
    seq = json.loads((a / "sequence.json").read_text())["subnets"]
    assert len(seq) == 12 and all(set(s) == {"b0", "b1", "b2", "b3"} for s in seq)
    c = tmp_path / "c"
    assert main(["reference", *_common(12, "--sequence", str(a / "sequence.json")), "--out", str(c)]) == 0
    assert main(["verify", str(a), str(c)]) == 0
