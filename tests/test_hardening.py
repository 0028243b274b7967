"""The holes an adversarial run found (issue 13), one test each; exit codes and one-line messages checked.

1. threads are part of a run's identity (reference ``--threads``, verify names the difference, resume refuses);
3. a space whose model cannot be built is refused before any process starts;
4. file errors (unwritable ``--out``, non-UTF-8 or deeply nested files) and a huge ``--subnets`` are one line;
5. ``reference`` refuses a train run's folder (``--overwrite`` clears it first);
6. ``verify`` compares configurations first; duplicate, truncated or empty loss files and a sequence file whose
   digest does not match are errors;
7. ``--policy-option KEY`` without a value, absurd ``delayed:D``, a stopped stage blamed correctly.

(Hole 2, the spawn start method, is ``tests/runtime/test_start_methods.py``.)
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import threading
import time
from pathlib import Path

import psutil
import pytest

from naspipe.cli import main
from naspipe.space import preset
from tests.helpers.processes import descendants

pytestmark = pytest.mark.usefixtures("no_process_left_behind")

TINY = ["--space", "tiny-transformer", "--subnets", "8", "--no-progress"]


def _refused(capsys, argv: list[str], message: str, never: Path | None = None) -> str:
    """``argv`` exits 2 with one line containing ``message``, and (if given) ``never`` is not created."""
    capsys.readouterr()
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert message in err, err
    assert err.count("\n") == 1 and err.startswith("naspipe: error: "), err
    if never is not None:
        assert not never.exists()
    return err


# ---- 1. threads ---------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def two_thread_runs(tmp_path_factory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("threads")
    runs = {"train2": d / "train2", "ref2": d / "ref2", "ref1": d / "ref1"}
    assert main(["train", *TINY, "--stages", "2", "--threads", "2", "--out", str(runs["train2"])]) == 0
    assert main(["reference", *TINY, "--threads", "2", "--out", str(runs["ref2"])]) == 0
    assert main(["reference", *TINY, "--out", str(runs["ref1"])]) == 0
    return runs


def test_a_two_thread_run_verifies_against_a_two_thread_reference_only(two_thread_runs, capsys):
    r = two_thread_runs
    for name in ("train2", "ref2"):
        assert json.loads((r[name] / "run.json").read_text())["identity"]["threads"] == 2
    capsys.readouterr()
    assert main(["verify", str(r["train2"]), str(r["ref2"])]) == 0
    assert capsys.readouterr().out.startswith("identical: 8 subnets")
    assert main(["verify", str(r["train2"]), str(r["ref1"])]) == 1
    out = capsys.readouterr().out
    assert out.startswith("differ: the runs were made with different configurations: thread count 2 vs 1"), out


def test_resume_with_another_thread_count_is_refused(tmp_path, capsys):
    out = tmp_path / "run"
    args = ["train", "--space", "digits-cnn", "--stages", "2", "--subnets", "12", "--no-progress",
            "--checkpoint-every", "4"]
    assert main([*args, "--out", str(out)]) == 0
    before = sorted(p.name for p in out.iterdir())
    _refused(capsys, [*args, "--threads", "2", "--resume", str(out)],
             "was taken with threads 1, but the arguments give threads 2; resume with the arguments of the "
             "interrupted run")
    assert sorted(p.name for p in out.iterdir()) == before


# ---- 3. models that cannot be built -------------------------------------------------------------------------
def _space(tmp_path: Path, name: str, base: str, edit) -> str:  # noqa: ANN001
    d = preset(base).to_dict()
    d["name"] = name
    edit(d)
    p = tmp_path / f"{name}.json"
    p.write_text(json.dumps(d))
    return str(p)


def _set(path: list, value):  # noqa: ANN001, ANN202
    def edit(d: dict) -> None:
        node = d
        for k in path[:-1]:
            node = node[k]
        node[path[-1]] = value
    return edit


def _middle(d: dict) -> None:
    d["blocks"].insert(3, d["blocks"].pop(0))


UNBUILDABLE = [
    ("heads", "tiny-transformer", _set(["blocks", 1, "candidates", 0, "args", "heads"], 3),
     "block 1 ('enc0'), candidate 0 ('attn1', op 'attention', args {\"heads\": 3}): cannot be built: attention: "
     "d_model 32 is not divisible by heads 3"),
    ("unknown-op", "tiny-transformer", _set(["blocks", 1, "candidates", 0, "op"], "lstm"),
     "candidate 0 ('attn1', op 'lstm', args {\"heads\": 1}): cannot be built: candidate 'attn1': transformer op "
     "'lstm' is not one of attention, conv, glu"),
    ("unknown-mlp-op", "sparse-mlp", _set(["blocks", 1, "candidates", 0, "op"], "attention"),
     "cannot be built: candidate 'h256_0': mlp op 'attention' is not 'mlp'"),
    ("zero-kernel", "digits-cnn", _set(["blocks", 1, "candidates", 0, "args", "kernel"], 0),
     "block 1 ('cell0'), candidate 0 ('conv3', op 'conv', args {\"kernel\": 0}): cannot be built"),
    ("zero-vocab", "tiny-transformer", _set(["model", "vocab"], 0), "vocab must be >= 3"),
    ("fixed-middle", "tiny-transformer", _middle,
     "block 0 ('enc0'), candidate 0 ('attn1', op 'attention', args {\"heads\": 1}): fails on a probe batch"),
    ("huge-batch", "digits-cnn", _set(["batch_size"], 10**12),
     "field 'batch_size' 1000000000000 needs about"),
]


@pytest.mark.parametrize("command", ["train", "reference"])
@pytest.mark.parametrize("name,base,edit,message", UNBUILDABLE, ids=[u[0] for u in UNBUILDABLE])
def test_a_space_whose_model_cannot_be_built_is_refused_before_start(tmp_path, capsys, command, name, base, edit,
                                                                     message):
    space = _space(tmp_path, name, base, edit)
    out = tmp_path / "out"
    err = _refused(capsys, [command, "--space", space, "--subnets", "4", "--stages", "2", "--no-progress",
                            "--out", str(out)], message, never=out)
    assert f"space {name!r}" in err
    assert not descendants(psutil.Process())


# ---- 4. file errors and sizes --------------------------------------------------------------------------------
@pytest.mark.parametrize("command", ["train", "reference"])
def test_an_out_that_cannot_be_written_is_one_line(tmp_path, capsys, command):
    (tmp_path / "file").write_text("x")
    _refused(capsys, [command, *TINY, "--out", str(tmp_path / "file" / "run")],
             f"output directory {str(tmp_path / 'file' / 'run')!r} cannot be created: "
             f"{str(tmp_path / 'file')!r} is not a directory")
    if Path("/proc/self").exists():  # a pseudo file system takes no folders, even from root
        _refused(capsys, [command, *TINY, "--out", "/proc/naspipe-run"],
                 "output directory '/proc/naspipe-run' cannot be written: ")


def test_a_sequence_file_that_is_not_utf8_or_nested_too_deeply_is_one_line(tmp_path, capsys):
    bad = tmp_path / "latin.json"
    bad.write_bytes(b'\xff\xfe{"subnets": []}')
    _refused(capsys, ["reference", *TINY, "--sequence", str(bad), "--out", str(tmp_path / "o")],
             f"sequence file {str(bad)!r}: not a UTF-8 text file (byte 0)", never=tmp_path / "o")
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 100_000 + "]" * 100_000)
    _refused(capsys, ["train", *TINY, "--sequence", str(deep), "--out", str(tmp_path / "o")],
             "JSON nested more than 32 levels deep", never=tmp_path / "o")
    _refused(capsys, ["train", "--space", str(deep), "--out", str(tmp_path / "o")],
             "deep.json: JSON nested more than 32 levels deep", never=tmp_path / "o")


@pytest.mark.parametrize("content,message", [
    ('{"subnets": [5]}', "subnet 0 must be a list of choices or a {label: candidate} object, got 5"),
    ('{"subnets": [null]}', "subnet 0 must be a list of choices or a {label: candidate} object, got None"),
    ('{"subnets": [[0, 1]]}', "subnet 0: subnet has 2 choices, space 'tiny-transformer' has 10 blocks"),
])
def test_a_sequence_file_with_malformed_subnets_is_one_line(tmp_path, capsys, content, message):
    p = tmp_path / "seq.json"
    p.write_text(content)
    _refused(capsys, ["train", *TINY, "--sequence", str(p), "--out", str(tmp_path / "o")], f"{p}: {message}",
             never=tmp_path / "o")


@pytest.mark.parametrize("command,processes", [("train", "5 processes"), ("reference", "1 process")])
def test_a_sequence_too_large_for_memory_is_refused_at_once(tmp_path, capsys, monkeypatch, command, processes):
    import naspipe.validate

    monkeypatch.setattr(naspipe.validate, "machine_memory", lambda: 16 * 2**30)  # the same answer on any machine
    t0 = time.monotonic()
    err = _refused(capsys, [command, "--subnets", "100000000", "--out", str(tmp_path / "o"), "--no-progress"],
                   "100000000 subnets would need about", never=tmp_path / "o")
    assert f"to hold the sequence in {processes}, more than 25% of this machine's 16.0 GiB" in err
    assert time.monotonic() - t0 < 30  # it used to build the whole sequence first (minutes, 4 GB)


# ---- 5. run kinds --------------------------------------------------------------------------------------------
def test_reference_refuses_a_train_run_and_overwrite_clears_it(two_thread_runs, tmp_path, capsys):
    run = Path(shutil.copytree(two_thread_runs["train2"], tmp_path / "run"))
    before = {p.name: p.stat().st_mtime_ns for p in run.iterdir()}
    _refused(capsys, ["reference", *TINY, "--out", str(run)],
             f"output directory {str(run)!r} holds a train run (losses.csv); choose another directory or pass "
             "--overwrite (which clears it first)")
    assert {p.name: p.stat().st_mtime_ns for p in run.iterdir()} == before
    assert main(["reference", *TINY, "--out", str(run), "--overwrite"]) == 0
    assert json.loads((run / "run.json").read_text())["kind"] == "reference"
    left = {p.name for p in run.iterdir()}
    assert not left & {"status.json", "trace.json", "events.jsonl", "parts", "weights-stage0.pt"}, left
    # and a train run refuses the reference's folder
    _refused(capsys, ["train", *TINY, "--out", str(run)], "holds a reference run (losses.csv)")


# ---- 6. verify -----------------------------------------------------------------------------------------------
def _copy(src: Path, dst: Path) -> Path:
    return Path(shutil.copytree(src, dst))


@pytest.mark.parametrize("key,value,words", [
    ("seed", 3, "seed 0 vs 3"),
    ("optimizer", "adam", "optimizer 'sgd' vs 'adam'"),
    ("lr", 0.1, "lr 0.2 vs 0.1"),
    ("shared_layers", "serial", "shared-layer policy 'frozen' vs 'serial'"),
    ("sequence_sha256", "f" * 64, "sequence digest"),
])
def test_verify_says_which_configuration_differs(two_thread_runs, tmp_path, capsys, key, value, words):
    a = _copy(two_thread_runs["ref1"], tmp_path / "a")
    b = _copy(two_thread_runs["ref1"], tmp_path / "b")
    data = json.loads((b / "run.json").read_text())
    data["identity"][key] = value
    (b / "run.json").write_text(json.dumps(data))
    capsys.readouterr()
    assert main(["verify", str(a), str(b)]) == 1
    out = capsys.readouterr().out
    assert out.startswith(f"differ: the runs were made with different configurations: {words}"), out
    assert out.rstrip().endswith("their numbers agree nevertheless"), out


@pytest.mark.parametrize("text,message", [
    ("subnet,loss\n0,0x1.0p+0\n1,0x1.0p+0\n0,0x1.8p+0\n", "line 4: subnet 0 appears twice (first on line 2)"),
    ("subnet,loss\n0,0x1.0p+0\n1,0x1.0", "line 3 is truncated (no end of line): '1,0x1.0'"),
    ("subnet,loss\n", "holds no subnet (an empty run proves nothing)"),
    ("subnet,loss\n0,zero\n", "line 2 is not 'subnet,hex-float'"),
    (b"subnet,loss\n0,\xff\n", "not a UTF-8 text file (byte 14)"),
])
def test_verify_refuses_malformed_loss_files(tmp_path, capsys, text, message):
    runs = []
    for name in ("a", "b"):
        d = tmp_path / name
        d.mkdir()
        (d / "params.json").write_text("{}\n")
        runs.append(d)
    (runs[0] / "losses.csv").write_text("subnet,loss\n0,0x1.8p+0\n")
    p = runs[1] / "losses.csv"
    p.write_bytes(text) if isinstance(text, bytes) else p.write_text(text)
    err = _refused(capsys, ["verify", str(runs[0]), str(runs[1])], message)
    assert str(p) in err


def test_verify_refuses_a_params_file_with_a_name_twice(tmp_path, capsys):
    d = tmp_path / "a"
    d.mkdir()
    (d / "losses.csv").write_text("subnet,loss\n0,0x1.8p+0\n")
    (d / "params.json").write_text('{"w": "1", "w": "2"}\n')
    _refused(capsys, ["verify", str(d), str(d)], "params.json: key 'w' appears twice")


def test_a_sequence_file_whose_digest_does_not_match_is_refused(two_thread_runs, tmp_path, capsys):
    data = json.loads((two_thread_runs["train2"] / "sequence.json").read_text())
    data["subnets"][3][1] = (data["subnets"][3][1] + 1) % 6
    p = tmp_path / "seq.json"
    p.write_text(json.dumps(data))
    _refused(capsys, ["reference", *TINY, "--sequence", str(p), "--out", str(tmp_path / "o")],
             "does not match its subnets", never=tmp_path / "o")


# ---- 7. small ones -------------------------------------------------------------------------------------------
def test_a_policy_option_without_a_value_is_refused(tmp_path, capsys):
    _refused(capsys, ["train", *TINY, "--policy", "pipemare", "--policy-option", "t1", "--out", str(tmp_path / "o")],
             "pipemare option 't1' needs a value: t1=VALUE", never=tmp_path / "o")


def test_an_absurd_delay_is_refused(tmp_path, capsys):
    _refused(capsys, ["reference", *TINY, "--shared-layers", "delayed:99999999999", "--out", str(tmp_path / "o")],
             "the delay D must lie in 0..100000", never=tmp_path / "o")


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="stopped processes are seen through /proc")
@pytest.mark.parametrize("victim", [0, 2])
def test_a_stopped_stage_is_named_not_the_peers_that_timed_out(tmp_path, victim):
    from naspipe.runtime import TrainConfig, train

    cfg = TrainConfig.create("digits-cnn", tmp_path / "run", stages=3, subnets=400, jitter_ms=3.0, progress=False,
                             timeout=5.0)
    box: dict = {}

    def target() -> None:
        try:
            train(cfg)
        except BaseException as e:  # noqa: BLE001
            box["error"] = e

    t = threading.Thread(target=target, daemon=True)
    t.start()
    deadline = time.monotonic() + 120
    while not (cfg.out / "events.jsonl").exists() or len((cfg.out / "events.jsonl").read_bytes().splitlines()) < 20:
        assert time.monotonic() < deadline and t.is_alive()
        time.sleep(0.05)
    procs = descendants(psutil.Process())
    assert len(procs) == 3
    pid = procs[victim].pid
    rank = _rank_of(procs, pid)
    os.kill(pid, signal.SIGSTOP)
    try:
        t.join(60)
    finally:
        try:
            os.kill(pid, signal.SIGCONT)
        except ProcessLookupError:
            pass
    assert not t.is_alive()
    msg = str(box["error"])
    assert msg.startswith(f"stage {rank} (rank {rank}, pid {pid}) was stopped (e.g. SIGSTOP) and did not answer"), msg


def _rank_of(procs: list, pid: int) -> int:
    """Stages are started in rank order: the oldest is rank 0."""
    return [p.pid for p in procs].index(pid)


def test_the_python_reference_records_its_identity_too(tmp_path):
    from naspipe.reference import train_reference
    from naspipe.sched.shared import SharedLayers
    from naspipe.sequence import UniformStream

    space = preset("digits-cnn")
    stream = UniformStream(space, 0, 3)
    train_reference(space, stream, 0, SharedLayers(), threads=2).save(tmp_path / "r")
    data = json.loads((tmp_path / "r" / "run.json").read_text())
    assert data["kind"] == "reference"
    ident = data["identity"]
    assert ident["threads"] == 2 and ident["subnets"] == 3 and ident["sequence_sha256"] == stream.digest()
