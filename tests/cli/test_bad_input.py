"""Bad input to ``train`` and ``reference`` is one line and exit 2 before any process starts (issue 13, holes
3, 4 and 7): a space whose model cannot be built, an ``--out`` that cannot be written, sequence files that are not
UTF-8, nested too deeply, malformed, too large for memory or not matching their digest, a policy option without a
value, an absurd ``delayed:D``."""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import psutil
import pytest

from naspipe.spaces.space import preset
from tests.helpers.processes import descendants
from tests.helpers.refusals import TINY, refused

pytestmark = pytest.mark.usefixtures("no_process_left_behind")


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
    err = refused(capsys, [command, "--space", space, "--subnets", "4", "--stages", "2", "--no-progress",
                            "--out", str(out)], message, never=out)
    assert f"space {name!r}" in err
    assert not descendants(psutil.Process())


@pytest.mark.parametrize("command", ["train", "reference"])
def test_an_out_that_cannot_be_written_is_one_line(tmp_path, capsys, monkeypatch, command):
    (tmp_path / "file").write_text("x")
    refused(capsys, [command, *TINY, "--out", str(tmp_path / "file" / "run")],
             f"output directory {str(tmp_path / 'file' / 'run')!r} cannot be created: "
             f"{str(tmp_path / 'file')!r} is not a directory")
    if Path("/proc/self").exists():  # a pseudo file system takes no folders, even from root
        refused(capsys, [command, *TINY, "--out", "/proc/naspipe-run"],
                 "output directory '/proc/naspipe-run' cannot be written: ")
    long = "a" * 300  # longer than any file system's name (255 bytes here): a traceback from the folder's checks
    for out in (tmp_path / long, tmp_path / "new" / long / "run"):  # (or from its making, after the checks)
        refused(capsys, [command, *TINY, "--out", str(out)], "cannot be used: ", never=tmp_path / "new")
    monkeypatch.chdir(tmp_path)  # ("$UNSET" wrote a run into the current folder)
    refused(capsys, [command, *TINY, "--out", ""], "--out must name a folder, got ''")
    assert not (tmp_path / "run.json").exists()


@pytest.mark.parametrize("command", ["train", "reference"])
@pytest.mark.parametrize("option,value,message", [
    ("--lr", "1e39", "--lr must be a finite number > 0 and at most 3.403e+38 (float32's largest), got 1e+39"),
    # a subnormal rate (of float64, and of the float32 weights) was taken: a run that trains nothing
    ("--lr", "1e-320", "--lr must be at least 1.175e-38 (float32's smallest normal number"),
    ("--lr", "1e-39", "--lr must be at least 1.175e-38"),
    ("--threads", "100000", "--threads must be a whole number from 1 to 1024, got 100000"),  # (failed to start)
])
def test_a_rate_or_thread_count_that_cannot_run_is_refused_before_start(tmp_path, capsys, command, option, value,
                                                                        message):
    """Both started the stage processes and failed there, one after 102 s (--threads 5000)."""
    refused(capsys, [command, *TINY, option, value, "--out", str(tmp_path / "o")], message, never=tmp_path / "o")
    assert not descendants(psutil.Process())


