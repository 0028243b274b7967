"""Data-parallel replicas (``--replicas R``): shards, the fixed-order combination, and runs equal to the reference."""

from __future__ import annotations

import hashlib

import pytest
import torch

from naspipe.cli import main
from naspipe.lifecycle.kernels import cpu_name
from naspipe.models.shards import combine, shard, shard_batch
from naspipe.oracle.sequential_trainer import train_reference
from naspipe.sequences.sequence import UniformStream
from naspipe.spaces.shared import SharedLayers
from naspipe.spaces.space import resolve_space
from tests.helpers.per_cpu import PORTABLE, recorded

# params.json digests of ``naspipe reference --space S --subnets 6 --seed 3 --kernels K`` as before replicas existed
# (cb85d0f^ under the same kernels' environment gives these): ``--replicas 1`` (the default) must not change a bit.
# Per kernels kind (tests/helpers/per_cpu.py).
R1_PARAMS = {
    PORTABLE: {
        "digits-cnn": "7c5c78bd448168de9892476925534d1f8752d40c767175160faeac0acae56424",
        "tiny-transformer": "9e8279d4f8b7bfeea9dcd454a9f061002757e175d817798864a54ec1b18c600b",
    },
    "avx2 on GenuineIntel": {
        "digits-cnn": "eba5b48177dab5f74bf737019101ba187896ab1455569553558cf61f061d3388",
        "tiny-transformer": "a7a8f1057e720e314569aa2cf70689bae35e7e1a2ae12a798fb782dda08dee80",
    },
    "avx2 on AuthenticAMD": {
        "digits-cnn": "e2a4234f04621dbcf73e9d90fc9e5b0ccd0fbee580f4fc51eb4c93a0f88bcb21",
        "tiny-transformer": "5005b675a68acf6989c28a1ab21d93c49753462fefc0b851d28b4c4e8dc051f3",
    },
}


def test_shards_are_fixed_row_blocks_and_the_transformer_input_splits_on_its_batch_dim():
    t = torch.arange(12).reshape(6, 2)
    assert shard(t, 1, 3).tolist() == [[4, 5], [6, 7]]
    assert shard(t, 0, 1) is t
    with pytest.raises(ValueError, match="equal shards"):
        shard(t, 0, 4)
    space = resolve_space("tiny-transformer")
    x, y = torch.zeros(2, 16, 5), torch.zeros(16, 5)
    xs, ys = shard_batch(space, x, y, 1, 2)
    assert xs.shape == (2, 8, 5) and ys.shape == (8, 5)


def test_combine_sums_in_replica_order_then_divides():
    a, b, c = (torch.tensor([v], dtype=torch.float32) for v in (1e8, -1e8, 1.0))
    assert combine([a, b, c]).item() == pytest.approx(1 / 3)  # (a + b) + c
    assert combine([a, c, b]).item() == 0.0  # (a + c) + b: c is lost; the order is part of the result
    assert combine([a]) is not a


@pytest.mark.parametrize("kind", [PORTABLE, "avx2"])
@pytest.mark.parametrize("name", sorted(R1_PARAMS[PORTABLE]))
def test_one_replica_changes_no_digest(pinned_runs, name, kind):
    """``naspipe reference --space S --subnets 6 --seed 3 --kernels K`` (tests/helpers/runs.py's ``pinned_runs``)."""
    digest = hashlib.sha256((pinned_runs(kind) / f"{name}-r1" / "params.json").read_bytes()).hexdigest()
    assert digest == recorded(R1_PARAMS, kind)[name], f"{kind} on {cpu_name()}"


def test_reference_replicas_split_the_batch():
    space = resolve_space("digits-cnn")

    def run(r: int) -> dict:
        res = train_reference(space, UniformStream(space, 0, 3), 0, SharedLayers(), replicas=r)
        return {n: p.detach().clone() for n, p in res.model.global_named_parameters().items()}

    one, two = run(1), run(2)
    assert any(not torch.equal(one[n], two[n]) for n in one)  # other (sharded) numbers ...
    assert all(torch.allclose(one[n], two[n], atol=1e-5) for n in one)  # ... of the same mathematics
    with pytest.raises(ValueError, match="must divide the batch size"):
        train_reference(space, UniformStream(space, 0, 1), 0, SharedLayers(), replicas=3)


@pytest.mark.usefixtures("no_process_left_behind")
@pytest.mark.parametrize("name,policy,shared", [("digits-cnn", "csp", "frozen"),
                                                ("digits-cnn", "csp-cp", "serial"),
                                                ("tiny-transformer", "csp-bw", "delayed:2")])
def test_two_stages_by_two_replicas_equal_the_reference(tmp_path, name, policy, shared):
    common = ["--space", name, "--subnets", "6", "--seed", "2", "--shared-layers", shared]
    ref, run = tmp_path / "ref", tmp_path / "run"
    assert main(["reference", *common, "--replicas", "2", "--out", str(ref), "--no-progress"]) == 0
    assert main(["train", *common, "--stages", "2", "--replicas", "2", "--policy", policy, "--jitter-ms", "2",
                 "--out", str(run), "--no-progress", "--timeout", "60"]) == 0
    assert main(["verify", str(run), str(ref)]) == 0
    one = tmp_path / "ref1"
    assert main(["reference", *common, "--out", str(one), "--no-progress"]) == 0
    assert main(["verify", str(run), str(one)]) == 1  # the identity (and the numbers) differ


