"""Search spaces as plain data: blocks, candidates and their costs, presets, JSON spaces; how a space's
blocks are split over pipeline stages (``partition``); how its fixed (shared) blocks take part in the
causal rule (``shared``). No torch.
"""
