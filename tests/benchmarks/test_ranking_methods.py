"""``benchmarks/ranking_methods.py`` runs its quick path into a folder of its own: every method's row (one-shot,
few-shot per choice block, the three ensembles, the three proxies) with intervals, per-seed taus, the seed band and
the verdict against one-shot, and the runtime check bit-identical to its references; ``--rows ensemble-last`` merges
that row alone into the JSON; docs/trust.md stays as it is, and its ranking-methods tables are the committed JSONs'."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "ranking_methods.py"
NAMES = ("ranking_methods", "ranking_methods_mnist1d")
LAST = "ensemble of last 3 (N, 7N/8, 3N/4)"


def _script():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import ranking_methods  # noqa: PLC0415 - the benchmark script as a module

    return ranking_methods


def test_the_quick_run_writes_only_its_own_json(tmp_path, warm):
    doc = (ROOT / "docs" / "trust.md").read_text()
    argv = ["--quick", "--out", str(tmp_path), "--scores", str(tmp_path / "scores.json")]
    p = warm.python(SCRIPT, argv, timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    assert sorted(f.name for f in tmp_path.iterdir()) == ["ranking_methods_quick.json", "scores-quick.json"]
    data = json.loads((tmp_path / "ranking_methods_quick.json").read_text())
    c = data["config"]
    assert c["subnets"] == 12 and c["seeds"] == [0, 1] and c["architectures"] == 24 and c["sampler"] == "fair"
    assert c["heldout_samples"] == 64  # one held-out batch
    assert (c["optimizer"], c["lr"], c["shared_layers"]) == ("momentum", 0.02, "serial")  # the powered table's
    methods = [r["method"] for r in data["rows"]]
    assert methods == ["one-shot", *(f"few-shot:{b} (W=N/2)" for b in ("cell0", "cell1", "cell2")),
                       "ensemble of 2 seeds (N/2 each)", "ensemble of 5 seeds (N each, 5x the subnets)",
                       LAST, "proxy:synflow", "proxy:gradnorm", "proxy:params"]
    costs = {r["method"]: r["total_subnets_per_seed"] for r in data["rows"]}
    assert costs["one-shot"] == costs["ensemble of 2 seeds (N/2 each)"] == costs[LAST] == 12
    assert costs["proxy:params"] == 0 and c["ensemble_last"] == {"supernets": 3, "after_subnets": [12, 11, 10]}
    assert costs["ensemble of 5 seeds (N each, 5x the subnets)"] == 60
    for r in data["rows"]:
        for key in ("kendall_tau", "spearman_rho", "top10_overlap", "regret"):
            e = r[key]
            assert e["low"] <= e["value"] <= e["high"] or key == "regret", (r["method"], key)
        assert len(r["tau_per_seed"]) == len(r["regret_per_seed"]) == 2
        assert r["seed_band"] == abs(r["tau_per_seed"][0] - r["tau_per_seed"][1])
        assert 0 <= r["seeds_regret_le_goal"] <= 2
        if r["method"] == "one-shot":
            assert r["verdict"] is None and r["tau_difference_vs_one_shot"] is None
        else:
            assert r["verdict"] in ("within seed noise", "difference")
    assert data["floors"]["one_shot_seed_band"] == data["rows"][0]["seed_band"]
    assert set(data["scatter"]["scores"]) == set(methods) and len(data["scatter"]["truth_accuracy"]) == 24
    rt = data["runtime"]
    assert rt["subnets"] == 12 and rt["stages"] == 2 and len(rt["repeats"]) == 1 and rt["ratio_few_over_one"] > 0
    assert all(all(v) for v in rt["identical_to_reference"].values())  # pipeline == sequential reference
    assert "shared with another benchmark" in c["machine_load"]
    assert _script().table(data).count("\n| ") == len(methods) + 1
    # --rows ensemble-last: that row alone, merged into the JSON without it (the one-shot runs read from the cache;
    # in this process, its intra-op thread count restored after)
    out = tmp_path / "ranking_methods_quick.json"
    scatter = {**data["scatter"], "scores": {k: v for k, v in data["scatter"]["scores"].items() if k != LAST}}
    out.write_text(json.dumps({**data, "rows": [r for r in data["rows"] if r["method"] != LAST], "scatter": scatter}))
    threads = torch.get_num_threads()
    try:
        _script().main([*argv, "--rows", "ensemble-last"])
    finally:
        torch.set_num_threads(threads)
    merged = json.loads(out.read_text())
    assert merged["rows"] == data["rows"] and merged["goal"] == data["goal"]
    assert list(merged["scatter"]["scores"].items()) == list(data["scatter"]["scores"].items())  # (in order)
    assert merged["config"]["ensemble_last"]["merged_by"] == "--rows ensemble-last"
    assert sorted(f.name for f in tmp_path.iterdir()) == ["ranking_methods_quick.json", "scores-quick.json"]
    assert (ROOT / "docs" / "trust.md").read_text() == doc


def test_the_docs_tables_are_the_jsons():
    """docs/trust.md's ranking-methods tables are generated from the committed results (``--table-only``)."""
    rm = _script()
    doc = (ROOT / "docs" / "trust.md").read_text()
    assert "## Closing the weight-sharing gap: ranking methods" in doc
    for name in NAMES:
        data = json.loads((ROOT / "benchmarks" / "results" / f"{name}.json").read_text())
        begin, end = rm.markers(name)
        assert f"{begin}\n{rm.table(data)}\n{end}" in doc, name
