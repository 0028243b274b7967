"""Data sets that ship with naspipe and load offline: scikit-learn's 8x8 digits read without scikit-learn
(``digits``), for the presets, the shipped supernets and the ground truth.
"""
