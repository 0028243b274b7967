"""Search spaces: JSON round trip, one clear SpaceError per malformed field, and the presets' shape."""

from __future__ import annotations

import json
import statistics

import pytest

from naspipe.spaces.space import (
    SearchSpace,
    SpaceError,
    UnknownSpace,
    load_space,
    preset,
    preset_names,
    resolve_space,
    space_from_dict,
)

CAND = {"name": "a", "fwd": 1.0, "bwd": 2.0}


def _space(blocks: list, **top: object) -> dict:
    return {"name": "s", "blocks": blocks, **top}


def _one(**cand: object) -> dict:
    """A space of one choice block whose single candidate has the given fields."""
    return _space([{"name": "b", "candidates": [cand]}])


# ---- round trip ----------------------------------------------------------------------------------
@pytest.mark.parametrize("name", preset_names())
def test_presets_round_trip_through_json(name: str) -> None:
    sp = preset(name)
    again = space_from_dict(json.loads(sp.to_json()), source="x.json")
    assert again == sp
    assert again.to_dict() == sp.to_dict()


def test_load_space_reads_what_to_json_wrote(tmp_path) -> None:
    sp = preset("tiny-transformer")
    p = tmp_path / "tiny.json"
    p.write_text(sp.to_json())
    assert load_space(p) == sp
    assert resolve_space(str(p)) == sp
    assert resolve_space(sp) is sp


def test_minimal_space_gets_defaults() -> None:
    sp = space_from_dict({"blocks": [{"candidates": [{}]}, {"fixed": True, "candidates": [{"fwd": 0}]}]}, "m.json")
    assert sp.name == "m.json"
    assert sp.num_blocks == 2 and sp.choice_blocks == (0,) and sp.fixed_blocks == (1,)
    assert sp.blocks[0].name == "block0" and sp.blocks[0].candidates[0].name == "c0"
    assert sp.batch_size == 1 and sp.message_bytes == 0
    assert isinstance(sp.blocks[0].candidates[0].param_bytes, int)


# ---- malformed input: each field, one clear message ------------------------------------------------
BAD = {
    "not an object": ([], "top level must be a JSON object"),
    "unknown top-level field": ({**_space([{"candidates": [CAND]}]), "foo": 1}, r"unknown field\(s\) \['foo'\]"),
    "missing blocks": ({"name": "s"}, "'blocks' must be a non-empty list"),
    "empty blocks": (_space([]), "'blocks' must be a non-empty list"),
    "blocks not a list": (_space({"b": 1}), "'blocks' must be a non-empty list"),
    "empty name": ({"name": "", "blocks": [{"candidates": [CAND]}]}, "'name' must be a non-empty string"),
    "model not an object": (_space([{"candidates": [CAND]}], model=[]), "'model' must be an object"),
    "batch_size 0": (_space([{"candidates": [CAND]}], batch_size=0), "'batch_size' must be >= 1"),
    "fractional batch_size": (_space([{"candidates": [CAND]}], batch_size=2.5), "'batch_size' must be a whole"),
    "negative message_bytes": (_space([{"candidates": [CAND]}], message_bytes=-1), "'message_bytes'"),
    "block not an object": (_space([3]), r"blocks\[0\] must be an object"),
    "unknown block field": (_space([{"candidates": [CAND], "k": 3}]), r"blocks\[0\]: unknown field\(s\) \['k'\]"),
    "missing candidates": (_space([{"name": "b"}]), r"blocks\[0\]: field 'candidates' must be a non-empty list"),
    "empty candidates": (_space([{"candidates": []}]), "'candidates' must be a non-empty list"),
    "candidates not a list": (_space([{"candidates": {"a": CAND}}]), "'candidates' must be a non-empty list"),
    "fixed block with 2 candidates": (_space([{"fixed": True, "candidates": [CAND, CAND]}]),
                                      "a fixed block has exactly 1 candidate, got 2"),
    "fixed not a bool": (_space([{"fixed": "yes", "candidates": [CAND]}]), "'fixed' must be true or false"),
    "role not a string": (_space([{"role": 3, "candidates": [CAND]}]), "'role' must be a string"),
    "duplicate block names": (_space([{"name": "b", "candidates": [CAND]}, {"name": "b", "candidates": [CAND]}]),
                              r"blocks\[1\]: duplicate block name 'b'"),
    "candidate not an object": (_space([{"candidates": [3]}]), r"candidates\[0\] must be an object"),
    "unknown candidate field": (_one(fwdd=1), r"unknown field\(s\) \['fwdd'\]"),
    "op not a string": (_one(op=3), "'op' must be strings"),
    "args not an object": (_one(args=[]), "'args' must be an object"),
    "negative fwd": (_one(fwd=-1), "'fwd' must be a finite number >= 0, got -1"),
    "negative bwd": (_one(bwd=-0.5), "'bwd' must be a finite number >= 0"),
    "NaN fwd": (_one(fwd=float("nan")), "'fwd' must be a finite number >= 0, got nan"),
    "infinite bwd": (_one(bwd=float("inf")), "'bwd' must be a finite number >= 0, got inf"),
    "bool cost": (_one(fwd=True), "'fwd' must be a number, got True"),
    "string cost": (_one(bwd="2"), "'bwd' must be a number, got '2'"),
    "null cost": (_one(fwd=None), "'fwd' must be a number, got None"),
    "fractional param_bytes": (_one(param_bytes=1.5), "'param_bytes' must be a whole number, got 1.5"),
    "fractional act_bytes": (_one(act_bytes=0.25), "'act_bytes' must be a whole number"),
    "negative act_bytes": (_one(act_bytes=-4), "'act_bytes' must be a finite number >= 0"),
    "bwd_input_share > 1": (_one(bwd_input_share=1.5), r"'bwd_input_share' must lie in \[0, 1\]"),
    "negative bwd_input_share": (_one(bwd_input_share=-0.1), "'bwd_input_share' must be a finite number >= 0"),
}


