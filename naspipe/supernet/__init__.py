"""Your own supernet: ``Fixed`` and ``Choice`` blocks of your own ``nn.Module`` factories, data and loss.

``Supernet``, ``Fixed`` and ``Choice`` (``declare``) are plain declarations; ``load`` turns a supernet or
``module:function`` into the plain-data ``SearchSpace`` every other part of naspipe reads (importing this
package registers that resolver with ``naspipe.spaces.space.resolve_space``); ``build`` is the torch side (candidates
built under seeded random state, batches, loss: what ``naspipe.models.stage`` builds every stage through);
``validate`` probes user code before any process starts. This package imports nothing from ``naspipe.models``
(the preset families register themselves through ``load.register_family``); measuring candidate costs
(``naspipe profile``) builds stages, so it lives in ``naspipe.preflight.measure``.
"""

from naspipe.supernet.declare import Choice, Fixed, Supernet, SupernetError
from naspipe.supernet.load import load_spec, space_of, subnet_dict, subnet_tuple, supernet_of

__all__ = ["Choice", "Fixed", "Supernet", "SupernetError", "load_spec", "space_of", "subnet_dict", "subnet_tuple",
           "supernet_of"]
