"""Few-shot supernets (Zhao et al., ICML 2021) on naspipe's one model path; docs/few-shot.md.

``naspipe.spaces.few_shot`` declares the expanded space (plain data), ``naspipe.supernet.few_shot`` its torch
side; here: ``run`` turns a run description into its few-shot run (``--few-shot BLOCK --few-shot-warmup W``),
``warmstart`` copies copy 0's weights and optimizer state into the other copies at the warm-up's end (the reference
in-process, every pipeline stage at a scheduler fence), ``view`` scores a base architecture on its own
sub-supernet (``naspipe rank``, ``naspipe search``).
"""
