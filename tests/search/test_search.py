"""Architecture search on a trained supernet: constraints, costs, weights files, strategies, the CLI."""

from __future__ import annotations

import json
import random
import shutil
import subprocess
import sys

import pytest
import torch

from naspipe.cli import main
from naspipe.models import build_stage
from naspipe.models.weights import WeightsError, load_weights, read_weights, save_weights
from naspipe.search import (
    ConstraintError,
    InfeasibleError,
    ProfileError,
    RunError,
    SearchCosts,
    cost_model,
    measure_profile,
    parse_constraints,
    search_model,
    search_run,
    search_space,
)
from naspipe.spaces.shared import SharedLayers
from naspipe.spaces.space import preset

SPACE = preset("digits-cnn")


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("run") / "digits"
    assert main(["reference", "--space", "digits-cnn", "--subnets", "100", "--optimizer", "adam",
                 "--no-progress", "--out", str(d)]) == 0
    return d


def _same(a, b):
    a, b = dict(a), dict(b)
    a.pop("wall_s"), b.pop("wall_s")
    return a == b


# ---- constraints ------------------------------------------------------------------------------------
@pytest.mark.parametrize("text, metric, limit", [
    ("params<=50k", "params", 50e3), ("params <= 1.5M", "params", 1.5e6), ("params<=20000", "params", 2e4),
    ("latency<=0.8ms", "latency", 0.8e-3), ("latency<=2s", "latency", 2.0), ("latency<=500us", "latency", 5e-4),
    ("latency<=1e2µs", "latency", 1e-4),
])
def test_parse_constraint(text, metric, limit):
    (c,) = parse_constraints(text)
    assert c.metric == metric and c.limit == pytest.approx(limit)


def test_parse_several_constraints():
    cs = parse_constraints(["params<=40k,latency<=1ms"])
    assert [c.metric for c in cs] == ["params", "latency"]
    assert str(cs[0]) == "params<=40k" and str(cs[1]) == "latency<=1ms"
    assert parse_constraints(None) == ()


@pytest.mark.parametrize("text, msg", [
    ("flops<=3", "unknown constraint key"), ("params>=3k", "only upper bounds"), ("params<=abc", "bad number"),
    ("params<=5x", "unknown unit"), ("latency<=2", "needs a unit"), ("latency<=3kg", "unknown unit"),
    ("params<=-5", "bad number"), ("params<=", "bad number"), ("params<=1k,", "empty constraint"),
    ("<=5", "bad constraint"), ("params<=1k,params<=2k", "given twice"), ("params<=1e999", "finite"),
])
def test_bad_constraints(text, msg):
    with pytest.raises(ConstraintError, match=msg):
        parse_constraints(text)


# ---- costs ------------------------------------------------------------------------------------------
def test_cost_model_from_space_and_model():
    model = build_stage(SPACE, range(SPACE.num_blocks), 0, SharedLayers())
    space_costs, real = SearchCosts.from_space(SPACE), cost_model(SPACE, model)
    sub = (0, 1, 4, 0, 2, 5, 3, 0)
    assert space_costs.cost(sub, "latency") == pytest.approx(SPACE.subnet_cost(sub)["fwd"])
    assert space_costs.cost(sub, "params") == SPACE.subnet_cost(sub)["param_bytes"] / 4
    used = {id(p) for b, c in enumerate(sub) for p in model.candidate_parameters(b, c)}
    assert real.cost(sub, "params") == sum(p.numel() for p in model.parameters() if id(p) in used)
    low, cheapest = real.extreme("params")
    assert all(cheapest[b] == 4 for b in SPACE.choice_blocks)  # skip owns no weights
    assert low == real.cost(cheapest, "params")


def test_profile_replaces_latencies_and_rejects_bad_files(tmp_path):
    costs = SearchCosts.from_space(SPACE)
    prof = costs.with_profile({"unit": "ms", "blocks": {"cell0": {"conv3": 2.0}}})
    assert prof.latency[1][0] == pytest.approx(2e-3) and prof.latency[1][1] == costs.latency[1][1]
    for bad, msg in [({"blocks": {"nope": {}}}, "unknown block"), ({"blocks": {"cell0": {"x": 1}}}, "no candidate"),
                     ({"blocks": {"cell0": {"conv3": -1}}}, "finite time"), ({"unit": "h", "blocks": {}}, "unit"),
                     ([], "object"), ({"blocks": {}, "space": "other"}, "for space")]:
        with pytest.raises(ProfileError, match=msg):
            costs.with_profile(bad)
    (tmp_path / "p.json").write_text("{")
    with pytest.raises(ProfileError, match="not a JSON"):
        costs.with_profile_file(tmp_path / "p.json")


