"""``naspipe train`` and ``python -m naspipe.torchrun`` (torchrun): outputs, verify, bad input, failures."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from naspipe.cli import main
from naspipe.runtime.transport.ports import free_port
from naspipe.sched.trace import Trace
from tests.helpers.processes import leftovers

pytestmark = pytest.mark.usefixtures("no_process_left_behind")

BIN = Path(sys.executable).parent
ROOT = Path(__file__).resolve().parents[2]


def test_train_writes_a_run_that_verifies_against_the_reference(tmp_path):
    """The acceptance path: naspipe train, naspipe reference, naspipe verify."""
    run, ref = tmp_path / "run", tmp_path / "ref"
    common = ["--space", "tiny-transformer", "--subnets", "16", "--seed", "3", "--shared-layers", "delayed:1"]
    p = subprocess.run([str(BIN / "naspipe"), "train", *common, "--stages", "2", "--jitter-ms", "1",
                        "--out", str(run)], capture_output=True, text=True, timeout=240, cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    # the default order, csp-plan, with the plan chosen before the processes start, recorded with the run
    planned = re.search(r"(csp-plan:plan=\d+,eps=0\.2) on tiny-transformer, 2 stages, trained 16 subnets, "
                        r"shared layers "
                        r"delayed:1", p.stdout)
    assert planned, p.stdout
    assert "subnet" in p.stderr  # the progress bar
    for f in ("losses.csv", "params.json", "trace.json", "metrics.json", "events.jsonl", "status.json"):
        assert (run / f).exists(), f
    assert (run / "losses.csv").read_text().splitlines()[0] == "subnet,loss"
    m = json.loads((run / "metrics.json").read_text())
    for k in ("subnets_per_s", "samples_per_s", "utilization", "wall_s", "overhead_share", "config"):
        assert m[k] is not None, k
    assert m["config"]["shared_layers"] == "delayed:1" and m["config"]["jitter_ms"] == 1.0
    assert m["config"]["policy"] == planned.group(1)
    assert Trace.load(run / "trace.json").meta["driver"] == "runtime"
    assert main(["reference", *common, "--out", str(ref), "--no-progress"]) == 0
    assert main(["verify", str(run), str(ref)]) == 0
    # the same directory again is refused, with --overwrite it is replaced
    assert main(["train", *common, "--out", str(run), "--no-progress"]) == 2
    assert main(["train", *common, "--stages", "3", "--out", str(run), "--no-progress", "--overwrite"]) == 0
    assert main(["verify", str(run), str(ref)]) == 0
    assert not leftovers()


def _bad_space(tmp_path: Path) -> str:
    p = tmp_path / "bad.json"
    p.write_text('{"name": "x", "blocks": [')
    return str(p)


BAD = [  # (arguments, part of the one-line message)
    (["--stages", "0"], "--stages must be >= 1"),
    (["--stages", "11"], "cannot split 10 blocks"),
    (["--window", "0"], "--window must be >= 1"),
    (["--jitter-ms", "-1"], "--jitter-ms must be a finite number >= 0"),
    (["--optimizer", "lbfgs"], "invalid choice: 'lbfgs'"),
    (["--lr", "0"], "--lr must be a finite number > 0"),
    (["--shared-layers", "sometimes"], "unknown shared-layer policy"),
    (["--shared-layers", "delayed:x"], "use delayed:D with a whole number D >= 0"),
    (["--policy", "gpipe"], "unknown policy 'gpipe'"),
    (["--policy", "bsp", "--shared-layers", "delayed:2"], "own synchronisation"),
    (["--space", "naspipe-k48"], "model kind 'cost-only'"),
    (["--space", "no-such-space"], "unknown space 'no-such-space'"),
    (["--threads", "0"], "--threads must be a whole number from 1 to"),
    (["--timeout", "0"], "--timeout must be a finite number of seconds > 0"),
    (["--subnets", "0"], "--subnets must be >= 1"),
    (["--device", "tpu"], "invalid choice: 'tpu'"),
    (["--micro-batches", "2"], "policy 'csp-plan' takes no option"),
    (["--checkpoint-every", "0"], "--checkpoint-every must be >= 1"),
    (["--policy", "bsp:4", "--checkpoint-every", "10"], "multiple of its 4 micro-batches"),
]


@pytest.mark.parametrize("args,message", BAD)
def test_bad_input_is_one_line_exit_2_and_starts_nothing(tmp_path, capsys, args, message):
    rc = main(["train", "--out", str(tmp_path / "out"), "--no-progress", *args])
    err = capsys.readouterr().err.strip()
    assert rc == 2
    assert err.startswith("naspipe: error:") and "\n" not in err and message in err, err
    assert not (tmp_path / "out").exists()
    assert not leftovers()


def _refused(capsys, argv: list[str], message: str, never: Path | None = None) -> str:
    """``naspipe ARGV`` exits 2 with one line holding ``message``, creates ``never`` not, leaves no process."""
    rc = main(argv)
    err = capsys.readouterr().err.strip()
    assert rc == 2, err
    assert err.startswith("naspipe: error:") and "\n" not in err and message in err, err
    if never is not None:
        assert not never.exists()
    assert not leftovers()
    return err


def test_malformed_space_json_is_refused(tmp_path, capsys):
    _refused(capsys, ["train", "--space", _bad_space(tmp_path), "--out", str(tmp_path / "o")], "not valid JSON",
             tmp_path / "o")


def test_schema_violating_space_json_is_refused(tmp_path, capsys):
    p = tmp_path / "schema.json"
    p.write_text(json.dumps({"name": "x", "blocks": [{"name": "b0", "candidates": "none"}]}))
    _refused(capsys, ["train", "--space", str(p), "--out", str(tmp_path / "o")], str(p.name), tmp_path / "o")


def test_a_port_in_use_is_refused(tmp_path, capsys):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        _refused(capsys, ["train", "--subnets", "4", "--port", str(port), "--out", str(tmp_path / "o"),
                          "--no-progress"], f"port {port} on 127.0.0.1 is already in use", tmp_path / "o")


def test_an_output_directory_holding_another_run_is_refused(tmp_path, capsys):
    out = tmp_path / "o"
    out.mkdir()
    (out / "losses.csv").write_text("subnet,loss\n")
    _refused(capsys, ["train", "--subnets", "4", "--out", str(out), "--no-progress"],
             "holds losses.csv, which no naspipe run wrote there (no valid run.json); choose another directory or "
             "pass --overwrite")
    assert sorted(p.name for p in out.iterdir()) == ["losses.csv"]


def test_a_run_needs_an_output_directory(tmp_path, capsys):
    _refused(capsys, ["train", "--subnets", "4", "--no-progress"], "--out is required")


@pytest.mark.parametrize("budget,message", [
    ("1KB", "is smaller than one subnet's layers"),
    ("-5", "must not be negative"),
])
def test_a_memory_budget_below_one_subnet_or_negative_is_refused(capsys, budget, message):
    """``naspipe train`` has no memory budget; ``naspipe simulate --device-memory`` has."""
    _refused(capsys, ["simulate", "--space", "tiny-transformer", "--stages", "2", "--subnets", "8",
                      "--device-memory", budget], message)


# ---- checkpoints that cannot be resumed -----------------------------------------------------------------
CKPT = ["--space", "digits-cnn", "--stages", "2", "--subnets", "12", "--seed", "5", "--no-progress"]


@pytest.fixture(scope="module")
def checkpointed(tmp_path_factory) -> Path:
    """A finished run with checkpoints every 4 subnets (the newest complete one: at 8)."""
    out = tmp_path_factory.mktemp("ckpt") / "run"
    assert main(["train", *CKPT, "--checkpoint-every", "4", "--out", str(out)]) == 0
    assert json.loads((out / "checkpoint" / "complete.json").read_text())["position"] == 8
    return out


def _copy(src: Path, tmp_path: Path) -> Path:
    import shutil

    return Path(shutil.copytree(src, tmp_path / "run"))


def test_resume_from_a_path_that_does_not_exist_is_refused(tmp_path, capsys):
    _refused(capsys, ["train", *CKPT, "--resume", str(tmp_path / "nope")], "no checkpoint to resume: ")


def test_resume_from_a_run_without_checkpoints_is_refused(tmp_path, capsys):
    (tmp_path / "plain").mkdir()
    (tmp_path / "plain" / "status.json").write_text("{}")
    _refused(capsys, ["train", *CKPT, "--resume", str(tmp_path / "plain"), "--out", str(tmp_path / "o")],
             "no checkpoint to resume in", tmp_path / "o")


def test_resume_without_a_complete_checkpoint_is_refused(tmp_path, capsys, checkpointed):
    run = _copy(checkpointed, tmp_path)
    (run / "checkpoint" / "c000000008" / "stage1.json").unlink()  # stage 1 never finished saving
    (run / "checkpoint" / "complete.json").unlink()
    _refused(capsys, ["train", *CKPT, "--resume", str(run)], "no complete checkpoint in")


@pytest.mark.parametrize("damage", ["truncated", "garbage", "sidecar"])
def test_resume_from_a_corrupted_checkpoint_is_refused(tmp_path, capsys, checkpointed, damage):
    run = _copy(checkpointed, tmp_path)
    d = run / "checkpoint" / "c000000008"
    pt = d / "stage1.pt"
    if damage == "truncated":
        pt.write_bytes(pt.read_bytes()[:100])
        what = str(pt)
    elif damage == "garbage":
        pt.write_bytes(b"\x00garbage" * (pt.stat().st_size // 8 + 1))
        what = str(pt)
    else:
        (d / "stage1.json").write_text("{not json")
        what = str(d / "stage1.json")
    _refused(capsys, ["train", *CKPT, "--resume", str(run), "--out", str(tmp_path / "o")],
             f"checkpoint file {what!r} is corrupted", tmp_path / "o")


@pytest.mark.parametrize("change,message", [
    (["--seed", "6"], "was taken with seed 5, but the arguments give seed 6"),
    (["--space", "tiny-transformer"], "was taken with space 'digits-cnn', but the arguments give space "
                                      "'tiny-transformer'"),
    (["--stages", "3"], "was taken with stages 2, but the arguments give stages 3"),
    (["--optimizer", "adam"], "was taken with optimizer 'sgd', but the arguments give optimizer 'adam'"),
    (["--subnets", "16"], "was taken with subnets 12, but the arguments give subnets 16"),
    # a checkpoint of the default (csp-plan with its chosen plan) and another order, e.g. the old default
    (["--policy", "csp-cp"], "was taken with policy 'csp-plan:plan="),
    (["--policy", "csp-plan:plan=100000"], "but the arguments give policy 'csp-plan:plan=100000'"),
])
def test_resume_with_other_arguments_is_refused(tmp_path, capsys, checkpointed, change, message):
    # a later option overrides an earlier one (argparse)
    _refused(capsys, ["train", *CKPT, *change, "--resume", str(checkpointed), "--out", str(tmp_path / "o")], message,
             tmp_path / "o")


def test_a_second_ctrl_c_after_the_status_is_written_keeps_the_resume_hint(tmp_path, capsys, monkeypatch):
    """The first Ctrl-C's exception names the checkpoint; a second one that lands while it unwinds (after
    ``status.json``, before the command ignores signals) is a fresh KeyboardInterrupt: the hint stays."""
    from naspipe.runtime.processes import launcher

    def interrupted_twice(cfg):
        first = KeyboardInterrupt()
        first.checkpoint = 10
        try:
            raise first
        finally:
            raise KeyboardInterrupt  # (the second Ctrl-C, in a cleanup's finally)

    monkeypatch.setattr(launcher, "train", interrupted_twice)
    out = tmp_path / "o"
    assert main(["train", *CKPT, "--checkpoint-every", "5", "--out", str(out)]) == 130
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert last == ("naspipe: interrupted; the last complete checkpoint is at subnet 10: to continue, run "
                    f"naspipe train {' '.join(CKPT)} --checkpoint-every 5 --out {out} --resume {out}"), last


def test_a_crashed_stage_exits_1_naming_the_rank(tmp_path, capsys):
    rc = main(["train", "--space", "digits-cnn", "--stages", "3", "--subnets", "20", "--out", str(tmp_path / "o"),
               "--no-progress", "--fault", "raise:2:4"])
    err = capsys.readouterr().err.strip()
    assert rc == 1
    assert err.startswith("naspipe: error: stage 2 (rank 2") and "injected fault at" in err, err
    assert json.loads((tmp_path / "o" / "status.json").read_text())["complete"] is False
    assert not leftovers()


def test_torchrun_entry_point_matches_the_reference(tmp_path):
    run, ref = tmp_path / "run", tmp_path / "ref"
    port = free_port()  # (below the ephemeral range: naspipe.runtime.transport.ports)
    common = ["--space", "digits-cnn", "--subnets", "12", "--shared-layers", "serial"]
    p = subprocess.run([str(BIN / "torchrun"), "--nproc-per-node", "2", "--master-addr", "127.0.0.1",
                        "--master-port", str(port), "-m", "naspipe.torchrun", *common, "--out", str(run),
                        "--checkpoint-every", "4", "--no-progress"], capture_output=True, text=True, timeout=240,
                       cwd=ROOT)
    assert p.returncode == 0, p.stderr[-3000:]
    assert re.search(r"csp-plan:plan=\d+,eps=0\.2 on digits-cnn, 2 stages, trained 12 subnets", p.stdout), p.stdout
    assert not (run / ".naspipe.lock").exists()  # rank 0 held the folder's lock and released it on exit
    assert main(["reference", *common, "--out", str(ref), "--no-progress"]) == 0
    assert main(["verify", str(run), str(ref)]) == 0
    # every rank saved its checkpoints and rank 0 marked them complete; the single-machine launcher resumes one
    assert json.loads((run / "checkpoint" / "complete.json").read_text())["position"] == 8
    assert main(["train", *common, "--stages", "2", "--resume", str(run), "--out", str(tmp_path / "resumed"),
                 "--no-progress"]) == 0
    assert main(["verify", str(tmp_path / "resumed"), str(ref)]) == 0
    assert not leftovers()


@pytest.mark.parametrize(("argv", "world", "stages", "replicas"), [
    ([], 3, 3, 1), (["--replicas", "2"], 4, 2, 2), (["--replicas", "4"], 8, 2, 4), (["--stages", "1"], 1, 1, 1)])
def test_torchrun_ranks_take_their_stages_from_the_world_over_the_replicas(tmp_path, argv, world, stages, replicas):
    """Without ``--stages``, a torchrun rank runs world size / ``--replicas`` stages."""
    from naspipe.cli.cmd_train import world_config

    cfg, _ = world_config(["--space", "tiny-transformer", "--subnets", "6", "--policy", "csp", *argv,
                           "--out", str(tmp_path / "run")], world)
    assert (cfg.stages, cfg.replicas) == (stages, replicas)


@pytest.mark.parametrize("module", ["naspipe.torchrun"])
def test_torchrun_entry_outside_torchrun_is_one_line_and_exit_2(module, tmp_path):
    # the entry point refuses to run without torchrun's environment (its old name, naspipe.torchrun, is gone)
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
    p = subprocess.run([sys.executable, "-m", module, "--out", str(tmp_path / "run")], capture_output=True,
                       text=True, timeout=120, env=env)
    assert p.returncode == 2
    assert p.stderr.strip().splitlines() == ["naspipe: error: environment variable RANK is not set to a whole "
                                             "number: run under torchrun"]
    assert not (tmp_path / "run").exists()


def test_a_diverged_run_is_kept_and_said_in_one_line(tmp_path, capsys):
    """An lr that blows the losses up (NaN from subnet 6 on) is no refusal, but neither command stays silent."""
    common = ["--space", "digits-cnn", "--subnets", "12", "--lr", "1e30", "--no-progress"]
    assert main(["reference", *common, "--out", str(tmp_path / "ref")]) == 0
    err = capsys.readouterr().err
    assert "warning: the training loss is NaN or infinite at 6 of 12 subnets, first at subnet 6" in err, err
    assert main(["train", *common, "--stages", "2", "--out", str(tmp_path / "run")]) == 0
    assert "first at subnet 6: the run diverged" in capsys.readouterr().err
    assert main(["reference", "--space", "digits-cnn", "--subnets", "6", "--no-progress",
                 "--out", str(tmp_path / "fine")]) == 0
    assert "warning" not in capsys.readouterr().err
