"""Mutation score of the scheduling core's torch-free tests: do the tests notice when the code changes?

Each mutant changes one spot of one file (a comparison flipped or loosened, ``+``/``-`` swapped, a constant
moved by one, ``and``/``or`` swapped, ``max``/``min`` swapped, a ``not`` dropped), made with ``ast`` on a
copy of the package in a temporary folder; the tests run against that copy (``-x``, with a timeout) and the
mutant is *killed* when they fail. Mutants are sampled with a fixed seed, so a run is repeatable. With
``--baseline REV`` the very same mutants also run against the tests of git revision ``REV``, so the two
scores compare the tests, not the samples. Prints JSON (every surviving mutant with its file, line and
change) and writes ``benchmarks/results/mutation.json``.

Run: ``.venv/bin/python benchmarks/mutation.py [--mutants 160] [--baseline 249f9fa]`` (tens of minutes).
"""

from __future__ import annotations

import argparse
import ast
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import ROOT, write_result

FILES = ("naspipe/sched/causal.py", "naspipe/sched/base.py", "naspipe/sched/csp.py", "naspipe/sched/baselines.py",
         "naspipe/sched/chains.py",
         "naspipe/sched/critical.py", "naspipe/spaces/shared.py", "naspipe/sim/bound.py")  # shared: the layer policies
TESTS = ("tests/test_shared_layers.py", "tests/sched/test_tables.py", "tests/sched/test_choices.py",
         "tests/test_bound.py", "tests/sched/test_properties.py")  # fastest first: most mutants die early (-x)
# where those tests were before tests/ mirrored the package, for a --baseline revision of that time
FLAT = {"tests/sched/test_tables.py": "tests/test_sched_tables.py", "tests/sched/test_choices.py":
        "tests/test_sched_choices.py", "tests/sched/test_properties.py": "tests/test_sched_properties.py"}
SWAP_CMP = {ast.Lt: ast.LtE, ast.LtE: ast.Lt, ast.Gt: ast.GtE, ast.GtE: ast.Gt, ast.Eq: ast.NotEq,
            ast.NotEq: ast.Eq, ast.In: ast.NotIn, ast.NotIn: ast.In, ast.Is: ast.IsNot, ast.IsNot: ast.Is}
SWAP_BIN = {ast.Add: ast.Sub, ast.Sub: ast.Add, ast.Mult: ast.Div, ast.FloorDiv: ast.Mult}


def sites(tree: ast.AST) -> list[tuple[int, str, int]]:
    """(node index in ast.walk order, kind, line) of every spot a mutation applies to."""
    out = []
    for i, node in enumerate(ast.walk(tree)):
        if isinstance(node, ast.Compare) and type(node.ops[0]) in SWAP_CMP:
            out.append((i, "compare", node.lineno))
        elif isinstance(node, ast.BinOp) and type(node.op) in SWAP_BIN:
            out.append((i, "binop", node.lineno))
        elif isinstance(node, ast.BoolOp):
            out.append((i, "boolop", node.lineno))
        elif isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
            out.append((i, "not", node.lineno))
        elif isinstance(node, ast.Constant) and type(node.value) is int and not isinstance(node.value, bool):
            out.append((i, "constant", node.lineno))
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("max", "min"):
            out.append((i, "maxmin", node.lineno))
    return out


def mutate(source: str, index: int, kind: str) -> tuple[str, str]:
    """The source with the mutation at ``index`` applied, and a one-line description of it."""
    tree = ast.parse(source)
    node = list(ast.walk(tree))[index]
    before = ast.unparse(node)
    if kind == "compare":
        node.ops[0] = SWAP_CMP[type(node.ops[0])]()
    elif kind == "binop":
        node.op = SWAP_BIN[type(node.op)]()
    elif kind == "boolop":
        node.op = ast.Or() if isinstance(node.op, ast.And) else ast.And()
    elif kind == "not":
        # replace `not x` by `x` in its parent
        for parent in ast.walk(tree):
            for field, value in ast.iter_fields(parent):
                if value is node:
                    setattr(parent, field, node.operand)
                elif isinstance(value, list) and node in value:
                    value[value.index(node)] = node.operand
        return ast.unparse(tree), f"{before} -> {ast.unparse(node.operand)}"
    elif kind == "constant":
        node.value = node.value + 1 if node.value <= 1 else node.value - 1
    elif kind == "maxmin":
        node.func.id = "min" if node.func.id == "max" else "max"
    return ast.unparse(tree), f"{before} -> {ast.unparse(node)}"


