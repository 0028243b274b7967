"""Run a notebook headless with parameter overrides; used by the test suite for every notebook.

``run_notebook(path, params, timeout)`` executes a copy of the notebook with nbclient in a kernel that runs
*this* interpreter (``sys.executable -m ipykernel_launcher``, through a throw-away kernelspec), so the
venv's packages are used whatever kernels are installed. The kernel's environment drops
``PYTEST_CURRENT_TEST`` and puts the repository root first on ``PYTHONPATH``; widget state is not stored unless asked.

Parameters: the first code cell tagged ``parameters`` (papermill's convention), else the first code cell,
holds the defaults; a new cell tagged ``injected-parameters`` is inserted right after it with
``NAME = repr(value)`` for every override. Unknown names are rejected, so a renamed parameter cannot be
silently ignored.
"""

from __future__ import annotations

import ast
import json
import os
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import nbformat
from jupyter_client.kernelspec import KernelSpecManager
from jupyter_client.manager import AsyncKernelManager
from nbclient import NotebookClient
from traitlets import default

ROOT = Path(__file__).resolve().parents[2]
KERNEL_NAME = "naspipe-test"
PLOTLY_MIME = "application/vnd.plotly.v1+json"
WIDGET_MIME = "application/vnd.jupyter.widget-view+json"


def parameters_cell(nb: Any) -> int:
    """Index of the parameters cell: the first code cell tagged ``parameters``, else the first code cell."""
    code = [i for i, c in enumerate(nb.cells) if c.cell_type == "code"]
    if not code:
        raise ValueError("notebook has no code cell")
    tagged = [i for i in code if "parameters" in nb.cells[i].get("metadata", {}).get("tags", [])]
    return tagged[0] if tagged else code[0]


def parameter_names(source: str) -> set[str]:
    """Names assigned at the top level of a cell."""
    names = set()
    for node in ast.parse(source).body:
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(
            node, (ast.AnnAssign, ast.AugAssign)) else []
        for t in targets:
            names.update(n.id for n in ast.walk(t) if isinstance(n, ast.Name))
    return names


def inject_parameters(nb: Any, params: Mapping[str, Any]) -> Any:
    """Insert the overrides after the parameters cell (in place); returns the notebook."""
    if not params:
        return nb
    i = parameters_cell(nb)
    known = parameter_names(nb.cells[i].source)
    unknown = set(params) - known
    if unknown:
        raise KeyError(f"unknown notebook parameter(s) {sorted(unknown)}; the parameters cell defines {sorted(known)}")
    src = "# injected by tests/helpers/notebook_runner.py\n" + "".join(f"{k} = {v!r}\n" for k, v in params.items())
    cell = nbformat.v4.new_code_cell(src, metadata={"tags": ["injected-parameters"]})
    nb.cells.insert(i + 1, cell)
    return nb


def _kernel_manager_class(spec_dir: Path) -> type[AsyncKernelManager]:
    """A kernel manager class that finds one kernelspec only: this interpreter's ipykernel."""
    kdir = spec_dir / "kernels" / KERNEL_NAME
    kdir.mkdir(parents=True)
    (kdir / "kernel.json").write_text(json.dumps({
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "naspipe (test)", "language": "python"}))

    class ThisInterpreterKernelManager(AsyncKernelManager):
        @default("kernel_spec_manager")
        def _only_ours(self) -> KernelSpecManager:
            return KernelSpecManager(kernel_dirs=[str(spec_dir / "kernels")])

        # Unix sockets, not TCP ports: a port chosen free can be taken by another test's process (a store, a
        # rank, another kernel) before the kernel binds it ("Address already in use", then no reply for 60 s)
        @default("transport")
        def _ipc(self) -> str:
            return "ipc"

        @default("ip")
        def _socket_prefix(self) -> str:
            return str(spec_dir / "kernel")

    return ThisInterpreterKernelManager


def kernel_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTEST_CURRENT_TEST"}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [env.get("PYTHONPATH")])])
    env.setdefault("MPLBACKEND", "Agg")
    return env


def run_notebook(path: str | Path, params: Mapping[str, Any] | None = None, timeout: int = 120,
                 cwd: str | Path | None = None, store_widget_state: bool = False) -> Any:
    """Execute the notebook at ``path`` with ``params`` overridden; returns the executed notebook.

    ``timeout``: seconds per cell. ``cwd``: the kernel's working directory (default: the notebook's folder).
    ``store_widget_state``: keep the widgets' state in the notebook's metadata (a browser can then draw them).
    The executed notebook carries ``metadata["naspipe_test"]["seconds"]`` (wall time). Raises
    ``nbclient.exceptions.CellExecutionError`` with the failing cell's traceback.
    """
    path = Path(path)
    nb = inject_parameters(nbformat.read(path, as_version=4), dict(params or {}))
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="naspipe-kernel-") as spec_dir:
        client = NotebookClient(nb, kernel_manager_class=_kernel_manager_class(Path(spec_dir)), timeout=timeout,
                                kernel_name=KERNEL_NAME, store_widget_state=store_widget_state, allow_errors=False,
                                shutdown_kernel="immediate",
                                resources={"metadata": {"path": str(cwd or path.parent)}})
        client.execute(env=kernel_env())
    nb.metadata["naspipe_test"] = {"seconds": time.perf_counter() - t0}
    return nb


def output_mime_types(nb: Any) -> Counter:
    """How often each mime type appears in the outputs (display data, results, updates); streams as 'stream'."""
    out: Counter = Counter()
    for cell in nb.cells:
        for o in cell.get("outputs", []):
            if o.output_type == "stream":
                out["stream"] += 1
            elif o.output_type == "error":
                out["error"] += 1
            else:
                out.update(o.get("data", {}).keys())
    return out


def outputs_of(nb: Any, mime: str) -> list[Any]:
    """Every output payload of ``mime`` (e.g. the plotly JSON of each figure), in order."""
    return [o["data"][mime] for c in nb.cells for o in c.get("outputs", [])
            if o.output_type in ("display_data", "execute_result", "update_display_data") and mime in o.get("data", {})]


def has_outputs(nb: Any) -> bool:
    """Whether any code cell holds outputs or an execution count (notebooks are committed clean)."""
    return any(c.cell_type == "code" and (c.get("outputs") or c.get("execution_count")) for c in nb.cells)


def plotly_titles(nb: Any) -> list[str]:
    """The titles of the plotly figures a run notebook displayed, in order ("" for an untitled one)."""
    return [(f.get("layout", {}).get("title") or {}).get("text", "") for f in outputs_of(nb, PLOTLY_MIME)]
