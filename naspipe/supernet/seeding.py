"""Seeds and weight initialisation that depend on names alone, never on build order or process.

Every candidate's initial weights come from a ``torch.Generator`` seeded by a SHA-256 of
``(seed, block, candidate)``, so a stage that builds only its own blocks gets exactly the weights the
whole model gets. Data batches use the same kind of hashed generator, keyed by their own domain.
"""

from __future__ import annotations

import hashlib
import math
import threading

import torch
from torch import nn

# torch's global random state is one per process: a factory called under a seed must not interleave with
# another thread's seeded build (a reference trained in a notebook's background thread while the launcher
# checks the model in the foreground built different weights). Every seeded region holds this lock.
GLOBAL_RNG = threading.RLock()


def hashed_generator(domain: str, *parts: object) -> torch.Generator:
    """A CPU generator seeded by SHA-256 of ``domain`` and ``parts`` (stable across processes)."""
    text = ":".join([f"naspipe-{domain}", *map(str, parts)])
    seed = int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "little") & ((1 << 63) - 1)
    g = torch.Generator(device="cpu")
    g.manual_seed(seed)
    return g


def candidate_generator(seed: int, block: int, choice: int) -> torch.Generator:
    return hashed_generator("init", int(seed), int(block), int(choice))


@torch.no_grad()
def init_module(module: nn.Module, gen: torch.Generator, gain: float = 1.0) -> None:
    """Overwrite every parameter of ``module`` in registration order from ``gen``.

    Biases start at 0, norm scales at 1, embeddings ~ N(0, 1), other weights ~ U(-b, b) with
    ``b = gain / sqrt(fan_in)`` (1: torch's default for Linear; sqrt(6): He-uniform for ReLU nets).
    """
    embeddings = {id(m.weight) for m in module.modules() if isinstance(m, nn.Embedding)}
    norms = {id(m.weight) for m in module.modules() if isinstance(m, nn.LayerNorm)}
    for name, p in module.named_parameters():
        if name.endswith("bias"):
            p.zero_()
        elif id(p) in norms:
            p.fill_(1.0)
        elif id(p) in embeddings:
            p.normal_(0.0, 1.0, generator=gen)
        else:
            fan_in = p[0].numel() if p.dim() > 1 else p.numel()
            bound = gain / math.sqrt(max(1, fan_in))
            p.uniform_(-bound, bound, generator=gen)
