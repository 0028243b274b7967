"""Device memory of a pipeline stage: a byte budget, candidates swapped over PCIe, activations in flight.

Why it exists: a supernet does not fit on one device. NASPipe keeps the whole supernet in host memory
and holds on each stage's device only the candidates its running and soon-to-run tasks need, which
leaves room for a large batch; a baseline that keeps its whole stage share resident must shrink its
batch instead. This module models that trade-off for the simulator; ``naspipe.runtime.layer_cache.context`` is the
torch counterpart.

What occupies a stage's device (``StageMemory.used``, never above the budget):

* parameters of resident candidates (``param_bytes`` of each ``(block, choice)`` key on the stage);
* activations of in-flight subnets: ``act_bytes`` per sample x batch, summed over the stage's blocks,
  held from the start of ``F(j,s)`` until the write of ``j`` on ``s`` ends (``B``, or ``W`` when the
  backward is split).

A candidate is *pinned* while a task that uses it is chosen or running (``pin="task"``, the default), or,
with ``pin="subnet"``, from ``F(j,s)`` until ``j``'s write (the simple choice when autograd keeps
references to the weights). Pinned candidates are never evicted. Pinning per task is what lets a stage
hold many subnets in flight on a small budget: between ``F(j,s)`` and its backward, ``j`` holds only its
activations; its layers are clean (CSP lets no other subnet write them in between), so they may be
dropped and fetched again before the backward, which the forecast covers (on the runtime side this is a
``torch.autograd.graph.saved_tensors_hooks`` pair: the runtime offers both modes, ``pin="subnet"`` by default
because its budget counts candidates only, and ``pin="task"`` through ``naspipe.runtime.layer_cache.switching``).

Host <-> device copies run on two copy engines per stage (host-to-device and device-to-host, PCIe is
full duplex) that overlap compute. A load moves ``param_bytes`` at ``bandwidth_h2d``; evicting a candidate
that was updated on the device (dirty) writes it back at ``bandwidth_d2h``, and its memory is free only
when the copy ends; a clean candidate is dropped at once. A task whose candidates are not resident when
it is chosen loads them synchronously (ahead of any prefetch) and the stage *stalls*.

Swap modes:

* ``resident``: no swapping; the whole stage share is loaded before the run (not timed) and stays;
* ``on-demand`` (vPipe-style): load right before each task, evict right after the last use (no forecast);
* ``predictive`` (NASPipe): the predictor forecasts the next tasks; their candidates are prefetched in
  forecast order while the projected memory (pinned + activations + what the forecast tasks add) fits;
  dirty candidates that no forecast or in-flight task needs are written back and evicted as soon as
  they are released; clean leftovers are dropped when room is needed.

The *admission gate* keeps every schedule live: ``F(x,s)`` may start only if the committed memory
(pinned parameters + activations) plus what ``x`` adds, plus the largest need of any older subnet that
has not started its forward on ``s`` yet, fits the budget (with ``pin="task"``: activations plus room for
the largest in-flight subnet's layers, so a backward can always fetch its own). The oldest unfinished
subnet therefore always finds room on every stage, so no causal chain can be starved of memory (see
``Gate.admits``); under BSP so does the rest of its group, whose forwards its backward waits for.
"""

from naspipe.sim.memory.budgeting import (
    CSP_SLOTS,
    CSP_SLOTS_PIN_TASK,
    MemoryPlan,
    csp_target_in_flight,
    plan_memory,
    policy_in_flight,
)
from naspipe.sim.memory.device import EVICTING, LOADING, RESIDENT, RESIDENT_MODE, StageMemory, StageStats
from naspipe.sim.memory.footprint import Footprint
from naspipe.sim.memory.gate import Gate
from naspipe.sim.memory.metrics import MemoryReport
from naspipe.sim.memory.settings import (
    DEFAULT_BANDWIDTH,
    PIN_MODES,
    SWAP_MODES,
    Key,
    MemoryBudgetError,
    MemoryConfig,
)

__all__ = ["CSP_SLOTS", "CSP_SLOTS_PIN_TASK", "DEFAULT_BANDWIDTH", "EVICTING", "LOADING", "PIN_MODES", "RESIDENT",
           "RESIDENT_MODE", "SWAP_MODES", "Footprint", "Gate", "Key", "MemoryBudgetError", "MemoryConfig", "MemoryPlan",
           "MemoryReport", "StageMemory", "StageStats", "csp_target_in_flight", "plan_memory", "policy_in_flight"]