@pytest.mark.parametrize("case", list(BAD))
def test_malformed_field_is_a_clear_space_error(case: str) -> None:
    data, message = BAD[case]
    with pytest.raises(SpaceError, match=message) as info:
        space_from_dict(data, source="bad.json")
    text = str(info.value)
    assert text.startswith("bad.json")  # names the file
    assert "\n" not in text  # one line


def test_invalid_json_text_reports_line_and_column(tmp_path) -> None:
    p = tmp_path / "broken.json"
    p.write_text('{\n  "name": "s",\n  "blocks": [\n    {"candidates": [{"fwd": 1,}]}\n  ]\n}\n')
    with pytest.raises(SpaceError, match=r"broken\.json: not valid JSON \(line 4, column \d+"):
        load_space(p)


def test_malformed_file_names_the_field(tmp_path) -> None:
    p = tmp_path / "neg.json"
    p.write_text(json.dumps(_one(fwd=-3)))
    with pytest.raises(SpaceError, match=r"neg\.json: blocks\[0\]\.candidates\[0\]: field 'fwd'"):
        load_space(p)


def test_missing_file_is_a_space_error(tmp_path) -> None:
    with pytest.raises(SpaceError, match="cannot read space file"):
        load_space(tmp_path / "nope.json")
    with pytest.raises(SpaceError, match="cannot read space file"):
        resolve_space(str(tmp_path / "nope.json"))


def test_directory_is_a_space_error(tmp_path) -> None:
    with pytest.raises(SpaceError, match="cannot read space file"):
        load_space(tmp_path)


def test_undecodable_file_is_a_space_error(tmp_path) -> None:
    """A file that is not UTF-8 text (e.g. a binary picked by mistake) is bad input, not a crash."""
    p = tmp_path / "binary.json"
    p.write_bytes(b"\xff\xfe\x00\x01 not text")
    with pytest.raises(SpaceError, match=r"binary\.json"):
        load_space(p)


