"""Experiments: what starts work (training and reference jobs, figure exports that train, sweeps).

Why it exists: ``naspipe.viz`` turns traces and plain data into figures and starts nothing; notebooks and
benchmarks that need a run in the background, a reference beside it or the README's pictures call this
package, which calls the runtime, the reference trainer and the simulator.

* ``jobs``: ``TrainJob`` / ``start_training``, ``write_reference`` / ``start_reference``, ``Job``;
* ``figures``: ``python -m naspipe.experiments.figures [--measured] OUT_DIR`` (``make figures``).
"""

from naspipe.experiments.jobs import Job, TrainJob, start_reference, start_training, write_reference

__all__ = ["Job", "TrainJob", "start_reference", "start_training", "write_reference"]
