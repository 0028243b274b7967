"""``benchmarks/trust.py`` runs its quick path under a name of its own into a folder of its own: a policy on a real
pipeline against the reference, scored on the shipped truth, with the floors and the verdict column; the committed
results and docs/trust.md stay as they are."""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "trust.py"


def test_the_quick_policy_table_writes_only_its_own_name_and_folder(tmp_path, warm):
    doc = (ROOT / "docs" / "trust.md").read_text()
    p = warm.python(SCRIPT, ["--quick", "--name", "powered", "--out", str(tmp_path), "--scores",
                             str(tmp_path / "scores.json")], timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    data = json.loads((tmp_path / "powered_quick.json").read_text())
    assert [r["policy"] for r in data["rows"]] == ["reference", "pipedream"]
    assert data["config"]["subnets"] == 16 and data["config"]["supernet_seeds"] == [0, 1]
    assert data["config"]["architectures"] == 24
    ref, pipedream = data["rows"]
    assert ref["identical_to_reference"] == [True, True] and pipedream["identical_to_reference"] == [False, False]
    assert pipedream["verdict"] in ("within seed noise", "difference")
    assert data["floors"]["supernet_seed_vs_seed"] is not None
    assert (ROOT / "docs" / "trust.md").read_text() == doc
    assert sorted(f.name for f in tmp_path.iterdir()) == ["powered_quick.json", "scores-quick.json"]


def test_each_name_has_its_own_table_in_the_docs():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import trust  # noqa: PLC0415 - the benchmark script as a module

    assert trust.markers("trust") == (trust.BEGIN, trust.END)
    begin, end = trust.markers("trust_powered_2stages")
    assert "trust_powered_2stages" in begin and begin != trust.BEGIN and end != trust.END


def test_the_docs_tables_are_the_jsons():
    """docs/trust.md's policy tables are generated from the committed results (``--table-only``), each between its
    own markers."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import trust  # noqa: PLC0415

    doc = (ROOT / "docs" / "trust.md").read_text()
    for name in ("trust", "trust_powered_2stages", "trust_powered_4stages", "trust_powered_mnist1d_2stages",
                 "trust_powered_mnist1d_4stages"):
        data = json.loads((ROOT / "benchmarks" / "results" / f"{name}.json").read_text())
        begin, end = trust.markers(name)
        assert f"{begin}\n{trust.table(data)}\n{end}" in doc, name


def test_the_readme_cites_the_powered_numbers():
    """The README's paragraph on asynchrony and search quality quotes the powered tables' intervals and the curve's
    powered length, as the JSON holds them (a rerun that moves them fails here until the README follows)."""
    readme = " ".join((ROOT / "README.md").read_text().split())

    def est(e: dict) -> str:
        return f"{e['value']:.2f} [{e['low']:.2f}, {e['high']:.2f}]"

    res = ROOT / "benchmarks" / "results"
    two, four = (json.loads((res / f"trust_powered_{n}stages.json").read_text()) for n in (2, 4))
    rows2, rows4 = ({r["policy"]: r for r in d["rows"]} for d in (two, four))
    curve = json.loads((res / "trust_curve.json").read_text())
    cited = [f"at about {curve['powered_length']} subnets", est(rows2["reference"]["kendall_tau"]),
             f"+-{two['floors']['seed_band']:.2f}", est(rows2["pipedream"]["tau_difference_vs_reference"]),
             est(rows4["pipedream"]["tau_difference_vs_reference"]), est(rows4["2bw"]["tau_difference_vs_reference"]),
             est(rows2["csp, shared delayed:4"]["tau_difference_vs_reference"])]
    m4 = {r["policy"]: r for r in json.loads((res / "trust_powered_mnist1d_4stages.json").read_text())["rows"]}
    cited.append(est(m4["2bw"]["tau_difference_vs_reference"]))
    missing = [c for c in cited if c not in readme]
    assert not missing, missing
    assert all(r["verdict"] != "difference" for d in (two, four) for r in d["rows"])  # as the README says
    assert all(r["verdict"] != "difference" for r in m4.values())