def test_the_python_api_refuses_what_the_commands_refuse(tmp_path, monkeypatch):
    """The reference's argparse types are not enough for ``naspipe.reference`` (an exit, or nothing checked), nor
    for ``TrainConfig`` (an empty out wrote the run into the current folder)."""
    import naspipe
    from naspipe.runspec.spec import RunSpecError
    from naspipe.runtime import TrainConfig
    from naspipe.runtime.config import ConfigError

    monkeypatch.chdir(tmp_path)
    for out, options, message in (("", {}, "out must name a folder, got ''"),
                                  ("o", {"lr": 1e39}, "--lr must be a finite number > 0 and at most"),
                                  ("o", {"threads": 5000}, "--threads must be a whole number from 1 to 1024")):
        with pytest.raises(RunSpecError, match=message):
            naspipe.reference("tiny-transformer", out, subnets=4, **options)
    for out, options, message in (("", {}, "out must name a folder, got ''"), ("o", {"lr": 1e39}, "lr must be"),
                                  ("o", {"threads": 5000}, "threads must be a whole number from 1 to 1024")):
        with pytest.raises(ConfigError, match=message):
            TrainConfig.create("tiny-transformer", out, stages=2, subnets=4, **options)
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize("command", ["train", "reference", "truth"])
@pytest.mark.parametrize("name", ["run\nx", "run\rx", "run\tx", "run\x1bx"])
def test_an_out_holding_a_control_character_is_refused(tmp_path, capsys, command, name):
    """A newline in --out was taken, then broke what names the folder line by line (the resume hint, the torchrun
    lines and SLURM script, the logs): one line, exit 2, nothing made."""
    args = TINY if command != "truth" else ["--space", "digits-cnn", "--sample", "2", "--steps", "1",
                                           "--no-progress"]
    out = tmp_path / name
    err = refused(capsys, [command, *args, "--out", str(out)], "--out must not hold a control character ("
                  f"{name[3]!r}", never=out)
    assert repr(str(out)) in err


@pytest.mark.parametrize("command", ["train", "reference", "truth"])
@pytest.mark.parametrize("name,kind", [("run\u2028x", "line or paragraph separator"),
                                       ("run\u2029x", "line or paragraph separator"),
                                       ("run\u202ex", "bidirectional control character"),
                                       ("run\u2066x", "bidirectional control character")])
def test_an_out_holding_a_line_separator_or_a_bidi_control_is_refused(tmp_path, capsys, command, name, kind):
    """U+2028 and U+2029 (category Zl, Zp) break lines as a newline does to a reader that follows Unicode, and
    U+202E shows the name reversed: only category Cc was refused. One line, exit 2, nothing made."""
    args = TINY if command != "truth" else ["--space", "digits-cnn", "--sample", "2", "--steps", "1",
                                           "--no-progress"]
    out = tmp_path / name
    err = refused(capsys, [command, *args, "--out", str(out)], f"--out must not hold a {kind} ({name[3]!r}",
                  never=out)
    assert repr(str(out)) in err


def test_the_python_api_refuses_an_out_holding_a_control_character(tmp_path, monkeypatch):
    import naspipe
    from naspipe.runspec.spec import RunSpecError
    from naspipe.runtime import TrainConfig
    from naspipe.runtime.config import ConfigError

    monkeypatch.chdir(tmp_path)
    with pytest.raises(RunSpecError, match="out must not hold a control character"):
        naspipe.reference("tiny-transformer", "a\nb", subnets=4)
    with pytest.raises(ConfigError, match="out must not hold a control character"):
        TrainConfig.create("tiny-transformer", "a\nb", stages=2, subnets=4)
    with pytest.raises(ConfigError, match="lr must be at least"):
        TrainConfig.create("tiny-transformer", "o", stages=2, subnets=4, lr=1e-320)
    assert not list(tmp_path.iterdir())


DEEP = "[" * 100_000 + "]" * 100_000


@pytest.mark.parametrize("name,content,message", [
    ("trace.json", "[]", "not a naspipe trace"),
    ("trace.json", DEEP, "cannot read trace"),
    ("trace.json", '{"format": "naspipe-trace/1", "stages": 1, "events": [{"stage": 5, "kind": "F", "subnet": 0, '
                   '"start": 0, "end": 1}]}', "trace event 0 is malformed (it needs a stage from 0 to 0"),
    ("trace.json", '{"format": "naspipe-trace/1", "stages": 2, "events": [{"stage": 0, "kind": "F", "subnet": 0, '
                   '"start": "a", "end": 1}]}', "trace event 0 is malformed"),
    ("trace.json", '{"format": "naspipe-trace/1", "stages": 1e400, "events": []}', "stages must be a whole number"),
    ("trace.json", '{"format": "naspipe-trace/1", "stages": 1e12, "events": []}',
     "from 1 to 100000, got 1000000000000.0"),
    ("metrics.json", DEEP, "metrics.json': nested too deeply"),
], ids=["list", "deep", "stage", "start", "stages", "huge-stages", "deep-metrics"])
def test_a_run_folder_with_a_malformed_trace_or_metrics_is_one_line_to_report(two_thread_runs, tmp_path, capsys,
                                                                              name, content, message):
    run = tmp_path / "run"
    shutil.copytree(two_thread_runs["train2"], run)
    (run / name).write_text(content)
    refused(capsys, ["report", str(run), "--out", str(tmp_path / "r.html")], message, never=tmp_path / "r.html")
    if name == "metrics.json":
        refused(capsys, ["search", str(run), "--budget", "2"], "metrics.json: unreadable (nested too deeply)")


