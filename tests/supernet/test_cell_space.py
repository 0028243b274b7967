"""Structured messages and a cell search space (issue 27, item 1): ``data/supernets/nb201_digits.py``.

A NAS-Bench-201-style cell whose blocks pass the live node states as a tuple trains on 2 and 3 stages, with
``--replicas 2``, with ``csp-bw`` and killed and resumed, each bit-identical to ``naspipe reference``; the bytes
each stage boundary reports are the sum of the distinct node states it carried (not a stacked copy); a block
whose output has a non-tensor leaf gets one line and exit 2 before any process starts; the transport's
structured packing keeps every payload's bits and agrees on every transfer's size.

In-process ``naspipe`` calls: ``data/supernets`` is put on ``sys.path`` here, which the stage processes inherit.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch
from torch import nn

import naspipe
from naspipe.cli import main
from naspipe.runtime.transport.comm import ACTIVATION, GRADIENT, HEADER_BYTES, Packing, encode_tree
from naspipe.supernet import messages

pytestmark = pytest.mark.usefixtures("no_process_left_behind")

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "data" / "supernets"))
SPEC = "nb201_digits:supernet"
STATE_BYTES = 32 * 8 * 8 * 8 * 4  # one node state: batch 32, 8 channels, 8 x 8, float32
LIVE = [1, 2, 3, 3, 3, 2, 1]  # node states a message carries after the stem and after each edge of the cell


def _common(n: int, *extra: str) -> list[str]:
    return ["--space", SPEC, "--subnets", str(n), "--seed", "4", "--no-progress", *extra]


@pytest.fixture(scope="module")
def refs(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("refs")
    out = {}
    for name, extra in (("frozen", ()), ("serial", ("--shared-layers", "serial")), ("replicas", ("--replicas", "2")),
                        ("delayed", ("--shared-layers", "delayed:2"))):
        out[name] = root / name
        assert main(["reference", *_common(16, *extra), "--out", str(out[name])]) == 0
    return out


@pytest.mark.parametrize(("stages", "policy", "ref", "extra"), [
    (2, "csp", "frozen", ()),
    (3, "csp", "serial", ("--shared-layers", "serial", "--jitter-ms", "1")),
    (2, "csp-bw", "serial", ("--shared-layers", "serial", "--jitter-ms", "1")),
    (3, "csp-bw", "frozen", ()),
    (2, "csp", "replicas", ("--replicas", "2")),
    (2, "csp", "delayed", ("--shared-layers", "delayed:2")),
], ids=["2-stages", "3-stages-serial", "csp-bw-serial", "csp-bw-3-stages", "replicas-2", "delayed-2"])
def test_the_cell_space_trains_identical_to_its_reference(tmp_path, refs, stages, policy, ref, extra):
    out = tmp_path / "run"
    assert main(["train", *_common(16, *extra), "--stages", str(stages), "--policy", policy, "--out", str(out)]) == 0
    assert main(["verify", str(out), str(refs[ref])]) == 0
    m = json.loads((out / "metrics.json").read_text())
    assert len(m["boundaries"]) == stages - 1 and all(b["structured"] for b in m["boundaries"])


def test_killed_and_resumed_the_cell_space_is_identical_to_its_reference(tmp_path, refs):
    run = tmp_path / "run"
    common = _common(16, "--stages", "2", "--checkpoint-every", "5")
    assert main(["train", *common, "--out", str(run), "--fault", "kill:1:12"]) == 1
    assert json.loads((run / "status.json").read_text())["checkpoint"] == 10
    assert main(["train", *common, "--resume", str(run)]) == 0
    assert main(["verify", str(run), str(refs["frozen"])]) == 0


def _expected_activation_bytes(run: Path, stop: int) -> list[int]:
    """Per subnet of ``run``: the bytes of the distinct tensors of block ``stop - 1``'s output (the message)."""
    from naspipe.models import build_stage, input_of, make_batch
    from naspipe.spaces.shared import SharedLayers

    space = naspipe.resolve_space(SPEC)
    model = build_stage(space, range(stop), 4, SharedLayers())
    subnets = json.loads((run / "sequence.json").read_text())["subnets"]
    x = input_of(space, make_batch(space, 4, 0))
    out = []
    with torch.no_grad():
        for sub in subnets:
            idx = naspipe.subnet_tuple(space, sub) if isinstance(sub, dict) else tuple(sub)
            out.append(messages.nbytes(model(x, idx)))
    return out


