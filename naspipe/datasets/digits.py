"""The digits images (1,797 of 8x8 pixels, scikit-learn's copy) read without importing scikit-learn.

Why it exists: every stage process, reference, torchrun rank and notebook kernel that trains a digits space
loads these images, and ``import sklearn.datasets`` costs about a second of CPU in each of them, as much as
the rest of a short run's start-up after torch. The data file ships inside scikit-learn (a dependency); this
module finds it without importing the package and parses it as ``sklearn.datasets.load_digits`` does, to the
same bits (tests/test_digits.py compares them).
"""

from __future__ import annotations

import gzip
import importlib.util
from functools import lru_cache
from pathlib import Path

import numpy as np


def digits_file() -> Path:
    """``sklearn/datasets/data/digits.csv.gz`` of the installed scikit-learn (found, not imported)."""
    spec = importlib.util.find_spec("sklearn")
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError("the digits data ships with scikit-learn: pip install scikit-learn")
    return Path(next(iter(spec.submodule_search_locations))) / "datasets" / "data" / "digits.csv.gz"


@lru_cache(maxsize=1)
def load_digits() -> tuple[np.ndarray, np.ndarray]:
    """``(data, target)`` as ``sklearn.datasets.load_digits(return_X_y=True)``: float64 ``(1797, 64)`` pixels
    0-16 and int ``(1797,)`` labels; read-only (shared by every caller of this process)."""
    with gzip.open(digits_file()) as f:
        table = np.loadtxt(f, delimiter=",")
    data, target = table[:, :-1], table[:, -1].astype(int)
    data.flags.writeable = False
    target.flags.writeable = False
    return data, target
