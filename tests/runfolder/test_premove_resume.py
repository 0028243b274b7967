"""Runs checkpointed before the folder move (issue 44) still resume: a module path is not part of a run.

``premove_runs/`` holds two runs killed after their checkpoint at subnet 6 of 12 by the code before the move
(commit 4e3a375: ``naspipe train ... --checkpoint-every 6 --fault kill:1:9 --seed 3``), a preset's and a user
supernet's (``premove_runs/code``), with their references. Resumed by today's code they finish; on the kind
of CPU that made them (``made_on.json``) they are bit-identical to the references made then.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.per_cpu import same_cpu

RUNS = Path(__file__).resolve().parent / "premove_runs"
MADE_ON = json.loads((RUNS / "made_on.json").read_text())["cpu"]


def _naspipe(*argv: str, pythonpath: Path | None = None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "PYTEST_CURRENT_TEST"}
    if pythonpath is not None:
        env["PYTHONPATH"] = os.pathsep.join([str(pythonpath), env.get("PYTHONPATH", "")])
    command = [str(Path(sys.executable).with_name("naspipe")), *argv]
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=240)


@pytest.mark.parametrize("name,space", [("digits-cnn", "digits-cnn"), ("user", "premove_supernet:supernet")])
def test_a_run_checkpointed_before_the_move_resumes(tmp_path, name, space):
    shutil.copytree(RUNS, tmp_path / "runs")
    run = tmp_path / "runs" / name
    assert json.loads((run / "status.json").read_text())["checkpoint"] == 6
    done = _naspipe("train", "--space", space, "--stages", "2", "--subnets", "12", "--checkpoint-every", "6",
                    "--seed", "3", "--no-progress", "--resume", str(run), pythonpath=tmp_path / "runs" / "code")
    assert done.returncode == 0, done.stderr
    assert "resumed at subnet 6" in done.stdout
    assert json.loads((run / "status.json").read_text()) == {"complete": True}
    assert len((run / "losses.csv").read_text().splitlines()) == 1 + 12
    if same_cpu(MADE_ON):
        same = _naspipe("verify", str(run), str(tmp_path / "runs" / f"{name}-ref"))
        assert same.returncode == 0, same.stdout + same.stderr
