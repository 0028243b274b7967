"""One layout at every block boundary (``naspipe.supernet.messages.at_boundary``): whatever view a block returns,
every trainer and every partition gives the next block the same layout, forward and backward.

The property: supernets whose candidates return transposed, permuted, channels-last, expanded, sliced, offset and
overlapping views, as plain tensors and as tuple and dict leaves (``tests/helpers/layout_supernets.py``, drawn
from two seeds), trained on 1, 2 and 3 stages, with two replicas and with the split backward, are bit-identical
to the sequential reference. Without the boundary rule, 2 and 3 stages differ from the reference here (checked by
removing the one call in ``StageModel.forward``).
"""

from __future__ import annotations

import pytest
import torch

from naspipe.cli import main
from naspipe.supernet import messages
from tests.helpers.layout_supernets import LAYOUTS

pytestmark = pytest.mark.usefixtures("no_process_left_behind")

COMMON = ["--subnets", "12", "--no-progress"]


def _view(name: str) -> torch.Tensor:
    y = torch.randn(8, 4, 4, 8, requires_grad=True)
    return LAYOUTS[name](y * 1.0)


@pytest.mark.parametrize("name", sorted(LAYOUTS))
def test_every_layout_is_canonical_after_the_boundary_forward_and_backward(name):
    x = torch.randn(8, 4, 4, 8, requires_grad=True)
    v = LAYOUTS[name](x * 1.0)
    out = messages.at_boundary(v)
    assert messages.is_canonical(out) and torch.equal(out, v)
    if name == "plain":
        assert out is v  # a plain contiguous output passes unchanged: no copy, the old bits
    seen = []
    v.register_hook(seen.append)  # what the block's own backward receives
    grad = torch.randn(8, 4, 8, 4).transpose(2, 3)  # a gradient that arrives transposed
    assert not messages.is_canonical(grad)
    out.backward(grad)
    assert messages.is_canonical(seen[0]) and torch.equal(seen[0], grad)


def test_a_leaf_in_two_places_stays_one_tensor():
    y = torch.randn(8, 4, 4, 8).transpose(2, 3)
    msg = {"a": y, "b": (y, y * 1.0)}
    out = messages.at_boundary(msg)
    assert out["a"] is out["b"][0] and messages.is_canonical(out["a"]) and torch.equal(out["a"], y)


def _trained(tmp_path, space: str, name: str, *extra: str) -> str:  # noqa: ANN001
    out = tmp_path / name
    assert main(["train", "--space", space, *COMMON, "--out", str(out), *extra]) == 0
    return str(out)


def _reference(tmp_path, space: str, name: str = "ref", *extra: str) -> str:  # noqa: ANN001
    out = tmp_path / name
    assert main(["reference", "--space", space, *COMMON, "--out", str(out), *extra]) == 0
    return str(out)


@pytest.mark.parametrize("space,runs", [
    ("layout_supernets:permuted_only", [("s1", "--stages", "1"), ("s2", "--stages", "2"), ("s3", "--stages", "3")]),
    ("layout_supernets:seed0", [("s2", "--stages", "2"), ("s3", "--stages", "3")]),
    ("layout_supernets:seed1", [("s2", "--stages", "2"), ("bw3", "--stages", "3", "--policy", "csp-bw")]),
])
def test_every_partition_of_every_layout_verifies_against_the_reference(tmp_path, capsys, space, runs):
    ref = _reference(tmp_path, space)
    for name, *extra in runs:
        run = _trained(tmp_path, space, name, *extra)
        capsys.readouterr()
        assert main(["verify", run, ref]) == 0, (name, capsys.readouterr().out)


def test_replicas_see_the_same_layouts(tmp_path, capsys):
    space = "layout_supernets:seed0"
    ref = _reference(tmp_path, space, "ref2", "--replicas", "2")
    run = _trained(tmp_path, space, "r2", "--stages", "2", "--replicas", "2")
    capsys.readouterr()
    assert main(["verify", run, ref]) == 0, capsys.readouterr().out
