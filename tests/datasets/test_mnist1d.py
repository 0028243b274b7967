"""naspipe.datasets.mnist1d generates MNIST-1D to the bits mnist1d's ``make_dataset`` gives, to the recorded digests,
without importing mnist1d's package (its plotting helpers import matplotlib); other data are refused."""

import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from naspipe.datasets import mnist1d as m
from naspipe.errors import UserError

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def fresh():
    """The generated arrays are cached per process: start and end the test without them."""
    m.load_mnist1d.cache_clear()
    yield
    m.load_mnist1d.cache_clear()


def test_the_same_bits_as_mnist1ds_own_make_dataset():
    """mnist1d's ``make_dataset`` itself, in a child whose matplotlib is a stub (it is not installed: only the
    package's plotting helper needs it), gives the arrays whose digests are recorded."""
    code = ("import sys, types, json\n"
            "sys.modules['matplotlib'] = types.ModuleType('matplotlib')\n"
            "sys.modules['matplotlib.pyplot'] = types.ModuleType('matplotlib.pyplot')\n"
            "from mnist1d.data import make_dataset, get_dataset_args\n"
            "from naspipe.datasets.mnist1d import digest\n"
            "d = make_dataset(get_dataset_args())\n"
            "print(json.dumps({k: digest(d[k]) for k in ('x', 'y', 'x_test', 'y_test')}))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT).stdout
    import json

    assert json.loads(out) == m.DIGESTS


def test_the_arrays_are_checked_read_only_and_leave_numpys_random_state_alone(fresh):
    np.random.seed(7)
    before = np.random.get_state()[1].copy()
    d = m.load_mnist1d()
    assert np.array_equal(np.random.get_state()[1], before)  # make_dataset seeds the global state: put back
    assert {k: v.shape for k, v in d.items()} == m.SHAPES
    assert d["x"].dtype == np.float64 and d["y"].dtype == np.int64
    assert {k: m.digest(v) for k, v in d.items()} == m.DIGESTS
    assert np.bincount(d["y"]).min() > 350 and np.bincount(d["y_test"]).min() > 80  # ten classes, all present
    assert not d["x"].flags.writeable and m.load_mnist1d() is d  # one copy per process


def test_other_generated_data_are_refused_in_one_line(fresh, monkeypatch):
    """A release whose transform gives other numbers (here: one last bit of one sequence) is refused, never
    trained on under the same name."""
    real = m._transform_module().transform
    calls = []

    def changed(x, t, args):
        new_x, new_t = real(x, t, args)
        calls.append(1)
        if len(calls) == 1:
            new_x = new_x.copy()
            new_x[0] = np.nextafter(new_x[0], np.inf)
        return new_x, new_t

    monkeypatch.setattr(m, "_transform_module", lambda: SimpleNamespace(transform=changed))
    with pytest.raises(m.Mnist1dError) as e:
        m.load_mnist1d()
    msg = str(e.value)
    assert isinstance(e.value, UserError) and len(msg.splitlines()) == 1
    assert "generates other MNIST-1D data than the recorded ones" in msg and f"mnist1d=={m.VERSION}" in msg


def test_other_shapes_and_a_missing_package_are_refused(fresh, monkeypatch):
    real = m.make_dataset()
    monkeypatch.setattr(m, "make_dataset", lambda: {**real, "x_test": real["x_test"][:-1]})
    with pytest.raises(m.Mnist1dError, match=r"x_test: shape \(999, 40\), not \(1000, 40\)"):
        m.load_mnist1d()
    monkeypatch.setattr(m.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(m.Mnist1dError, match=f"pip install mnist1d=={m.VERSION}"):
        m.package_dir()


def test_training_an_mnist1d_space_imports_neither_mnist1d_nor_matplotlib():
    code = ("import sys; from naspipe.models.cnn1d import mnist1d_split; x, y = mnist1d_split(True); "
            "print(tuple(x.shape), sorted(m for m in sys.modules if m.split('.')[0] in ('mnist1d', 'matplotlib', "
            "'requests')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT).stdout
    assert out.strip() == "(4000, 1, 40) []"
