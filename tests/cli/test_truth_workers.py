"""``naspipe truth --workers`` above the cores this process may use is said in one line (issue 43, item 13).

Eight workers on two cores took 3.1 GB and ran 13 times slower than two, without a word. The note comes before any
worker starts; the default is the usable cores, which says nothing. No worker starts here (the build is stubbed).
"""

from __future__ import annotations

import pytest

import naspipe.cli.cmd_demo as cmd_demo
import naspipe.truth.workers as truth_workers
from naspipe.cli import main


class Started(Exception):
    pass


@pytest.fixture
def build(monkeypatch):
    """The build stubbed: it records the workers it was given and stops."""
    seen: list[int] = []

    def stub(*args, workers: int, **kw) -> None:  # noqa: ANN002, ANN003
        seen.append(workers)
        raise Started

    monkeypatch.setattr(truth_workers, "build_truth", stub)
    monkeypatch.setattr(cmd_demo, "usable_cores", lambda: 2)
    return seen


@pytest.mark.parametrize("workers,expected,noted", [(["--workers", "8"], 8, True), (["--workers", "2"], 2, False),
                                                     ([], 2, False)])
def test_more_workers_than_cores_is_said_before_any_starts(tmp_path, capsys, build, workers, expected, noted):
    with pytest.raises(Started):
        main(["truth", "--space", "digits-cnn", "--sample", "2", "--steps", "2", "--seeds", "1", "--no-progress",
              "--out", str(tmp_path / "t"), *workers])
    err = capsys.readouterr().err
    assert build == [expected]
    note = "naspipe: note: --workers 8 is more than the 2 cores this process may use"
    assert (note in err) == noted and err.count("\n") == int(noted), err
