"""What a stage's fork server imports once, before it forks any stage: torch, torch._dynamo and the stage worker,
made with the garbage collector paused and then frozen (``naspipe.startup``).

Why a module: Python's fork server takes the names of modules to import (``set_forkserver_preload``); importing
this one is the preload. Paused, the server's imports cost about a third less CPU (``benchmarks/startup.py``),
and frozen, no collection in the server or in a stage it forks walks them.
"""

from naspipe.startup import TRAINER, import_at_start

import_at_start(*TRAINER, "naspipe.runtime.processes.worker")
