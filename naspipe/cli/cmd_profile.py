"""``naspipe profile --space ...``: measure each candidate's costs on a device and store them with the space.

For ``--space module:function`` the profile goes next to the module (``<module>.<function>.costs.json``),
where ``--space module:function`` finds it again, so ``simulate``, ``partition``, the memory plan and the
simulated twin use the measured numbers; ``--out`` writes it elsewhere.
"""

from __future__ import annotations

import argparse
import json
import sys

from naspipe.cli.common import named, os_refusal, positive_int, thread_count
from naspipe.errors import UserError

COMMAND = "profile"
HELP = "measure each candidate's forward/backward time and bytes on a device (costs for simulate and partition)"
ORDER = 15


def add_arguments(p: argparse.ArgumentParser) -> None:
    from naspipe.runtime.config import DEVICES  # (torch-free)

    p.add_argument("--space", required=True, help="module:function (your supernet) or a trainable preset")
    p.add_argument("--device", choices=DEVICES, default="cpu", help="device to measure on (default cpu)")
    p.add_argument("--repeats", type=positive_int("--repeats"), default=5, help="timed runs per candidate")
    p.add_argument("--threads", type=thread_count, default=1, help="intra-op threads (default 1)")
    p.add_argument("--out", type=named("--out", "file"), default=None,
                   help="profile JSON (default: next to the module of module:function)")
    p.add_argument("--json", action="store_true", help="print the profile as one JSON object")


def run(args: argparse.Namespace) -> int:
    space, out = _inputs(args)
    from naspipe.fileio.atomic import check_writable
    from naspipe.preflight.measure import measure_costs, save_costs

    def refuse(e: OSError) -> str:
        return f"--out: {e}" if args.out is not None else f"{e}; pass --out FILE somewhere writable"

    with os_refusal(say=refuse):  # before measuring: minutes of measurement must not end in a write error
        check_writable(out, "profile", file=True)
    from naspipe.supernet.usercode import first_line, origin, user_errors

    try:
        costs = measure_costs(space, device=args.device, repeats=args.repeats, threads=args.threads)
    except user_errors() as e:  # noqa: BLE001 - the user's forward or loss failed while measured: one line
        print(f"naspipe: error: profiling {space.name} failed: {type(e).__name__}{origin(e)}: {first_line(e)}",
              file=sys.stderr)
        return 1
    with os_refusal(say=refuse):
        path = save_costs(costs, out)
    if args.json:
        print(json.dumps(costs))
        return 0
    n = sum(len(v) for v in costs["candidates"].values())
    print(f"profiled {n} candidates of {space.name} on {args.device} ({args.repeats} runs each); wrote {path}")
    for label, cands in costs["candidates"].items():
        row = ", ".join(f"{k} {v['fwd'] * 1e3:.3f}+{v['bwd'] * 1e3:.3f} ms" for k, v in cands.items())
        print(f"  {label}: {row}")
    return 0


def _inputs(args: argparse.Namespace) -> tuple:
    """``(space, out)`` from the arguments; a UserError (one line) for a bad one."""
    from naspipe.models import model_kind
    from naspipe.spaces.space import resolve_space
    from naspipe.supernet.load import default_costs_path, is_spec, without_costs

    # without the profile it is about to replace (a stale one is refused everywhere else)
    space = resolve_space(without_costs(args.space))
    model_kind(space)
    out = args.out
    if out is None:
        out = default_costs_path(args.space) if is_spec(args.space) else None
        if out is None:
            raise UserError("--out is needed for a space that is not module:function")
    import torch

    if args.device == "cuda" and not torch.cuda.is_available():
        raise UserError("--device cuda was asked for, but torch sees no CUDA device; use --device cpu")
    return space, out
