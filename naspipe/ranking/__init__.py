"""Can you trust the search? A supernet's ranking against a stand-alone ground truth, with intervals.

``stats`` (torch-free, scipy): Kendall tau, Spearman rho, top-10% overlap, regret, bootstrap intervals, seed
floors. ``compare``: ``rank(run, truth)`` scores a trained run's architectures and builds the report that
``naspipe rank`` prints. ``naspipe.rank`` is ``compare.rank``. ``proxies``: the same report for zero-cost proxies
at initialisation (``rank --proxy``: no training at all); ``ensemble``: the mean over runs equal but the seed
(``rank --ensemble``); ``seed_runs``: the check that runs differ in the seed alone (``--seeds``, ``--ensemble``).
"""

from naspipe.ranking.stats import Agreement, Estimate, agreement, kendall, spearman

__all__ = ["Agreement", "Estimate", "agreement", "kendall", "spearman"]
