"""What a stage's fork server imports once, before it forks any stage: torch, torch._dynamo and the stage worker,
made with the garbage collector paused, then one collection and a freeze (``naspipe.lifecycle.startup``).

Why a module: Python's fork server takes the names of modules to import (``set_forkserver_preload``); importing
this one is the preload. Paused, the server's imports cost about a quarter less CPU (``benchmarks/startup.py``;
about 50 collections instead of 700), and frozen, no collection in the server or in a stage it forks walks them.

The server starts with SIGINT ignored (``naspipe.runtime.processes.signals``: a terminal's Ctrl-C while it imports
is the command's to report); the stages it forks get the command's handler back, from here.
"""

from naspipe.lifecycle.startup import TRAINER, import_at_start
from naspipe.runtime.processes.signals import server_sigint_back

import_at_start(*TRAINER, "naspipe.runtime.processes.worker")
server_sigint_back()