def test_measured_profile_round_trips(tmp_path):
    model = build_stage(SPACE, range(SPACE.num_blocks), 0, SharedLayers())
    prof = measure_profile(model, repeats=1)
    assert set(prof["blocks"]) == {b.name for b in SPACE.blocks}
    costs = SearchCosts.from_space(SPACE).with_profile(prof)
    assert all(v >= 0 for row in costs.latency for v in row)
    assert costs.latency_source.startswith("profile (38 measured")


# ---- weights files ----------------------------------------------------------------------------------
def test_weights_round_trip_and_stage_files(tmp_path):
    model = build_stage(SPACE, range(SPACE.num_blocks), 7, SharedLayers())
    with torch.no_grad():
        for p in model.parameters():
            p.add_(1.0)  # differ from a fresh build with the same seed
    save_weights(model, tmp_path / "weights.pt")
    back = load_weights(SPACE, tmp_path, seed=7)
    ref = model.global_named_parameters()
    assert all(torch.equal(p, ref[n]) for n, p in back.global_named_parameters().items())
    # per-stage files with the same names merge to the same model
    stages = tmp_path / "stages"
    stages.mkdir()
    for s, blocks in enumerate((range(0, 4), range(4, SPACE.num_blocks))):
        part = build_stage(SPACE, blocks, 7, SharedLayers())
        save_weights({n: ref[n] for n in part.global_named_parameters()}, stages / f"weights-stage{s}.pt")
    merged = load_weights(SPACE, stages, seed=0)
    assert all(torch.equal(p, ref[n]) for n, p in merged.global_named_parameters().items())
    # a name twice, a missing or unknown name, a wrong shape, a foreign file
    shutil.copy(stages / "weights-stage0.pt", stages / "weights-stage2.pt")
    with pytest.raises(WeightsError, match="more than one"):
        read_weights(stages)
    named = {n: t.detach() for n, t in ref.items()}
    cases = {"missing": {k: v for k, v in list(named.items())[1:]}, "unknown": {**named, "cell0.x.w": torch.zeros(1)},
             "expects": {**named, "stem.conv.bias": torch.zeros(3)}}
    for msg, tensors in cases.items():
        save_weights(tensors, tmp_path / f"{msg}.pt")
        with pytest.raises(WeightsError, match=msg):
            load_weights(SPACE, tmp_path / f"{msg}.pt", seed=7)
    torch.save([1, 2], tmp_path / "list.pt")
    (tmp_path / "junk.pt").write_bytes(b"not a torch file")
    for name, msg in (("list.pt", "dict of parameter"), ("junk.pt", "not a readable")):
        with pytest.raises(WeightsError, match=msg):
            read_weights(tmp_path / name)
    with pytest.raises(WeightsError, match="no such run directory"):
        read_weights(tmp_path / "missing")
    (tmp_path / "empty").mkdir()
    with pytest.raises(WeightsError, match="no weights.pt"):
        read_weights(tmp_path / "empty")


def test_reference_cli_saves_the_trained_weights(run_dir):
    hashes = json.loads((run_dir / "params.json").read_text())
    from naspipe.runfolder.results import param_hashes

    model = load_weights(SPACE, run_dir, seed=0)
    assert param_hashes(model.global_named_parameters()) == hashes


# ---- strategies (pure, synthetic scores) --------------------------------------------------------------
def _synthetic(subnet):
    return {"accuracy": sum(c == 1 for c in subnet) / len(subnet), "loss": float(sum(subnet))}


def test_strategies_are_seeded_distinct_and_respect_constraints():
    costs = SearchCosts.from_space(SPACE)
    cons = parse_constraints("params<=20k,latency<=0.5ms")
    for strategy in ("random", "evolution"):
        a = search_space(SPACE, costs, _synthetic, strategy=strategy, budget=60, constraints=cons, seed=1)
        b = search_space(SPACE, costs, _synthetic, strategy=strategy, budget=60, constraints=cons, seed=1)
        c = search_space(SPACE, costs, _synthetic, strategy=strategy, budget=60, constraints=cons, seed=2)
        assert _same(a.to_dict(), b.to_dict()) and [e.subnet for e in a.evaluated] != [e.subnet for e in c.evaluated]
        assert len({e.subnet for e in a.evaluated}) == 60
        assert all(e.params <= 20e3 and e.latency <= 0.5e-3 for e in a.evaluated)


def test_evolution_beats_random_on_a_synthetic_landscape():
    costs = SearchCosts.from_space(SPACE)
    wins = 0
    for seed in range(5):
        ev = search_space(SPACE, costs, _synthetic, strategy="evolution", budget=80, seed=seed)
        rnd = search_space(SPACE, costs, _synthetic, strategy="random", budget=80, seed=seed)
        wins += ev.best.accuracy > rnd.best.accuracy
    assert wins >= 4


