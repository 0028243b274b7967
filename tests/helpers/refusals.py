"""How a refused command looks: exit 2, one line starting ``naspipe: error:``, and no output folder left."""

from __future__ import annotations

from pathlib import Path

from naspipe.cli import main

TINY = ["--space", "tiny-transformer", "--subnets", "8", "--no-progress"]


def refused(capsys, argv: list[str], message: str, never: Path | None = None) -> str:  # noqa: ANN001
    """``argv`` exits 2 with one line containing ``message``, and (if given) ``never`` is not created."""
    capsys.readouterr()
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert message in err, err
    assert err.count("\n") == 1 and err.startswith("naspipe: error: "), err
    if never is not None:
        assert not never.exists()
    return err