def test_a_sequence_file_that_is_not_utf8_or_nested_too_deeply_is_one_line(tmp_path, capsys):
    bad = tmp_path / "latin.json"
    bad.write_bytes(b'\xff\xfe{"subnets": []}')
    refused(capsys, ["reference", *TINY, "--sequence", str(bad), "--out", str(tmp_path / "o")],
             f"sequence file {str(bad)!r}: not a UTF-8 text file (byte 0)", never=tmp_path / "o")
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 100_000 + "]" * 100_000)
    refused(capsys, ["train", *TINY, "--sequence", str(deep), "--out", str(tmp_path / "o")],
             "JSON nested more than 32 levels deep", never=tmp_path / "o")
    refused(capsys, ["train", "--space", str(deep), "--out", str(tmp_path / "o")],
             "deep.json: JSON nested more than 32 levels deep", never=tmp_path / "o")


@pytest.mark.parametrize("content,message", [
    ('{"subnets": [5]}', "subnet 0 must be a list of choices or a {label: candidate} object, got 5"),
    ('{"subnets": [null]}', "subnet 0 must be a list of choices or a {label: candidate} object, got None"),
    ('{"subnets": [[0, 1]]}', "subnet 0: subnet has 2 choices, space 'tiny-transformer' has 10 blocks"),
])
def test_a_sequence_file_with_malformed_subnets_is_one_line(tmp_path, capsys, content, message):
    p = tmp_path / "seq.json"
    p.write_text(content)
    refused(capsys, ["train", *TINY, "--sequence", str(p), "--out", str(tmp_path / "o")], f"{p}: {message}",
             never=tmp_path / "o")


@pytest.mark.parametrize("command,processes", [("train", "5 processes"), ("reference", "1 process")])
def test_a_sequence_too_large_for_memory_is_refused_at_once(tmp_path, capsys, monkeypatch, command, processes):
    import naspipe.preflight.modelcheck

    # the same answer on any machine
    monkeypatch.setattr(naspipe.preflight.modelcheck, "machine_memory", lambda: 16 * 2**30)
    t0 = time.monotonic()
    err = refused(capsys, [command, "--subnets", "100000000", "--out", str(tmp_path / "o"), "--no-progress"],
                   "100000000 subnets would need about", never=tmp_path / "o")
    assert f"to hold the sequence in {processes}, more than 25% of this machine's 16.0 GiB" in err
    assert time.monotonic() - t0 < 30  # it used to build the whole sequence first (minutes, 4 GB)


def test_a_sequence_file_whose_digest_does_not_match_is_refused(two_thread_runs, tmp_path, capsys):
    data = json.loads((two_thread_runs["train2"] / "sequence.json").read_text())
    data["subnets"][3][1] = (data["subnets"][3][1] + 1) % 6
    p = tmp_path / "seq.json"
    p.write_text(json.dumps(data))
    refused(capsys, ["reference", *TINY, "--sequence", str(p), "--out", str(tmp_path / "o")],
             "does not match its subnets", never=tmp_path / "o")


def test_a_policy_option_without_a_value_is_refused(tmp_path, capsys):
    refused(capsys, ["train", *TINY, "--policy", "pipemare", "--policy-option", "t1", "--out", str(tmp_path / "o")],
             "pipemare option 't1' needs a value: t1=VALUE", never=tmp_path / "o")


def test_an_absurd_delay_is_refused(tmp_path, capsys):
    refused(capsys, ["reference", *TINY, "--shared-layers", "delayed:99999999999", "--out", str(tmp_path / "o")],
             "the delay D must lie in 0..100000", never=tmp_path / "o")
