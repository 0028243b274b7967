"""A ``naspipe`` command in a fresh interpreter (through ``naspipe.cli.main``), to see what it imported: the commands
that only read runs or simulate them (``simulate``, ``verify``, ``report``) must answer without the seconds of a
torch import."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
_CODE = ("import json, sys\nfrom naspipe.cli import main\nrc = main(json.loads(sys.argv[1]))\n"
         "print(json.dumps([rc, 'torch' in sys.modules]), file=sys.stderr)")


@dataclass(frozen=True)
class FreshCommand:
    code: int  # what main() returned
    imported_torch: bool
    stdout: str
    stderr: str


def run_fresh(argv: list[str], cwd: Path) -> FreshCommand:
    """``naspipe ARGV`` in a new interpreter in ``cwd``, this checkout first on its path."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    p = subprocess.run([sys.executable, "-c", _CODE, json.dumps(argv)], capture_output=True, text=True, timeout=120,
                       cwd=cwd, env=env)
    assert p.returncode == 0, p.stderr[-2000:]
    *err, last = p.stderr.strip().splitlines()
    code, imported = json.loads(last)
    return FreshCommand(code, imported, p.stdout, "\n".join(err))
