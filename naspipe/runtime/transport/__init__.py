"""How bytes travel between stage processes: activations and gradients between neighbours (``comm``), the
replicas' gradient exchange and write order (``replica_group``), ports, and the torchrun ranks' meeting and
network checks (``arrival``, ``netcheck``).

Why it exists: transport is torch.distributed and sockets only; it imports nothing from the processes that use
it, the update rules or the layer cache (an import-linter contract in ``pyproject.toml``).
"""
