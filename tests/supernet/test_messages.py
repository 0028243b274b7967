"""Refusals of structured messages name what is wrong (issue 43, item 12).

An 8-dimensional tuple leaf that ends a stage used to fail only at run time (``TransportError: cannot send a 8-d
tensor``, block and candidate unnamed) where docs/cell-spaces.md promises a refusal before start; candidates whose
structured outputs differ in a leaf's dtype or in a dict's key order were refused with two identical descriptions.
Now the refusal before start names the block, the candidate and the leaf, and the probe says what differs
(``naspipe.supernet.messages.difference``). No process starts here.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import naspipe
from naspipe.cli import main
from naspipe.supernet.declare import SupernetError
from naspipe.supernet.messages import difference
from naspipe.supernet.validate import probe_supernet

MODULE = '''
import torch
import torch.nn.functional as F
from torch import nn
import naspipe


class Deep(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(4, 4)

    def forward(self, x):
        y = self.a(x)
        return (y, y.reshape(8, 4, 1, 1, 1, 1, 1, 1))


class Head(nn.Module):
    def __init__(self):
        super().__init__()
        self.h = nn.Linear(4, 2)

    def forward(self, m):
        return self.h(m[0])


def data(j, g):
    x = torch.randn(8, 4, generator=g)
    return x, (x.sum(1) > 0).long()


def deep_leaf():
    return naspipe.Supernet([naspipe.Choice("cell", {"x": Deep, "y": Deep}), naspipe.Fixed("head", Head)],
                            data=data, loss=F.cross_entropy, batch_size=8)
'''


def test_an_8d_leaf_that_ends_a_stage_is_refused_before_start_naming_block_candidate_and_leaf(tmp_path, capsys,
                                                                                              monkeypatch):
    (tmp_path / "deep_cells.py").write_text(MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    out = tmp_path / "out"
    rc = main(["train", "--space", "deep_cells:deep_leaf", "--stages", "2", "--subnets", "4", "--out", str(out),
               "--no-progress"])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and "\n" not in err, err
    assert "block 0 ('cell'), candidate 0 ('x'" in err and "returned a tensor of 8 dims (tuple element [1]); a " \
           "message's tensors have at most 7 dims" in err and "ends a stage" in err, err
    assert not out.exists()
    # inside a stage it may stay: one stage sends nothing
    from naspipe.runtime.config import TrainConfig
    from naspipe.runtime.preparation import check_model_of

    check_model_of(TrainConfig.create("deep_cells:deep_leaf", tmp_path / "one", stages=1, subnets=2))


class Pair(nn.Module):
    def __init__(self, kind: str):
        super().__init__()
        self.a = nn.Linear(4, 4)
        self.kind = kind

    def forward(self, x: torch.Tensor):  # noqa: ANN201
        y = self.a(x)
        return {"float64": lambda: (y, y.double()), "float32": lambda: (y, y + 1),
                "ab": lambda: {"a": y, "b": y + 1}, "ba": lambda: {"b": y + 1, "a": y}}[self.kind]()


class Head(nn.Module):
    def __init__(self):
        super().__init__()
        self.h = nn.Linear(4, 2)

    def forward(self, m) -> torch.Tensor:  # noqa: ANN001
        return self.h((m["a"] if isinstance(m, dict) else m[0]).float())


def _data(j: int, g: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    x = torch.randn(4, 4, generator=g)
    return x, (x.sum(1) > 0).long()


@pytest.mark.parametrize("first,second,says", [
    ("float32", "float64", "tuple of 2 [(4, 4), (4, 4)] that differ: tuple element [1]: (4, 4) float32 against "
                           "(4, 4) float64;"),
    ("ab", "ba", "dict of 2 [(4, 4), (4, 4)] that differ: leaves ['a'], ['b'] against ['b'], ['a'] (the same "
                 "leaves in another order: a dict keeps its keys in the order they were set);"),
])
def test_candidates_whose_messages_differ_in_a_dtype_or_key_order_are_told_apart(first, second, says):
    sn = naspipe.Supernet([naspipe.Choice("l0", {"x": lambda: Pair(first), "y": lambda: Pair(second)}),
                           naspipe.Fixed("head", Head)], data=_data, loss=F.cross_entropy, batch_size=4)
    with pytest.raises(SupernetError) as e:
        probe_supernet(sn)
    assert f"block 'l0': candidates 'x' and 'y' give outputs {says}" in str(e.value), e.value


def test_difference_names_the_first_thing_that_differs():
    t = torch.zeros(2, 3)
    assert difference(t, torch.zeros(2, 3)) == ""
    assert difference(t, torch.zeros(2, 4)) == "(2, 3) float32 against (2, 4) float32"
    assert difference((t, t), [t, t]) == "a tuple against a list"
    assert difference((t, t), (t, t, t)) == "leaves [0], [1] against [0], [1], [2]"
    assert difference({"a": (t, t.long())}, {"a": (t, t)}) == "dict element ['a'][1]: (2, 3) int64 against " \
                                                             "(2, 3) float32"
    assert difference(t, (t,)).startswith("(2, 3) float32 against tuple of 1")
    assert difference({"a": t}, {"a": t}) == ""
