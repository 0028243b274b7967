"""The layer cache (context switching): every candidate in host memory, a byte-budgeted working set on the
device (``context``), and the runtime side that swaps and prefetches by the scheduler's forecast
(``switching``).

Why it exists: the cache decides where a stage's weights live, never what runs or how bytes travel; it imports
nothing from processes or transport (an import-linter contract).
"""
