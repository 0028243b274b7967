"""Data sets that ship with naspipe and load offline: scikit-learn's 8x8 digits read without scikit-learn
(``digits``), for the presets, the shipped supernets and the ground truth; MNIST-1D generated from mnist1d's
templates to recorded digests (``mnist1d``), for the ``cnn1d`` space and its ground truth.
"""
