"""Kept for existing imports: the shared-layer policies live in ``naspipe.shared`` (plain data that the
scheduler, the simulator, the reference and the runtime all read, so it belongs to none of them)."""

from naspipe.shared import MAX_DELAY, SharedLayers, SharedPolicyError, parse_shared

__all__ = ["MAX_DELAY", "SharedLayers", "SharedPolicyError", "parse_shared"]
