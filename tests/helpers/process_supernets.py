"""Small user supernets for ``tests/supernet/test_user_exits.py``, imported by
``--space process_supernets:NAME`` as a user's
module would be: each one's code ends its process, stops it, or outlives it in a way a user may write.

``exits``, ``factory_exits``, ``data_exits``, ``loss_exits``: ``sys.exit(0)`` in the supernet's function, a
candidate's factory, ``data`` or ``loss``; ``*_late`` variants only partway through a run (batch ``LATE``, after
the probe). ``factory_interrupts``: a factory raising ``KeyboardInterrupt``. ``stage_thread``: a factory that
starts a non-daemon thread in the stage processes only; ``thread_everywhere``: in every process, the launcher
included. ``stage_exits_midrun``: the last block's forward calls ``os._exit(0)`` at batch ``LATE`` in a stage
process (a stage that vanishes with a zero exit code). ``factory_gets_sigint``: a real SIGINT arrives while a
factory runs (Ctrl-C, which stays an interruption).
"""

from __future__ import annotations

import multiprocessing
import os
import sys
import threading
import time

import torch
import torch.nn.functional as F
from torch import nn

import naspipe

LATE = 3  # the batch at which the *_late supernets' code ends the process
LINGER_S = 300.0  # a stray thread's life: far longer than any test waits, short enough never to outlive CI


def data(j: int, g: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    x = torch.randn(4, 8, generator=g)
    return x, (x.sum(1) > 0).long()


def _lin() -> dict:
    return {"a": lambda: nn.Linear(8, 8), "b": lambda: nn.Linear(8, 8)}


def _net(**kw: object) -> naspipe.Supernet:
    blocks = kw.pop("blocks", None) or [naspipe.Choice("l0", _lin()), naspipe.Choice("l1", _lin()),
                                        naspipe.Fixed("head", lambda: nn.Linear(8, 2))]
    return naspipe.Supernet(blocks, **{"data": data, "loss": F.cross_entropy, "batch_size": 4, **kw})


def exits() -> naspipe.Supernet:
    sys.exit(0)


def _exit_factory() -> nn.Module:
    sys.exit(0)


def factory_exits() -> naspipe.Supernet:
    return _net(blocks=[naspipe.Choice("l0", {"a": lambda: nn.Linear(8, 8), "quits": _exit_factory}),
                        naspipe.Fixed("head", lambda: nn.Linear(8, 2))])


def _interrupt_factory() -> nn.Module:
    raise KeyboardInterrupt


def factory_interrupts() -> naspipe.Supernet:
    return _net(blocks=[naspipe.Choice("l0", {"a": lambda: nn.Linear(8, 8), "stops": _interrupt_factory}),
                        naspipe.Fixed("head", lambda: nn.Linear(8, 2))])


def _data_exit(at: int) -> object:
    def d(j: int, g: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        if j >= at:
            sys.exit(0)
        return data(j, g)
    return d


def data_exits() -> naspipe.Supernet:
    return _net(data=_data_exit(0))


def data_exits_late() -> naspipe.Supernet:
    return _net(data=_data_exit(LATE))


def _loss_exit(at: int) -> object:
    calls = [0]

    def loss(out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        calls[0] += 1
        if calls[0] > at:
            sys.exit(0)
        return F.cross_entropy(out, y)
    return loss


def loss_exits() -> naspipe.Supernet:
    return _net(loss=_loss_exit(0))


def loss_exits_late() -> naspipe.Supernet:
    return _net(loss=_loss_exit(LATE + 2))  # (the probe calls it once or twice before the run)


def _in_stage() -> bool:
    return multiprocessing.current_process().name.startswith("naspipe-stage")


def _linger() -> None:
    if not any(t.name == "user-linger" for t in threading.enumerate()):
        threading.Thread(target=time.sleep, args=(LINGER_S,), name="user-linger").start()  # not a daemon


def _lingering(everywhere: bool) -> object:
    def make() -> nn.Module:
        if everywhere or _in_stage():
            _linger()
        return nn.Linear(8, 8)
    return make


def stage_thread() -> naspipe.Supernet:
    return _net(blocks=[naspipe.Choice("l0", {"a": _lingering(False), "b": lambda: nn.Linear(8, 8)}),
                        naspipe.Fixed("head", lambda: nn.Linear(8, 2))])


def thread_everywhere() -> naspipe.Supernet:
    return _net(blocks=[naspipe.Choice("l0", {"a": _lingering(True), "b": lambda: nn.Linear(8, 8)}),
                        naspipe.Fixed("head", lambda: nn.Linear(8, 2))])


class _Vanish(nn.Module):
    """Linear, but a stage process ends itself with exit code 0 on its ``LATE + 1``-th forward."""

    def __init__(self):
        super().__init__()
        self.lin, self.calls = nn.Linear(8, 2), 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        if _in_stage() and self.calls > LATE:
            sys.stderr.flush()
            os._exit(0)
        return self.lin(x)


def stage_exits_midrun() -> naspipe.Supernet:
    return _net(blocks=[naspipe.Choice("l0", _lin()), naspipe.Fixed("head", _Vanish)])


def _sigint_factory() -> nn.Module:
    import signal

    signal.raise_signal(signal.SIGINT)  # as Ctrl-C would, while the factory runs
    return nn.Linear(8, 8)


def factory_gets_sigint() -> naspipe.Supernet:
    return _net(blocks=[naspipe.Choice("l0", {"a": lambda: nn.Linear(8, 8), "slow": _sigint_factory}),
                        naspipe.Fixed("head", lambda: nn.Linear(8, 2))])