def test_tight_constraint_exhausts_and_infeasible_is_refused():
    costs = SearchCosts.from_space(SPACE)
    low, _ = costs.extreme("params")
    # only the all-skip subnet (and nothing else) fits
    res = search_space(SPACE, costs, _synthetic, strategy="random", budget=10,
                       constraints=parse_constraints(f"params<={low}"), seed=0)
    assert res.exhausted and len(res.evaluated) == 1
    with pytest.raises(InfeasibleError, match="cannot be met"):
        search_space(SPACE, costs, _synthetic, budget=5, constraints=parse_constraints(f"params<={low - 1}"))
    with pytest.raises(ValueError, match="unknown strategy"):
        search_space(SPACE, costs, _synthetic, strategy="grid")
    # the library refuses what the command refuses (budget NaN ran nothing and said nothing; 2.5 ran 3)
    for bad, message in (({"budget": float("nan")}, "budget must be a whole number >= 1, got nan"),
                         ({"budget": 2.5}, "budget must be a whole number"), ({"seed": None}, "seed must be"),
                         ({"population": 0}, "population must be a whole number >= 2, got 0"),
                         ({"sample_size": 0}, "sample_size must")):
        with pytest.raises(ValueError, match=message):
            search_space(SPACE, costs, _synthetic, **{"budget": 5, **bad})
    texts = search_space(SPACE, costs, _synthetic, budget=10, constraints="params<=20k", seed=0)  # as --constraint
    assert texts.constraints == parse_constraints("params<=20k")
    mixed = search_space(SPACE, costs, _synthetic, budget=10, seed=0,
                         constraints=iter([*parse_constraints("params<=20k"), "latency<=0.5ms"]))
    assert mixed.constraints == parse_constraints("params<=20k,latency<=0.5ms")


