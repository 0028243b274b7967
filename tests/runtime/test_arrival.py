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


ENV = {"MASTER_ADDR": "10.0.0.1", "MASTER_PORT": "29500", "WORLD_SIZE": "2", "RANK": "0", "LOCAL_RANK": "0",
       "GLOO_SOCKET_IFNAME": "no-such-interface9"}
MISTAKE = "naspipe: error: rank 0: GLOO_SOCKET_IFNAME=no-such-interface9"


def test_under_torchrun_a_rank_says_its_network_mistake_before_it_imports_torch(tmp_path):
    """Importing torch takes seconds on a loaded host, and a sibling that has told the others by then ends, so
    torchrun stops this rank: ``naspipe.torchrun`` says its torch-free check's line first (here torch cannot be
    imported at all, and the line still comes)."""
    code = ("import sys\nsys.modules['torch'] = None  # importing torch raises ImportError\n"
            "from naspipe.torchrun import main\ntry:\n    main(['--space', 'digits-cnn', '--out', 'run'])\n"
            "except ImportError:\n    print('then torch', flush=True)")
    p = subprocess.run([sys.executable, "-c", code], env={**os.environ, **ENV}, cwd=tmp_path, capture_output=True,
                       text=True, timeout=60)
    said = [line for line in p.stderr.splitlines() if line.startswith("naspipe:")]
    assert len(said) == 1 and said[0].startswith(MISTAKE), p.stderr[-2000:]
    assert p.stdout.splitlines() == ["then torch"], p.stdout


def test_the_mistake_said_first_is_not_said_again_when_the_ranks_meet(tmp_path, monkeypatch, capsys):
    from naspipe.torchrun import main

    monkeypatch.setattr(arrival, "tell_others", lambda *a, **k: None)  # (nobody listens at 10.0.0.1)
    for k, v in ENV.items():
        monkeypatch.setenv(k, v)
    assert main(["--space", "digits-cnn", "--subnets", "4", "--no-progress", "--out", str(tmp_path / "run")]) == 2
    said = [line for line in capsys.readouterr().err.splitlines() if line.startswith("naspipe:")]
    assert len(said) == 1 and said[0].startswith(MISTAKE), said
