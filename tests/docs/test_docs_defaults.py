"""The defaults the documentation states are the code's (issue 43, item 18).

docs/your-supernet.md said ``Fixed`` blocks follow ``--shared-layers`` (``frozen`` by default) long after a user's
own supernet defaulted to ``serial``. Here every page of ``README.md`` and ``docs/`` is read for the forms in which
the documentation states a default, and each statement is checked against the code: an option's default
(``--opt`` (``V`` by default ...), (``--opt V``, the default), ``--opt`` seconds (default N)), what ``auto`` means for
your own supernet and for the presets, the default policy of a command, and the default base of ``spread``. A page
that states a default in another form is not read: write it in one of these (or add the form here).
"""

from __future__ import annotations

import argparse
import dataclasses
import re
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
OPTION = r"(--[a-z][a-z0-9-]*)"


def _commands() -> dict[str, argparse.ArgumentParser]:
    from naspipe.cli import build_parser

    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    return dict(sub.choices)


def _option_defaults(option: str) -> set[str]:
    """The defaults of ``option`` over the commands that take it (one left to ``TrainConfig``: that field's)."""
    from naspipe.runtime.config import TrainConfig

    fields = {f.name: f.default for f in dataclasses.fields(TrainConfig)}
    found = set()
    for parser in _commands().values():
        for action in parser._actions:
            if option in action.option_strings:
                default = action.default
                if default is None and action.dest in fields:
                    default = fields[action.dest]
                found.add(str(default))
    if option == "--connect-timeout":  # an option of python -m naspipe.torchrun (the same parse every rank makes)
        from naspipe.cli.cmd_train import world_config

        found.add(str(world_config(["--space", "digits-cnn", "--subnets", "2", "--out", "x"], 1)[1]))
    return found


def _same(stated: str, actual: set[str]) -> bool:
    def number(x: str) -> float | None:
        try:
            return float(x)
        except ValueError:
            return None
    return stated in actual or (number(stated) is not None and number(stated) in {number(a) for a in actual})


def _option(m: re.Match) -> tuple[str, str, set[str]]:
    return f"{m[1]} defaults to {m[2]}", m[2], _option_defaults(m[1])


def _auto(m: re.Match) -> tuple[str, str, set[str]]:
    from naspipe.spaces.shared import default_for
    from naspipe.spaces.space import resolve_space

    space = resolve_space("tests.helpers.user_supernets:good" if "own" in m[2] else "digits-cnn")
    return f"shared layers default to {m[1]} for {m[2]}", m[1], {default_for(space)}


def _policy(m: re.Match) -> tuple[str, str, set[str]]:
    cmds = _commands()
    return (f"{m[2]} and {m[3]} default to policy {m[1]}", m[1],
            {str(a.default) for c in (m[2], m[3]) for a in cmds[c]._actions if "--policy" in a.option_strings})


def _spread(m: re.Match) -> tuple[str, str, set[str]]:
    from naspipe.sequences.samplers import parse_sampler

    return f"spread's base defaults to {m[1]}", m[1], {str(parse_sampler("spread")).partition(":")[2]}


# (the form, as a regular expression over a page's text with its lines joined; what it states and the code's value)
FORMS: list[tuple[str, Callable[[re.Match], tuple[str, str, set[str]]]]] = [
    (rf"`{OPTION}` \(`([^`]+)` by default", _option),
    (rf"\(`{OPTION} ([^`]+)`, the default\)", _option),
    (rf"`{OPTION}` seconds \(default ([0-9.]+)", _option),
    (r"`(frozen|serial|delayed:\d+)` \(the default for (your own supernet|the presets)\)", _auto),
    (r"`auto` by default: `(frozen|serial)` for (your own supernet)", _auto),
    (r"`([a-z0-9:-]+)`, the default of `naspipe ([a-z]+)` and `naspipe ([a-z]+)`", _policy),
    (r"`spread\[:fair\|uniform\]`\*\* \(default base `(\w+)`\)", _spread),
]


def statements() -> Iterator[tuple[str, str, str, set[str]]]:
    """``(page, what it states, the stated value, the code's values)`` for every stated default."""
    for page in PAGES:
        text = re.sub(r"\s*\n\s*", " ", page.read_text())
        for form, check in FORMS:
            for m in re.finditer(form, text):
                what, stated, actual = check(m)
                yield page.relative_to(ROOT).as_posix(), what, stated, actual


@pytest.fixture(scope="module")
def stated() -> list[tuple[str, str, str, set[str]]]:
    return list(statements())


def test_the_defaults_the_docs_state_are_the_codes(stated):
    wrong = [f"{page}: {what}, the code's is {' or '.join(sorted(actual))}" for page, what, value, actual in stated
             if not _same(value, actual)]
    assert not wrong, "\n".join(wrong)


def test_the_statements_are_found(stated):
    """The forms still match the pages (a reworded page would otherwise check nothing)."""
    found = {what for _, what, _, _ in stated}
    assert "--shared-layers defaults to auto" in found, found
    assert "shared layers default to serial for your own supernet" in found, found
    assert len(stated) >= 7, stated


def test_a_wrong_statement_is_named():
    m = re.search(FORMS[0][0], "`Fixed` blocks follow `--shared-layers` (`frozen` by default; ...)")
    assert m is not None
    what, value, actual = _option(m)
    assert what == "--shared-layers defaults to frozen" and not _same(value, actual) and actual == {"auto"}