def test_a_fair_random_search_proposes_every_candidate_equally_often():
    from collections import Counter

    from naspipe.sequences.fair import FairStream

    costs = SearchCosts.from_space(SPACE)
    k = max(b.k for b in SPACE.blocks)
    res = search_space(SPACE, costs, _synthetic, strategy="random", budget=4 * k, seed=3, sampler="fair")
    assert res.settings["sampler"] == "fair"
    subs = [e.subnet for e in res.evaluated]
    assert subs == list(FairStream(SPACE, 3, 4 * k))  # distinct already: the stream's order, in full
    for b in SPACE.choice_blocks:
        assert set(Counter(s[b] for s in subs).values()) == {4 * k // SPACE.blocks[b].k}
    uniform = search_space(SPACE, costs, _synthetic, strategy="random", budget=4 * k, seed=3)
    assert uniform.settings["sampler"] == "uniform" and [e.subnet for e in uniform.evaluated] != subs
    with pytest.raises(ValueError, match="needs training losses"):
        search_space(SPACE, costs, _synthetic, sampler="evolution:4")


# ---- search with inherited weights -------------------------------------------------------------------
def test_search_run_is_reproducible_and_writes_search_json(run_dir):
    kw = {"strategy": "evolution", "budget": 12, "constraints": parse_constraints("params<=30k"), "seed": 3,
          "heldout": 4}
    a = search_run(run_dir, **kw)
    saved = json.loads((run_dir / "search.json").read_text())
    b = search_run(run_dir, **kw, write=False)
    assert _same(a.to_dict(), b.to_dict()) and _same(saved, a.to_dict())
    assert a.best.subnet == b.best.subnet and a.best.params <= 30e3
    assert saved["best"]["rank"] == 1 and len(saved["evaluated"]) == 12 and saved["settings"]["heldout_batches"] == 4
    accs = [e.accuracy for e in a.top(12)]
    assert accs == sorted(accs, reverse=True)
    for bad in ({"heldout": 2.5}, {"heldout": "3"}, {"top": None}):  # (TypeErrors deep inside)
        with pytest.raises(RunError, match="must be a whole number >= "):
            search_run(run_dir, **{**kw, **bad})
    assert search_run(run_dir, **kw, top=0).best.subnet == a.best.subnet  # (naspipe search --top 0: no table)


def test_search_model_with_random_weights():
    model = build_stage(SPACE, range(SPACE.num_blocks), 0, SharedLayers())
    from naspipe.models import heldout_batches

    res = search_model(model, strategy="random", budget=5, seed=0, batches=heldout_batches(SPACE, 2))
    assert len(res.evaluated) == 5 and 0.0 <= res.best.accuracy <= 1.0
    assert "rank" in res.table(3) and len(res.table(3).splitlines()) == 4


def test_accuracy_vs_cost_figure():
    from naspipe.search import accuracy_vs_cost

    costs = SearchCosts.from_space(SPACE)
    res = [search_space(SPACE, costs, _synthetic, strategy=s, budget=10, constraints=parse_constraints("params<=20k"))
           for s in ("random", "evolution")]
    fig = accuracy_vs_cost(res, "params")
    assert [t.name.split(" (")[0] for t in fig.data] == ["random", "chosen by random", "evolution",
                                                          "chosen by evolution"]
    assert len(fig.data[0].x) == 10 and fig.data[1].marker.symbol == "star"
    assert fig.layout.shapes[0].x0 == 20e3  # the constraint line
    assert accuracy_vs_cost(res[0], "latency").data[0].x[0] == pytest.approx(res[0].evaluated[0].latency * 1e3)
    with pytest.raises(ValueError, match="metric"):
        accuracy_vs_cost(res, "flops")


# ---- command line -----------------------------------------------------------------------------------
def test_cli_search_prints_json_and_a_table(run_dir, capsys):
    args = ["search", str(run_dir), "--budget", "6", "--heldout", "2", "--seed", "1", "--strategy", "random"]
    assert main([*args, "--json", "--constraint", "params<=40k", "--top", "3"]) == 0
    out = capsys.readouterr().out
    assert out.count("\n") == 1
    obj = json.loads(out)
    assert obj["strategy"] == "random" and len(obj["top"]) == 3 and obj["constraints"] == ["params<=40k"]
    assert main([*args, "--constraint", "latency<=0.9ms"]) == 0
    out = capsys.readouterr().out
    assert "best:" in out and "rank  accuracy" in out and "search.json" in out


def test_cli_search_with_profile(run_dir, tmp_path, capsys):
    prof = tmp_path / "prof.json"
    prof.write_text(json.dumps({"unit": "ms", "blocks": {f"cell{i}": {"conv5": 5.0} for i in range(6)}}))
    assert main(["search", str(run_dir), "--budget", "8", "--heldout", "1", "--profile", str(prof),
                 "--constraint", "latency<=5ms", "--json"]) == 0
    obj = json.loads(capsys.readouterr().out)
    assert all("conv5" not in r["names"] for r in obj["evaluated"])
    assert obj["settings"]["latency_source"].startswith("prof.json")


def test_cli_search_bad_input_exit_2(run_dir, tmp_path, capsys):
    no_weights = tmp_path / "noweights"
    no_weights.mkdir()
    shutil.copy(run_dir / "metrics.json", no_weights / "metrics.json")
    bad_metrics = tmp_path / "badmetrics"
    shutil.copytree(run_dir, bad_metrics)
    (bad_metrics / "metrics.json").write_text("{}")
    bad_prof = tmp_path / "p.json"
    bad_prof.write_text('{"blocks": {"nope": {}}}')
    cases = [
        ([str(tmp_path / "missing")], "no such run directory"),
        ([str(no_weights)], "no weights.pt"),
        ([str(tmp_path)], "no metrics.json"),
        ([str(bad_metrics)], "config"),
        ([str(run_dir), "--constraint", "flops<=1"], "unknown constraint key"),
        ([str(run_dir), "--constraint", "params<=12q"], "unknown unit"),
        ([str(run_dir), "--constraint", "latency<=3"], "needs a unit"),
        ([str(run_dir), "--constraint", "params<=10"], "cannot be met"),
        ([str(run_dir), "--budget", "0"], "--budget"),
        ([str(run_dir), "--strategy", "grid"], "invalid choice"),
        ([str(run_dir), "--profile", str(bad_prof)], "unknown block"),
        ([str(run_dir), "--profile", str(tmp_path / "none.json")], "cannot read profile"),
        ([str(run_dir), "--heldout", "999"], "held-out"),
        ([str(run_dir), "--population", "4", "--sample-size", "5"], "exceeds"),
        ([str(run_dir), "--space", "tiny-transformer"], "trained space"),
        ([str(run_dir), "--sampler", "fair:2"], "takes no argument"),
        ([str(run_dir), "--sampler", "evolution"], "needs training losses"),
    ]
    for argv, msg in cases:
        assert main(["search", *argv, "--budget", "2"] if "--budget" not in argv else ["search", *argv]) == 2, argv
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and msg in err, (argv, err)


def test_search_package_and_cli_parser_import_no_torch():
    code = ("import sys, naspipe.search, naspipe.cli; naspipe.cli.build_parser(); "
            "print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_random_module_state_is_untouched(run_dir):
    random.seed(123)
    expect = random.random()
    random.seed(123)
    search_run(run_dir, strategy="evolution", budget=3, heldout=1, write=False)
    assert random.random() == expect


def test_latency_is_written_in_the_plot_axis_unit():
    from naspipe.search.constraints import format_cost

    assert format_cost("latency", 4.1e-5) == "0.041ms"  # the accuracy-vs-latency axis is in ms: not "41us"
    assert format_cost("latency", 6e-4) == "0.6ms" and format_cost("latency", 2.5) == "2.5s"
    assert format_cost("params", 12_300) == "12.3k"