def run_tests(pkg_root: Path, tests: list[str], timeout: float) -> bool:
    """True if the tests pass against the package under ``pkg_root``."""
    env = {k: v for k, v in os.environ.items() if k != "PYTEST_CURRENT_TEST"}
    env["PYTHONPATH"] = str(pkg_root)
    try:
        p = subprocess.run([sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", *tests],
                           cwd=pkg_root, env=env, capture_output=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return False  # a mutant that hangs the tests is caught
    return p.returncode == 0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mutants", type=int, default=160, help="mutants sampled over the files (default 160)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--timeout", type=float, default=120.0, help="seconds per test run (default 120)")
    ap.add_argument("--baseline", default=None, help="also run the mutants against the tests of this git revision")
    args = ap.parse_args()
    t0 = time.perf_counter()
    all_sites = []
    for f in FILES:
        src = (ROOT / f).read_text()
        all_sites += [(f, i, kind, line) for i, kind, line in sites(ast.parse(src))]
    sample = sorted(random.Random(args.seed).sample(all_sites, min(args.mutants, len(all_sites))))
    suites = {"current": None, **({f"baseline {args.baseline}": args.baseline} if args.baseline else {})}
    results = {name: {"killed": 0, "survived": []} for name in suites}
    per_file: dict[str, dict[str, list[int]]] = {name: {} for name in suites}
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        shutil.copytree(ROOT / "naspipe", work / "naspipe")
        test_dirs = {}
        for name, rev in suites.items():
            d = work / ("tests" if rev is None else "tests_baseline")
            if rev is None:
                shutil.copytree(ROOT / "tests", d)
            else:
                d.mkdir()
                listing = subprocess.run(["git", "ls-tree", "-r", "--name-only", rev, "tests/"], cwd=ROOT,
                                         capture_output=True, text=True, check=True).stdout.split()
                for path in listing:
                    blob = subprocess.run(["git", "show", f"{rev}:{path}"], cwd=ROOT, capture_output=True,
                                          check=True).stdout
                    (d / Path(path).relative_to("tests")).parent.mkdir(parents=True, exist_ok=True)
                    (d / Path(path).relative_to("tests")).write_bytes(blob)
            found = [d / Path(t).relative_to("tests") for t in TESTS]
            found = [f if f.exists() else d / Path(FLAT.get(t, t)).relative_to("tests")
                     for f, t in zip(found, TESTS, strict=True)]
            test_dirs[name] = [str(f) for f in found if f.exists()]
        for name, tests in test_dirs.items():
            if not run_tests(work, tests, args.timeout):
                raise SystemExit(f"the {name} tests fail on the unmutated code; fix them first")
        for n, (f, index, kind, line) in enumerate(sample, 1):
            original = (ROOT / f).read_text()
            text, what = mutate(original, index, kind)
            (work / f).write_text(text)
            try:
                for name, tests in test_dirs.items():
                    killed = not run_tests(work, tests, args.timeout)
                    per_file[name].setdefault(f, [0, 0])[0 if killed else 1] += 1
                    if killed:
                        results[name]["killed"] += 1
                    else:
                        results[name]["survived"].append({"file": f, "line": line, "kind": kind, "change": what})
            finally:
                (work / f).write_text(original)
            print(f"[{n}/{len(sample)}] {f}:{line} {what}", file=sys.stderr, flush=True)
    out = {"mutants": len(sample), "seed": args.seed, "files": list(FILES), "tests": list(TESTS)}
    for name, r in results.items():
        out[name] = {"score": r["killed"] / len(sample), "killed": r["killed"],
                     "per_file": {f: {"killed": k, "survived": s} for f, (k, s) in per_file[name].items()},
                     "survived": r["survived"]}
    out["seconds"] = round(time.perf_counter() - t0, 1)
    write_result("mutation", out)


if __name__ == "__main__":
    main()