def test_unknown_preset_lists_the_presets() -> None:
    with pytest.raises(UnknownSpace, match="unknown space 'naspipe-large'.*naspipe-k48") as e:
        resolve_space("naspipe-large")
    assert e.value.name == "naspipe-large"  # what naspipe rank asks of a run's recorded space, not the message
    with pytest.raises(SpaceError, match="K must be >= 1") as k:
        preset("naspipe-k0")
    assert not isinstance(k.value, UnknownSpace)  # a preset's family, with a K it refuses


def test_validate_subnet() -> None:
    sp = preset("digits-cnn")
    ok = tuple(0 for _ in sp.blocks)
    assert sp.validate_subnet(list(ok)) == ok
    with pytest.raises(SpaceError, match="subnet has 2 choices"):
        sp.validate_subnet([0, 0])
    bad = list(ok)
    bad[1] = sp.blocks[1].k
    with pytest.raises(SpaceError, match="block 1"):
        sp.validate_subnet(bad)
    bad[1] = 0.0  # a float is not a choice
    with pytest.raises(SpaceError):
        sp.validate_subnet(bad)


# ---- presets ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("k", [12, 24, 48, 96])
def test_naspipe_presets_have_the_evaluation_shape(k: int) -> None:
    sp = preset(f"naspipe-k{k}")
    assert isinstance(sp, SearchSpace) and sp.name == f"naspipe-k{k}"
    assert sp.num_blocks == 50
    assert len(sp.choice_blocks) == 48
    assert sp.fixed_blocks == (0, 49)
    assert sp.blocks[0].role == "embed" and sp.blocks[-1].role == "head"
    roles = [sp.blocks[i].role for i in sp.choice_blocks]
    assert roles == ["encoder"] * 24 + ["decoder"] * 24
    for i in sp.choice_blocks:
        assert sp.blocks[i].k == k and not sp.blocks[i].fixed
    for b in sp.blocks:
        for c in b.candidates:
            assert c.fwd > 0 and c.bwd == pytest.approx(2 * c.fwd, rel=0.05)  # backward ~2x forward
            assert c.param_bytes > 0 and c.act_bytes > 0
    # candidates differ in cost (attention, convolution, gated linear)
    fwd = [c.fwd for c in sp.blocks[1].candidates]
    assert max(fwd) > 1.5 * min(fwd)
    assert statistics.pstdev(fwd) > 0
    assert {c.op for c in sp.blocks[1].candidates} >= {"attention", "conv", "glu"}
    assert len({c.name for c in sp.blocks[1].candidates}) == k


def test_unit_presets_are_the_bubble_model() -> None:
    for k in (12, 24, 48, 96):
        sp = preset(f"unit-k{k}")
        assert sp.num_blocks == 32 and not sp.fixed_blocks
        assert all(b.k == k for b in sp.blocks)
        eight = range(8)
        assert sum(sp.candidate(b, 0).fwd for b in eight) == pytest.approx(1.0)
        assert sum(sp.candidate(b, 0).bwd for b in eight) == pytest.approx(1.0)
    bw = preset("unit-bw-k48")
    assert sum(bw.candidate(b, 0).bwd for b in range(8)) == pytest.approx(2.0)
    assert sum(bw.candidate(b, 0).bwd_weight for b in range(8)) == pytest.approx(1.0)


@pytest.mark.parametrize("name", ["tiny-transformer", "digits-cnn"])
def test_small_trainable_presets(name: str) -> None:
    sp = preset(name)
    assert sp.choice_blocks and sp.fixed_blocks
    assert sp.model.get("kind") in {"transformer", "cnn"}


def test_subnet_cost_sums_the_chosen_candidates() -> None:
    sp = preset("unit-k12")
    sub = tuple(0 for _ in sp.blocks)
    c = sp.subnet_cost(sub, range(8))
    assert c["fwd"] == pytest.approx(1.0) and c["bwd"] == pytest.approx(1.0)
    assert c["bwd_input"] + c["bwd_weight"] == pytest.approx(c["bwd"])
    assert sp.subnet_cost(sub)["fwd"] == pytest.approx(4.0)
