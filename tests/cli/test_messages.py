"""Messages that used to mislead or corrupt output (issue 28, item 11), one test each: a policy option given
twice, a plan ranking first a split train refuses, user prints inside ``--json`` output, ``--space`` syntax,
the reference's help for options it ignores, search's hint for a module:function space."""

from __future__ import annotations

import json

import pytest

from naspipe.cli import main


def test_a_policy_option_given_twice_is_refused(tmp_path, capsys):
    out = tmp_path / "o"
    base = ["train", "--space", "digits-cnn", "--stages", "2", "--subnets", "4", "--out", str(out), "--no-progress"]
    assert main([*base, "--policy", "csp-plan:plan=1", "--policy-option", "plan=7"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == ("naspipe: error: --policy-option plan=7 sets csp-plan option 'plan', which --policy "
                   "csp-plan:plan=1 already sets; give each option once"), err
    assert main([*base, "--policy", "csp-plan", "--policy-option", "plan=1", "--policy-option", "plan=7"]) == 2
    assert "which --policy-option plan=1 already sets" in capsys.readouterr().err
    assert not out.exists()
    assert main(["simulate", "--space", "unit-k4", "--subnets", "4", "--policy", "csp-plan:plan=1,plan=7"]) == 2
    assert "csp-plan option 'plan' is given twice (plan=1, plan=7); give each option once" in capsys.readouterr().err


def test_plan_does_not_rank_a_split_train_refuses(capsys):
    """BatchNorm on a shard of one sample: train refuses --replicas 4 for batch 4, so plan leaves 1 x 4 out."""
    assert main(["plan", "--devices", "4", "--space", "hunt_supernets:batchnorm", "--subnets", "10", "--json"]) == 0
    out, err = capsys.readouterr()
    res = json.loads(out)
    assert [(r["stages"], r["replicas"]) for r in res["rows"]] == [(2, 2)]
    assert [(r["stages"], r["replicas"]) for r in res["refused"]] == [(1, 4)]
    assert "Expected more than 1 value per channel" in res["refused"][0]["reason"]
    assert "naspipe: note: 1 x 4 left out: train refuses --replicas 4: " in err


def test_what_a_user_module_prints_while_loading_does_not_corrupt_json(tmp_path, capsys, monkeypatch):
    (tmp_path / "chatty_supernet_mod.py").write_text(
        "print('importing my supernet')\n"
        "from hunt_supernets import three_blocks\n"
        "def supernet():\n"
        "    print('building it')\n"
        "    return three_blocks()\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert main(["simulate", "--space", "chatty_supernet_mod:supernet", "--stages", "2", "--subnets", "5",
                 "--json"]) == 0
    out, err = capsys.readouterr()
    assert json.loads(out)["subnets"] == 5
    assert "importing my supernet" in err and "building it" in err


def test_a_space_that_is_no_function_says_the_syntax(capsys):
    assert main(["simulate", "--space", "json:supernet"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "module 'json' has no function 'supernet'; --space takes module:function" in err
    assert "the path of a JSON space file (ending .json), or a preset name" in err


def test_the_reference_help_says_it_ignores_the_schedule_options(capsys):
    with pytest.raises(SystemExit):
        main(["reference", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "--policy POLICY accepted and ignored: the reference trains one subnet at a time" in text
    assert "--stages STAGES accepted and ignored" in text and "--window WINDOW accepted and ignored" in text
    assert "csp-cp with a plan" not in text


def test_search_of_a_module_function_run_says_to_make_the_module_importable(tmp_path, capsys):
    (tmp_path / "weights.pt").write_bytes(b"")
    (tmp_path / "metrics.json").write_text(json.dumps({"config": {"space": "gone_module_xyz:supernet", "seed": 0}}))
    assert main(["search", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "JSON file" not in err
    assert "a module:function: search needs module 'gone_module_xyz' importable here, its folder on PYTHONPATH" in err
