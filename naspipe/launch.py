"""The old name of the torchrun entry point: ``-m naspipe.launch`` runs ``naspipe.torchrun`` unchanged.

Why it exists: commands written before the entry point was named after what starts it keep working;
new commands use ``torchrun ... -m naspipe.torchrun``.
"""

from __future__ import annotations

import sys

from naspipe.torchrun import main

__all__ = ["main"]

if __name__ == "__main__":
    sys.exit(main())
