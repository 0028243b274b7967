"""torch supernets built per pipeline stage, their data, and their optimizers.

Every supernet is a ``naspipe.Supernet``: the user's own, or a preset declared by ``naspipe.models.presets``.

``build_stage(space, blocks, seed, shared)`` builds only the given blocks; weights depend on
``(seed, block, candidate)`` alone and parameter names are global, so every partition of the model holds
the same tensors under the same names. Batch ``j`` is ``make_batch(space, seed, j)``.
"""

from naspipe.models import presets as _presets  # noqa: F401 - registers the preset families (supernet_of)
from naspipe.models.data import Batch, heldout_batches, input_of, make_batch, target_of
from naspipe.models.evaluate import evaluate
from naspipe.models.optim import DEFAULT_LR, OPTIMIZERS, keep_grads_of, make_optimizer
from naspipe.models.stage import StageModel, build_stage, model_kind

__all__ = [
    "Batch", "evaluate", "heldout_batches", "input_of", "make_batch", "target_of", "DEFAULT_LR", "OPTIMIZERS",
    "keep_grads_of", "make_optimizer", "StageModel", "build_stage", "model_kind",
]
