"""The ground truth a supernet's ranking is judged against: architectures trained stand-alone.

``naspipe truth`` (``naspipe.cli.cmd_truth``) trains every architecture of a space, or a seeded sample, for a
number of steps and seeds (``build``: a pool of workers; ``train``: one entry), and stores the records and the
table (``records``, torch-free). ``naspipe rank`` (``naspipe.ranking``) compares a trained supernet with it.

    from naspipe.truth import load
    truth = load("data/truth/digits-truth")
    print(truth.settings.steps, len(truth.archs), truth.mean_accuracy(truth.archs[0]))
"""

from naspipe.truth.records import Truth, TruthError, TruthSettings, assemble, choose_archs, load

__all__ = ["Truth", "TruthError", "TruthSettings", "assemble", "choose_archs", "load"]
