"""The split backward (``csp-bw``): the input gradient alone in ``B`` (``splitgrad``) and the weight gradients
per layer call in ``W`` (``wgrad``), bit-identical to one full backward.

Why it exists: it is pure autograd arithmetic on one stage; it imports nothing from processes or transport (an
import-linter contract).
"""