@pytest.mark.usefixtures("no_process_left_behind")
@pytest.mark.parametrize("args,message", [
    (["--replicas", "3"], "must divide the batch size 32"),
    (["--replicas", "0"], "--replicas must be"),
    (["--replicas", "2", "--policy", "asp"], "exact policies"),
    (["--replicas", "2", "--policy", "bsp:2"], "exact policies"),
    (["--replicas", "2", "--sampler", "evolution:8"], "fixed sequence"),
])
def test_bad_replicas_are_one_line_exit_2(tmp_path, capsys, args, message):
    rc = main(["train", "--space", "digits-cnn", "--stages", "2", "--subnets", "4", "--out", str(tmp_path / "o"),
               "--no-progress", *args])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and err.startswith("naspipe: error:") and "\n" not in err and message in err, err
    assert not (tmp_path / "o").exists()


def test_a_follower_starts_only_the_write_its_leader_announced():
    from naspipe.sched.ordered import next_task_writing
    from naspipe.sched.policies import CSPScheduler, StageSpec, make_scheduler
    from naspipe.sched.tasks import B, F
    from naspipe.sequences.sequence import ReplayStream
    from naspipe.spaces.space import Block, Candidate, SearchSpace

    two = tuple(Candidate(f"c{i}", 1.0, 1.0) for i in range(2))
    space = SearchSpace("two-by-two", (Block("b0", two), Block("b1", two)))
    s = make_scheduler("csp-cp", StageSpec(stage=0, stages=2, choice_blocks=(0,)),
                       ReplayStream(space, [(0, 0), (1, 1)]), 10)
    assert next_task_writing(s, None) == F(0, 0)  # forwards stay free
    s.on_finish(F(0, 0))
    s.on_gradient(0)
    assert s.clone().next_task() == F(1, 0)  # csp-cp on its own would run the forward first...
    assert next_task_writing(s, 0) == B(0, 0)  # ...but the announced write goes first: its leader waits
    s.on_finish(B(0, 0))
    assert next_task_writing(s, None) == F(1, 0)
    s.on_finish(F(1, 0))
    s = CSPScheduler(StageSpec(stage=0, stages=2, choice_blocks=(0,)), ReplayStream(space, [(0, 0), (1, 1)]),
                     window=10)
    for j in (0, 1):
        assert next_task_writing(s, None) == F(j, 0)
        s.on_finish(F(j, 0))
    s.on_gradient(1)
    s.on_gradient(0)
    assert next_task_writing(s, None) is None  # nothing announced: no write starts
    assert next_task_writing(s, 2) is None  # an announced write not ready here: B(0), B(1) wait
    assert next_task_writing(s, 1) == B(1, 0)  # the leader wrote 1 first: so does the follower
    s.on_finish(B(1, 0))
    assert next_task_writing(s, 0) == B(0, 0)
    s.on_finish(B(0, 0))
    assert s.finished


@pytest.mark.usefixtures("no_process_left_behind")
def test_replicas_checkpoint_die_and_resume_to_the_reference(tmp_path, capsys):
    common = ["--space", "digits-cnn", "--subnets", "8", "--seed", "1", "--stages", "2", "--replicas", "2",
              "--checkpoint-every", "4", "--timeout", "60", "--no-progress"]
    run, ref = tmp_path / "run", tmp_path / "ref"
    assert main(["train", *common, "--fault", "kill:1:6", "--out", str(run)]) == 1
    err = capsys.readouterr().err
    assert "stage 1 replica" in err and f"--resume {run}" in err, err
    assert main(["train", *common, "--resume", str(run)]) == 0
    assert main(["reference", "--space", "digits-cnn", "--subnets", "8", "--seed", "1", "--replicas", "2",
                 "--out", str(ref), "--no-progress"]) == 0
    assert main(["verify", str(run), str(ref)]) == 0


@pytest.mark.usefixtures("no_process_left_behind")
def test_native_exchange_repeats_itself_and_is_labelled_not_comparable(tmp_path, capsys):
    common = ["--space", "digits-cnn", "--subnets", "6", "--seed", "2"]
    train = [*common, "--stages", "2", "--replicas", "2", "--replica-exchange", "native", "--no-progress"]
    a, b, ref = tmp_path / "a", tmp_path / "b", tmp_path / "ref"
    assert main(["train", *train, "--out", str(a)]) == 0
    assert main(["train", *train, "--jitter-ms", "2", "--out", str(b)]) == 0
    assert main(["verify", str(a), str(b)]) == 0  # reproducible run to run
    assert main(["reference", *common, "--replicas", "2", "--out", str(ref), "--no-progress"]) == 0
    capsys.readouterr()
    assert main(["verify", str(a), str(ref)]) == 1
    assert "gradient exchange 'native' vs 'exact'" in capsys.readouterr().out
    assert main(["train", *common, "--replica-exchange", "native", "--out", str(tmp_path / "c")]) == 2
    assert "only applies with replicas > 1" in capsys.readouterr().err
