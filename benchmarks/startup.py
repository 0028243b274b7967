"""CPU a fresh process spends importing torch and torch._dynamo, as usual and as naspipe's processes start.

naspipe's own processes (a stage's fork server, a torchrun rank, a command) import what they need with the
collector paused and then frozen (``naspipe.lifecycle.startup``). Each variant runs in a fresh interpreter, alternately,
``REPEATS`` times; the CPU (user + system) of each child is read from ``getrusage``; the median is reported,
and the ratio of the medians.

Run: ``.venv/bin/python benchmarks/startup.py``
"""

from __future__ import annotations

import resource
import statistics
import subprocess
import sys

from _common import ROOT, write_result

REPEATS = 7
VARIANTS = {
    "as usual": "import torch, torch._dynamo",
    "naspipe.startup": "from naspipe.lifecycle.startup import TRAINER, import_at_start; import_at_start(*TRAINER)",
}


def _child_cpu(code: str) -> float:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> None:
    samples: dict[str, list[float]] = {name: [] for name in VARIANTS}
    for _ in range(REPEATS):
        for name, code in VARIANTS.items():
            samples[name].append(_child_cpu(code))
    median = {name: statistics.median(s) for name, s in samples.items()}
    write_result("startup", {
        "repeats": REPEATS,
        "cpu_s_median": {name: round(v, 3) for name, v in median.items()},
        "cpu_s_samples": {name: [round(x, 3) for x in s] for name, s in samples.items()},
        "ratio_usual_over_startup": round(median["as usual"] / median["naspipe.startup"], 2),
    })


if __name__ == "__main__":
    main()
