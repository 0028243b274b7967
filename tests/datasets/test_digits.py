"""naspipe.datasets.digits reads scikit-learn's digits to the same bits as ``load_digits``, without importing
sklearn."""

import subprocess
import sys
from pathlib import Path

import numpy as np

from naspipe.datasets.digits import load_digits

ROOT = Path(__file__).resolve().parents[2]


def test_the_same_bits_as_scikit_learns_loader():
    from sklearn.datasets import load_digits as sklearn_load_digits

    data, target = load_digits()
    want_data, want_target = sklearn_load_digits(return_X_y=True)
    assert data.dtype == want_data.dtype and target.dtype == want_target.dtype
    assert data.shape == (1797, 64) and target.shape == (1797,)
    assert data.tobytes() == want_data.tobytes() and np.array_equal(target, want_target)
    assert not data.flags.writeable  # one copy per process, shared by every caller


def test_training_a_digits_space_does_not_import_scikit_learn():
    code = ("import sys; sys.path.insert(0, 'data/supernets'); from naspipe.models.cnn import digits_split; "
            "digits_split(True); import spos_digits as s, nb201_digits as n; s.digits(); n.digits(); "
            "print(sorted(m for m in sys.modules if m.startswith('sklearn')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT).stdout
    assert out.strip() == "[]"
