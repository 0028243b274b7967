"""What ``make`` installs into ``.venv`` (the Makefile's install rule): a package left out on purpose stays out.

rfc3987-syntax (``install-excludes.txt``) builds an Earley parser when it is imported, 1.4-2.8 s of CPU here, and
jsonschema imports it when jsonschema itself is imported. Every notebook kernel that shows a plotly figure imports
jsonschema (plotly checks nbformat's version, nbformat validates with jsonschema), and so does JupyterLab's server.
matplotlib (and what it requires) is asked for by mnist1d for its plotting helper alone, which naspipe never imports.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _excluded() -> list[str]:
    lines = (ROOT / "install-excludes.txt").read_text().splitlines()
    return [x.strip() for x in lines if x.strip() and not x.lstrip().startswith("#")]


def test_the_excluded_packages_are_not_installed_and_jsonschema_still_validates():
    assert _excluded() == ["rfc3987-syntax", "matplotlib"]
    assert importlib.util.find_spec("rfc3987_syntax") is None, "make installs without rfc3987-syntax"
    assert importlib.util.find_spec("matplotlib") is None, "make installs without matplotlib (mnist1d asks for it)"
    code = ("import sys, jsonschema, nbformat\n"
            "nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell('1')])\n"
            "nbformat.validate(nb)\n"
            "try:\n"
            "    nbformat.validate({'cells': 1})\n"
            "except jsonschema.ValidationError:\n"
            "    print('rfc3987_syntax' in sys.modules, 'lark' in sys.modules)\n")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0 and p.stdout.split() == ["False", "False"], (p.stdout, p.stderr[-2000:])


def test_both_install_paths_leave_the_excluded_packages_out():
    """uv's ``--excludes`` and, where pip installs instead, ``pip uninstall -r``: the same file for both."""
    rule = (ROOT / "Makefile").read_text().split("$(STAMP): pyproject.toml", 1)[1].split("\ndemo:", 1)[0]
    assert "install-excludes.txt" in rule.splitlines()[0]  # a change to the list reinstalls
    assert "--excludes install-excludes.txt" in rule
    assert "pip uninstall -qq -y -r install-excludes.txt" in rule  # (-qq: no warning where none is installed)
