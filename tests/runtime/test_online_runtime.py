"""Run-time generated subnet streams in the multi-process runtime (``naspipe train --sampler evolution:LAG``).

Acceptance: a CSP run whose sequence an evolutionary sampler generates from the training losses, on 2 and 4
stages (one with jitter), is bit-identical to ``naspipe reference --sampler evolution:LAG`` with the same
seed, and realizes the very sequence the reference wrote to ``sequence.json``. Every stage generates the
sequence itself from losses that travel bit-exactly in the gradient headers (``naspipe.runtime.processes.online``).
"""

from __future__ import annotations

import json
import math
import struct

import pytest
import torch

from naspipe.cli import main
from naspipe.runfolder.results import verify
from naspipe.runtime import ConfigError, TrainConfig, train
from naspipe.runtime.processes.online import LossBook
from naspipe.runtime.transport.comm import GRADIENT, decode_header, decode_loss, encode_header
from naspipe.sequences.samplers import make_stream
from naspipe.sequences.sequence import UniformStream
from naspipe.spaces.space import preset

pytestmark = pytest.mark.usefixtures("no_process_left_behind")

SPACE, SEED, N, SAMPLER = "digits-cnn", 5, 56, "evolution:8"  # warm-up 8 + 32: 16 subnets evolved


@pytest.fixture(scope="module")
def ref(tmp_path_factory):
    out = tmp_path_factory.mktemp("online") / "ref"
    assert main(["reference", "--space", SPACE, "--subnets", str(N), "--seed", str(SEED), "--sampler", SAMPLER,
                 "--out", str(out), "--no-progress"]) == 0
    return out


def _check_same_run(run, ref):
    ok, msg = verify(run, ref)
    assert ok, msg
    seq = json.loads((run / "sequence.json").read_text())
    want = json.loads((ref / "sequence.json").read_text())
    assert seq == want
    m = json.loads((run / "metrics.json").read_text())
    assert m["config"]["sampler"] == SAMPLER and m["config"]["sequence_sha256"] == want["sha256"]
    # the sequence really depends on the losses: it leaves the uniform one after the warm-up
    uniform = UniformStream(preset(SPACE), SEED, N)
    assert [list(uniform[j]) for j in range(40)] == seq["subnets"][:40]
    assert sum(list(uniform[j]) != seq["subnets"][j] for j in range(40, N)) >= 8
    # every stage learned every loss
    for p in (run / "parts").glob("stage*.json"):
        assert json.loads(p.read_text())["losses_learned"] == N


def test_csp_with_an_evolution_stream_matches_the_reference_on_2_stages(tmp_path, ref):
    cfg = TrainConfig.create(SPACE, tmp_path / "run", stages=2, subnets=N, seed=SEED, sampler=SAMPLER,
                             progress=False, timeout=60)
    assert cfg.online and cfg.n == N and cfg.sequence == ()
    assert cfg.policy == "csp-plan:plan=0,eps=0.2"  # the default: the sequence is unknown up front, plan 0
    train(cfg)
    _check_same_run(cfg.out, ref)


def test_csp_with_an_evolution_stream_and_jitter_matches_the_reference_on_4_stages(tmp_path, ref):
    run = tmp_path / "run"
    assert main(["train", "--space", SPACE, "--stages", "4", "--subnets", str(N), "--seed", str(SEED),
                 "--sampler", SAMPLER, "--jitter-ms", "1", "--timeout", "60", "--out", str(run),
                 "--no-progress"]) == 0
    _check_same_run(run, ref)
    assert main(["verify", str(run), str(ref)]) == 0


# ---- pieces -------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("loss", [2.302585092994046, -0.0, 5e-324, math.inf, 1.0 / 3.0])
def test_a_gradient_header_carries_the_loss_bit_exactly(loss):
    for tensor in (None, torch.zeros(2, 3)):
        h = encode_header(GRADIENT, 7, tensor, loss=loss)
        kind, j, _, _, shape = decode_header(h)
        assert (kind, j) == (GRADIENT, 7) and shape == (() if tensor is None else (2, 3))
        assert struct.pack("<d", decode_loss(h)) == struct.pack("<d", loss)
    nan = decode_loss(encode_header(GRADIENT, 1, None, loss=math.nan))
    assert math.isnan(nan)
    assert decode_loss(encode_header(GRADIENT, 1, None)) is None


def test_the_loss_book_reports_to_the_stream_and_readmits():
    sp = preset(SPACE)
    stream = make_stream(sp, 0, 20, "evolution:3")

    class Sched:
        n, calls = 20, 0

        def on_results(self):
            Sched.calls += 1

    book = LossBook(stream, Sched())
    assert stream.available() == 3 and "loss of subnet 0" in book.waiting()
    book.learn(0, 1.5)
    assert stream.available() == 4 and Sched.calls == 1
    assert book.take(0) == 1.5 and book.take(0) is None
    with pytest.raises(RuntimeError, match="without its loss"):
        book.learn(1, None)
    plain = LossBook(UniformStream(sp, 0, 5), Sched())
    plain.learn(0, None)  # a replayed stream needs no losses
    plain.learn(1, 2.0)
    assert plain.take(1) == 2.0 and plain.waiting() == ""


def test_bad_sampler_configurations_are_refused(tmp_path, capsys):
    with pytest.raises(ConfigError, match="unknown sampler"):
        TrainConfig.create(SPACE, tmp_path / "a", stages=2, subnets=8, sampler="annealing")
    with pytest.raises(ConfigError, match="cannot be combined"):
        TrainConfig.create(SPACE, tmp_path / "a", stages=2, subnets=8, sampler=SAMPLER,
                           sequence=[UniformStream(preset(SPACE), 0, 8)[j] for j in range(8)])
    with pytest.raises(ConfigError, match="lag must be at least"):
        TrainConfig.create(SPACE, tmp_path / "a", stages=2, subnets=8, sampler="evolution:2", policy="bsp:4")
    common = ["--space", SPACE, "--subnets", "8", "--out", str(tmp_path / "b"), "--no-progress"]
    assert main(["train", *common, "--sampler", "evolution:0"]) == 2
    seq = tmp_path / "seq.json"
    seq.write_text(json.dumps({"subnets": [[0] * preset(SPACE).num_blocks] * 8}))
    assert main(["train", *common, "--sampler", SAMPLER, "--sequence", str(seq)]) == 2
    assert not (tmp_path / "b").exists()
    # the simulator has no losses: it refuses a run-time generated stream (fair and spread it simulates)
    assert main(["simulate", "--space", SPACE, "--sampler", SAMPLER]) == 2
    assert "needs a sequence fixed up front" in capsys.readouterr().err
