"""``naspipe rank`` against run folders a user broke or mixed up: refused in one line (exit 2), never a traceback,
a hang or a number that means nothing. Against the shipped truth (data/truth/digits-truth) and a small reference."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from naspipe.cli import main

ROOT = Path(__file__).resolve().parents[2]
SPACE = str(ROOT / "data" / "spaces" / "digits-truth.json")
TRUTH = ROOT / "data" / "truth" / "digits-truth"
COMMON = ["--space", SPACE, "--subnets", "12", "--optimizer", "momentum", "--shared-layers", "serial",
          "--no-progress"]


@pytest.fixture(scope="module")
def refs(tmp_path_factory) -> dict[str, Path]:
    """References of the truth's space: seeds 0 and 1 at lr 0.05, seed 2 at lr 0.1."""
    d = tmp_path_factory.mktemp("refs")
    out = {}
    for name, extra in (("ref0", ["--lr", "0.05"]), ("ref1", ["--lr", "0.05", "--seed", "1"]),
                        ("lr1", ["--lr", "0.1", "--seed", "2"])):
        out[name] = d / name
        assert main(["reference", *COMMON, *extra, "--out", str(out[name])]) == 0
    return out


def _refused(capsys, *args: object) -> str:
    capsys.readouterr()
    code = main(["rank", "--resamples", "50", *map(str, args)])
    c = capsys.readouterr()
    assert code == 2 and not c.out and len(c.err.strip().splitlines()) == 1, (code, c.out, c.err)
    return c.err


@pytest.mark.parametrize("text", ["{", "[]"])
def test_a_malformed_run_json_is_one_line_wherever_the_run_is_given(refs, tmp_path, capsys, text):
    """A run.json of ``{`` or ``[]`` was a 28-line traceback ending in RunFileError (verify said it in one line):
    as the run, as --against and as one of --seeds."""
    bad = tmp_path / "bad"
    shutil.copytree(refs["ref0"], bad)
    (bad / "run.json").write_text(text)
    for args in ((bad,), (refs["ref0"], "--against", bad), (refs["ref0"], "--seeds", refs["ref1"], bad)):
        err = _refused(capsys, *args, "--truth", TRUTH)
        assert f"{bad / 'run.json'}:" in err and ("not valid JSON" in err or "must be an object" in err), err
