"""``naspipe.runtime.transport.arrival.meet`` and ``naspipe.torchrun``: a rank whose own network check fails says so
before it tells the others (telling can wait up to 15 s for the master's store, and torchrun stops a rank once a
sibling ends), and before it imports torch."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from naspipe.runtime.transport import arrival
from naspipe.runtime.transport.netcheck import NetworkError


def test_a_rank_says_its_own_network_error_before_telling_the_others(monkeypatch):
    order: list[str] = []
    monkeypatch.setattr(arrival, "tell_others", lambda *a, **k: order.append("told"))
    env = {"MASTER_ADDR": "10.0.0.1", "MASTER_PORT": "29500", "WORLD_SIZE": "4", "LOCAL_WORLD_SIZE": "2",
           "RANK": "1", "LOCAL_RANK": "1", "GLOO_SOCKET_IFNAME": "no-such-interface9"}
    with pytest.raises(NetworkError, match="no-such-interface9") as raised:
        arrival.meet(1, 4, 5.0, env=env, say=lambda e: order.append(f"said {e}"))
    assert order == [f"said {raised.value}", "told"]


def test_under_torchrun_a_rank_says_its_network_mistake_before_it_imports_torch():
    """Importing torch takes seconds on a loaded host, and a sibling that has told the others by then ends, so
    torchrun stops this rank: the torch-free check comes first, and its line once (meet finds it again)."""
    env = {**os.environ, "MASTER_ADDR": "10.0.0.1", "MASTER_PORT": "29500", "WORLD_SIZE": "2", "RANK": "0",
           "LOCAL_RANK": "0", "GLOO_SOCKET_IFNAME": "no-such-interface9"}
    code = ("import sys\nfrom naspipe.torchrun import _said_first\nline = _said_first()\n"
            "print('torch' in sys.modules, flush=True)\nprint(line, flush=True)")
    p = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    said = p.stderr.splitlines()
    assert len(said) == 1 and said[0].startswith("naspipe: error: rank 0: GLOO_SOCKET_IFNAME=no-such-interface9"), said
    assert p.stdout.splitlines() == ["False", said[0]]
