"""Experiments: what starts work (training and reference jobs, figure exports that train, sweeps).

Why it exists: ``naspipe.viz`` turns traces and plain data into figures and starts nothing; notebooks and
benchmarks that need a run in the background, a reference beside it or the README's pictures call this
package, which calls the runtime, the reference trainer and the simulator.

* ``jobs``: ``TrainJob`` / ``start_training``, ``write_reference`` / ``start_reference``, ``Job``;
* ``sweeps``: ``compare_policies`` / ``summary_rows``, ``compare_samplers``,
  ``scaling_sweep``, ``memory_sweep``, ``trend_row``;
* ``figures``: ``python -m naspipe.experiments.figures [--measured] OUT_DIR`` (``make figures``).
"""

from naspipe.experiments.jobs import Job, TrainJob, start_reference, start_training, write_reference
from naspipe.experiments.sweeps import (
    compare_policies,
    compare_samplers,
    memory_sweep,
    scaling_sweep,
    summary_rows,
    trend_row,
)

__all__ = ["Job", "TrainJob", "compare_policies", "compare_samplers", "memory_sweep", "scaling_sweep",
           "start_reference", "start_training", "summary_rows", "trend_row", "write_reference"]