def test_stage_messages_carry_the_live_node_states_once(tmp_path, capsys):
    out = tmp_path / "run"
    assert main(["train", *_common(12), "--stages", "2", "--out", str(out)]) == 0
    assert "messages per stage boundary: 0->1 " in capsys.readouterr().out
    m = json.loads((out / "metrics.json").read_text())
    (b,) = m["boundaries"]
    stop = json.loads((out / "parts" / "stage0.json").read_text())["blocks"][1]
    expected = _expected_activation_bytes(out, stop)
    assert b["messages"] == 12 and b["activation_total_bytes"] == sum(expected)
    assert b["activation_bytes"] == max(expected) <= LIVE[stop - 1] * STATE_BYTES < 4 * STATE_BYTES
    assert b["activation_tensors"] <= LIVE[stop - 1]
    assert b["gradient_bytes"] <= b["activation_bytes"]


# ---- refused before start ------------------------------------------------------------------------------
BAD_MODULE = '''
import torch
import torch.nn.functional as F
from torch import nn

import naspipe


class Pair(nn.Module):
    def __init__(self, extra):
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.extra = extra

    def forward(self, x):
        return (self.lin(x[0] if isinstance(x, tuple) else x), self.extra)


class Head(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 3)

    def forward(self, x):
        return self.lin(x[0] if isinstance(x, tuple) else x)


def data(j, g):
    return torch.randn(8, 4, generator=g), torch.randint(0, 3, (8,), generator=g)


def _sn(extra):
    return naspipe.Supernet([naspipe.Fixed("stem", lambda: Pair(extra)),
                             naspipe.Choice("mid", {"a": lambda: Pair(extra)}), naspipe.Fixed("head", Head)],
                            data=data, loss=F.cross_entropy, batch_size=8)


def float_leaf():
    return _sn(0.5)


def string_leaf():
    return _sn("hello")


def complex_leaf():
    return _sn(torch.zeros(8, 2, dtype=torch.complex64))


class Nothing(nn.Module):
    def forward(self, x):
        return None


def no_message():
    return naspipe.Supernet([naspipe.Fixed("stem", Nothing), naspipe.Fixed("head", Head)], data=data,
                            loss=F.cross_entropy, batch_size=8)
'''


