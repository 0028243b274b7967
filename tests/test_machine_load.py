"""The machine line ``make test`` ends with (tests/helpers/machine_load.py): busy cores from /proc/stat."""

from __future__ import annotations

import os

from tests.helpers import machine_load


def _stat(tmp_path, name, user, nice, system, idle, iowait, irq, softirq, steal):  # noqa: ANN001, ANN202
    path = tmp_path / name
    path.write_text(f"cpu  {user} {nice} {system} {idle} {iowait} {irq} {softirq} {steal} 0 0\ncpu0 1 2 3\n")
    return path


def test_busy_is_everything_but_idle_iowait_and_steal(tmp_path):
    hz = os.sysconf("SC_CLK_TCK")
    a = machine_load.snapshot(_stat(tmp_path, "a", 100, 0, 50, 1000, 10, 0, 0, 5))
    b = machine_load.snapshot(_stat(tmp_path, "b", 100 + 3 * hz, 0, 50 + hz, 1000 + 7 * hz, 10 + 2 * hz, 0, 0,
                                    5 + 9 * hz))
    assert a is not None and b is not None
    assert b.busy_s - a.busy_s == 4.0  # user and system: 4 s; idle, iowait and steal are not busy
    assert machine_load.busy_cores(a._replace(at=0.0), b._replace(at=2.0)) == 2.0
    assert machine_load.busy_cores(a, a) == 0.0


def test_the_summary_names_the_cpu_and_the_busy_cores(tmp_path):
    a, b = machine_load.Snapshot(10.0, 0.0), machine_load.Snapshot(13.5, 2.0)
    line = machine_load.summary("GenuineIntel Xeon (AVX512)", a, b)
    assert line.startswith(f"machine: GenuineIntel Xeon (AVX512), {os.cpu_count()} cores; 1.75 of them busy")
    assert machine_load.summary("x", None, b) == f"machine: x, {os.cpu_count()} cores"
    assert machine_load.snapshot(tmp_path / "missing") is None
    (tmp_path / "odd").write_text("intr 1 2 3\n")
    assert machine_load.snapshot(tmp_path / "odd") is None
