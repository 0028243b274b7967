"""Before a run starts: can the space's model be built and run, block by block (``modelcheck``: the one-line
refusals of user code, the memory estimate), and what its candidates cost when measured on this machine
(``measure``: ``naspipe profile``, ``balance="measured"``). torch is imported by the checks, not by importing them.
"""
