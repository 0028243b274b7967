"""A parameter held by two candidates (or a candidate and a fixed block), as a module bank does, is refused
before any process starts, with one line naming both and the parameter; candidates that build their own modules
train as before. Why refused and what to write instead: docs/shared-parameters.md."""

from __future__ import annotations

import pytest

from naspipe.cli import main

pytestmark = pytest.mark.usefixtures("no_process_left_behind")


@pytest.mark.parametrize("command", ["train", "reference"])
@pytest.mark.parametrize(("function", "message"), [
    ("bank", "block 'cell': candidates 'lin-lin' and 'lin-tanh' hold the same parameter ('edges.0.weight' of "
             "'lin-lin' is 'edges.0.weight' of 'lin-tanh'): a module shared between candidates"),
    ("shared_with_fixed", "block 'stem', candidate 'stem' and block 'cell', candidate 'stem_again' hold the same "
                          "parameter ('weight' of 'stem' is 'weight' of 'stem_again')"),
], ids=["bank", "fixed"])
def test_a_parameter_shared_between_candidates_is_refused_in_one_line_before_start(tmp_path, capsys, command,
                                                                                    function, message):
    out = tmp_path / "out"
    rc = main([command, "--space", f"bank_supernets:{function}", "--stages", "2", "--subnets", "4",
               "--no-progress", "--out", str(out)])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and "\n" not in err, err
    assert err.startswith(f"naspipe: error: --space bank_supernets:{function}: {message}"), err
    assert "build every module inside the factory" in err and "docs/shared-parameters.md" in err, err
    assert not out.exists()


def test_candidates_that_build_their_own_modules_train_and_verify(tmp_path, capsys):
    """No false alarm from a freed parameter's id reused by a later one (32 candidates, all probed)."""
    run, ref = tmp_path / "run", tmp_path / "ref"
    args = ["--space", "bank_supernets:own_modules", "--subnets", "6", "--no-progress"]
    assert main(["train", *args, "--stages", "2", "--out", str(run)]) == 0, capsys.readouterr().err
    assert main(["reference", *args, "--out", str(ref)]) == 0, capsys.readouterr().err
    assert main(["verify", str(run), str(ref)]) == 0, capsys.readouterr().err
