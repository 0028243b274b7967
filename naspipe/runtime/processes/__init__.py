"""The runtime's processes: the launcher that starts and supervises one process per stage (and replica), the
stage worker's event loop, the signals that end a run and what a stage records while it runs.

Why it exists: everything that knows about OS processes lives here, apart from the arithmetic of a stage
(``naspipe.runtime.stage_exec``, ``update_rules``, ``split_backward``, ``layer_cache``) and from how bytes
travel between processes (``naspipe.runtime.transport``).
"""