@pytest.mark.parametrize(("function", "message"), [
    ("float_leaf", "block 'stem', candidate 'stem': forward returned a tuple element [1] that is a float, not a "
                   "tensor; every leaf of a message must be a tensor"),
    ("string_leaf", "block 'stem', candidate 'stem': forward returned a tuple element [1] that is a str, not a tensor"),
    ("complex_leaf", "block 1 ('mid'), candidate 0 ('a', op 'user', args {}): forward returned a tensor of dtype "
                     "torch.complex64 (tuple element [1]); this block's output ends a stage"),  # (inside: it may stay)
    ("no_message", "block 'stem', candidate 'stem': forward returned NoneType, not a tensor nor a tuple, list or "
                   "dict of tensors"),
])
def test_a_block_output_that_is_no_message_is_one_line_exit_2_before_start(tmp_path, capsys, monkeypatch, function,
                                                                             message):
    (tmp_path / "bad_cell_module.py").write_text(BAD_MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    out = tmp_path / "out"
    rc = main(["train", "--space", f"bad_cell_module:{function}", "--stages", "2", "--subnets", "4",
               "--out", str(out), "--no-progress"])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and "\n" not in err and message in err, err
    assert "not one tensor" not in err
    assert not out.exists()


def test_the_probe_accepts_dict_and_list_messages_and_checks_their_structure():
    from naspipe.supernet.declare import SupernetError
    from naspipe.supernet.validate import probe_supernet

    class Split(nn.Module):
        def __init__(self, as_list: bool, key: str = "b"):
            super().__init__()
            self.lin = nn.Linear(4, 4)
            self.as_list, self.key = as_list, key

        def forward(self, x):
            y = self.lin(x)
            return [y, y.argmax(-1)] if self.as_list else {"a": y, self.key: y * 2}

    class Join(nn.Module):
        def forward(self, m):
            return m["a"] + m[[k for k in m if k != "a"][0]]

    class Head(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(4, 3)

        def forward(self, x):
            return self.lin(x[0] if isinstance(x, list) else x)

    def data(j, g):
        return torch.randn(8, 4, generator=g), torch.randint(0, 3, (8,), generator=g)

    def sn(second):
        return naspipe.Supernet([naspipe.Choice("split", {"x": lambda: Split(False), "y": second}),
                                 naspipe.Fixed("join", Join), naspipe.Fixed("head", Head)],
                                data=data, loss=nn.functional.cross_entropy, batch_size=8)

    probe_supernet(sn(lambda: Split(False)))  # a dict of tensors
    with pytest.raises(SupernetError, match="candidates 'x' and 'y' give outputs dict of 2 .* the same structure"):
        probe_supernet(sn(lambda: Split(False, key="c")))
    lists = naspipe.Supernet([naspipe.Fixed("split", lambda: Split(True)), naspipe.Fixed("head", Head)],
                             data=data, loss=nn.functional.cross_entropy, batch_size=8)
    probe_supernet(lists)  # a list with an integer leaf (no gradient)


# ---- the transport's structured packing ---------------------------------------------------------------
def _tree(j: int, aliased: bool) -> tuple:
    g = torch.Generator().manual_seed(j)
    a = torch.randn(3, 2, generator=g)
    b = a if aliased else torch.randn(3, 2, generator=g)
    return (a, {"b": b, "ids": torch.randint(0, 9, (3,), generator=g)})


def test_structured_messages_keep_their_bits_structure_and_aliases_and_steady_ones_are_one_transfer():
    tx, rx = Packing(), Packing()
    lay_sent = lay_known = None
    transfers = []
    for j, aliased in enumerate([False, False, False, True, False, False, False, False]):
        msg = _tree(j, aliased)
        parts = messages.leaves(msg)
        lay = messages.layout(msg)
        head = encode_tree(ACTIVATION, j, parts, [True] * len(parts), lay if lay != lay_sent else None, None,
                           torch.device("cpu"))
        lay_sent = lay
        assert tx.size == rx.size
        buf, apart = tx.pack_parts(head, parts)
        queue = list(apart)
        transfers.append(1 + len(apart))

        def recv(t, queue=queue):
            t.copy_(queue.pop(0).reshape(t.shape).view(t.dtype))

        values, got, flags, new_lay = rx.unpack_tree(buf.clone(), recv)
        assert not queue and values[:2] == [ACTIVATION, j] and flags == [True] * len(parts)
        lay_known = new_lay or lay_known
        back = messages.rebuild(got, lay_known)
        assert messages.identical(back, msg)
        assert (back[0] is back[1]["b"]) == aliased  # one tensor in two places arrives as one
    assert transfers[-1] == 1 and transfers[0] > 1  # steady sizes: one transfer per message
    assert messages.nbytes(_tree(0, True)) == 3 * 2 * 4 + 3 * 8  # the aliased tensor counted once
    # a gradient message: one tensor or None per distinct leaf, no layout
    head = encode_tree(GRADIENT, 7, [torch.ones(2), None], [False, False], None, 0.5, torch.device("cpu"))
    buf, apart = Packing().pack_parts(head, [torch.ones(2)])
    queue = list(apart)
    values, got, _, lay = Packing().unpack_tree(buf, lambda t: t.copy_(queue.pop(0).view(t.dtype)))
    assert lay is None and got[1] is None and torch.equal(got[0], torch.ones(2)) and buf.numel() == HEADER_BYTES


MIXED_MODULE = '''
import torch
import torch.nn.functional as F
from torch import nn

import naspipe


class Stem(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 6)

    def forward(self, x):
        h = self.lin(x)
        return {"h": h, "ids": h.argmax(-1), "mask": (h > 0), "const": torch.ones_like(h)}


class Mix(nn.Module):
    def __init__(self, width):
        super().__init__()
        self.lin = nn.Linear(6, 6)
        self.width = width

    def forward(self, m):
        picked = torch.nn.functional.one_hot(m["ids"], 6).float()
        h = self.lin(m["h"]) * m["mask"] + picked * self.width + m["const"]
        return {"h": torch.tanh(h), "ids": m["ids"], "mask": m["mask"], "const": m["const"]}


class Head(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(6, 3)

    def forward(self, m):
        return self.lin(m["h"])


def data(j, g):
    return torch.randn(8, 4, generator=g), torch.randint(0, 3, (8,), generator=g)


def supernet():
    return naspipe.Supernet([naspipe.Fixed("stem", Stem),
                             *[naspipe.Choice(f"mix{i}", {"a": lambda: Mix(0.1), "b": lambda: Mix(0.5)})
                               for i in range(3)],
                             naspipe.Fixed("head", Head)], data=data, loss=F.cross_entropy, batch_size=8)
'''


@pytest.mark.parametrize("policy", ["csp", "csp-bw"])
def test_a_dict_message_with_integer_bool_and_constant_leaves_trains_identical(tmp_path, monkeypatch, policy):
    """Integer and bool leaves travel without gradient, a float leaf that needs none gets none, and the trained
    leaf's gradient flows through every stage (the stem trains: serial)."""
    (tmp_path / "mixed_message_module.py").write_text(MIXED_MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    common = ["--space", "mixed_message_module:supernet", "--subnets", "8", "--seed", "2", "--no-progress",
              "--shared-layers", "serial"]
    assert main(["reference", *common, "--out", str(tmp_path / "ref")]) == 0
    assert main(["train", *common, "--stages", "3", "--policy", policy, "--out", str(tmp_path / "run")]) == 0
    assert main(["verify", str(tmp_path / "run"), str(tmp_path / "ref")]) == 0
    (b, _) = json.loads((tmp_path / "run" / "metrics.json").read_text())["boundaries"]
    assert b["activation_tensors"] == 4 and b["gradient_tensors"] == 1  # only "h" takes a gradient
