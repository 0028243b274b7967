"""Every code block of ``README.md`` and ``docs/*.md`` runs, so the documentation cannot drift from the code.

The convention (also in ``docs/README.md``, for whoever writes a page):

* each page runs in a fresh temporary folder holding a copy of ``data/``, its blocks in page order (a later
  block may use what an earlier one wrote), with this checkout's ``naspipe`` first on ``PATH`` and
  ``PYTHONPATH``;
* ```` ```python ````: run by a fresh interpreter in that folder; a block whose first line is a comment naming
  a Python file (``# mycode/my_supernet.py ...``) is written to that file instead (and compiled), for later
  blocks to import;
* ```` ```sh ```` or ```` ```bash ````: run by ``bash -e`` in that folder; commands, no ``$ `` prompts; extend
  ``PYTHONPATH`` (``export PYTHONPATH=mycode:$PYTHONPATH``), never replace it;
* ```` ```text ````: not run (output, error messages, layouts, lines for other machines);
* any other fence, or none, fails ``test_every_block_has_a_known_language``.

Blocks keep small arguments (a few subnets, 2 stages): a long run is rewritten small, never skipped.

The blocks' ``naspipe`` is served by a warm interpreter (``tests/helpers/warm_naspipe.py``: torch imported once,
a forked process per command, with the block's folder, environment, streams and fresh random state, its real exit
status): what a command does is real, its start is not (the console script is run by the tests that start
``naspipe`` themselves, and by one command of the your-own-supernet test).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.helpers.warm_naspipe import WarmNaspipe

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
BLOCK_TIMEOUT_S = 300
RUN = ("python", "sh", "bash")
LANGS = (*RUN, "text")
_FENCE = re.compile(r"^```(.*)$")
_FILE = re.compile(r"^#\s*([\w./-]+\.py)\b")
_LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


@dataclass(frozen=True)
class Block:
    page: str
    line: int  # of the opening fence, 1-based
    lang: str
    code: str


def pages() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def blocks(path: Path, root: Path = ROOT) -> list[Block]:
    out, lang, start, body = [], None, 0, []
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        m = _FENCE.match(line)
        if lang is None and m:
            lang, start, body = m.group(1).strip(), n, []
        elif lang is not None and line.rstrip() == "```":
            out.append(Block(path.relative_to(root).as_posix(), start, lang, "\n".join(body) + "\n"))
            lang = None
        elif lang is not None:
            body.append(line)
    assert lang is None, f"{path.name}:{start}: a code block is never closed"
    return out


def test_the_block_reader_finds_fences_languages_and_lines(tmp_path):
    page = tmp_path / "p.md"
    page.write_text("text\n```sh\necho hi\n```\n\n```\nno language\n```\n```python\n# a/b.py: x\nx = 1\n```\n")
    got = [(b.line, b.lang, b.code) for b in blocks(page, tmp_path)]
    assert got == [(2, "sh", "echo hi\n"), (6, "", "no language\n"), (9, "python", "# a/b.py: x\nx = 1\n")]
    assert _FILE.match("# a/b.py: x").group(1) == "a/b.py" and not _FILE.match("# plain comment")


def test_every_block_has_a_known_language():
    bad = [f"{b.page}:{b.line}: ```{b.lang}" for p in pages() for b in blocks(p) if b.lang not in LANGS]
    assert not bad, f"fence each block with one of {LANGS} (tests/docs/test_docs_code.py): {bad}"


def test_readme_is_short_and_its_links_resolve():
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    lines = text.splitlines()
    assert len(lines) <= 200, f"README.md has {len(lines)} lines; at most 200 (move detail into docs/)"
    long = [n for n, line in enumerate(lines, 1) if len(line) > 120]
    assert not long, f"README.md lines longer than 120 characters: {long}"
    for want in ("docs/results.md", "docs/your-supernet.md", "docs/policies.md", "docs/reproducibility.md",
                 "docs/replicas.md", "docs/multi-machine.md", "docs/simulator.md", "docs/troubleshooting.md"):
        assert f"({want})" in text, f"README.md does not link {want}"


@pytest.mark.parametrize("page", [p.relative_to(ROOT).as_posix() for p in pages()])
def test_relative_links_resolve(page):
    path = ROOT / page
    missing = []
    for target in _LINK.findall(path.read_text(encoding="utf-8")):
        if re.match(r"[a-z]+:", target) or target.startswith("#"):
            continue
        if not (path.parent / target.split("#")[0]).exists():
            missing.append(target)
    assert not missing, f"{page} links to missing files: {missing}"


def _env(folder: Path, warm: WarmNaspipe | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTEST_CURRENT_TEST", "NASPIPE_POLICY_MODULES")}
    env["PATH"] = os.pathsep.join([*([str(warm.bin)] if warm else []), str(BIN), env.get("PATH", "")])
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])
    (folder / "home").mkdir(exist_ok=True)
    env["HOME"] = str(folder / "home")  # nothing a block writes lands outside its folder
    env["MPLBACKEND"] = "Agg"
    return env


def _run(block: Block, folder: Path, env: dict[str, str]) -> None:
    where = f"{block.page}:{block.line}"
    if block.lang == "python":
        named = _FILE.match(block.code.splitlines()[0]) if block.code.strip() else None
        if named:
            target = folder / named.group(1)
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(block.code, encoding="utf-8")
            compile(block.code, str(target), "exec")
            return
        cmd = [sys.executable, "-c", block.code]
    else:
        cmd = ["bash", "-e", "-c", block.code]
    try:
        p = subprocess.run(cmd, cwd=folder, env=env, capture_output=True, text=True, timeout=BLOCK_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        pytest.fail(f"{where}: the block ran past {BLOCK_TIMEOUT_S} s; give it smaller arguments")
    assert p.returncode == 0, f"{where}: exit {p.returncode}\n--- stdout\n{p.stdout[-3000:]}\n--- stderr\n" \
                              f"{p.stderr[-3000:]}"


_RUNNABLE = [p.relative_to(ROOT).as_posix() for p in pages() if any(b.lang in RUN for b in blocks(p))]


def test_a_failing_block_fails_and_a_named_python_file_is_written(tmp_path):
    env = _env(tmp_path)
    with pytest.raises(AssertionError, match=r"p.md:3: exit 3"):
        _run(Block("p.md", 3, "sh", "echo out\nexit 3\n"), tmp_path, env)
    with pytest.raises(AssertionError, match=r"p.md:7: exit 1"):
        _run(Block("p.md", 7, "python", "raise SystemExit(1)\n"), tmp_path, env)
    _run(Block("p.md", 9, "python", "# pkg/mod.py: a module\nX = 1\n"), tmp_path, env)
    _run(Block("p.md", 12, "sh", "export PYTHONPATH=pkg:$PYTHONPATH\npython -c 'import mod, naspipe; print(mod.X)'\n"),
         tmp_path, env)
    assert (tmp_path / "pkg" / "mod.py").read_text().endswith("X = 1\n")


def test_the_warm_naspipe_runs_a_command_as_its_own_process_would(tmp_path, warm):
    """Beside the real console script: the same exit status (a usage error, an exit handler's ``os._exit``, a
    signal) and the same last line, with the folder, the environment, PYTHONPATH (relative, as a block exports it)
    and stdin reaching the forked command (its user module, imported there, writes what it saw); two commands do
    not share their global random state."""
    env = _env(tmp_path, warm)
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "probe_mod.py").write_text(
        "import atexit, os, signal, sys, numpy, torch\n"
        "with open(os.environ['WARM_OUT'], 'w') as f:\n"
        "    print(os.getcwd(), sys.stdin.read(), f'{numpy.random.random()},{torch.rand(1).item()}', file=f)\n"
        "if os.environ['WARM_END'] == 'atexit':\n"
        "    atexit.register(os._exit, 7)\n"
        "elif os.environ['WARM_END'] == 'signal':\n"
        "    os.kill(os.getpid(), signal.SIGKILL)\n"
        "def supernet():\n"
        "    raise SystemExit(5)\n")
    env["PYTHONPATH"] = os.pathsep.join(["pkg", env["PYTHONPATH"]])

    def run(naspipe: str, how: str) -> tuple[int, str, str]:
        seen = tmp_path / f"seen-{how}-{naspipe == 'naspipe'}"
        p = subprocess.run([naspipe, "simulate", "--space", "probe_mod:supernet"], input="piped", cwd=tmp_path,
                           env={**env, "WARM_OUT": str(seen), "WARM_END": how}, capture_output=True, text=True,
                           timeout=60)
        where, piped, draw = seen.read_text().split()
        assert (where, piped) == (str(tmp_path), "piped")
        return p.returncode, (p.stderr.splitlines() or [""])[-1], draw

    draws = []
    for how, code in (("exit", 2), ("atexit", 7), ("signal", -9)):
        real, warmed = run(str(BIN / "naspipe"), how), run("naspipe", how)
        assert warmed[:2] == real[:2] and real[0] == code, (how, real, warmed)
        assert how != "exit" or "supernet() raised SystemExit" in real[1], real
        draws.append(warmed[2])
    assert len({d.split(',')[0] for d in draws}) == len({d.split(',')[1] for d in draws}) == 3
    p = warm.run(["simulate", "--space", "nope"], tmp_path, env, timeout=60)
    assert p.returncode == 2 and p.stderr.startswith("naspipe: error:") and len(p.stderr.splitlines()) == 1


@pytest.mark.slow
@pytest.mark.timeout(1200)  # a page's blocks together (README: about a dozen commands) on a loaded machine
@pytest.mark.parametrize("page", _RUNNABLE)
def test_every_code_block_of_the_page_runs(page, tmp_path, warm):
    """The page's python and shell blocks, in order, in one folder (they may chain)."""
    shutil.copytree(ROOT / "data", tmp_path / "data")
    env = _env(tmp_path, warm)
    for block in blocks(ROOT / page):
        if block.lang in RUN:
            _run(block, tmp_path, env)
