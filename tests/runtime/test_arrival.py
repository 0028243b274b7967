"""``naspipe.runtime.transport.arrival.meet``: a rank whose own network check fails says so before it tells the
others (telling can wait up to 15 s for the master's store, and torchrun stops a rank once a sibling ends)."""

from __future__ import annotations

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
