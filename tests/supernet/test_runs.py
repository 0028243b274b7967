"""Acceptance of your own supernet, as a new user runs it: a module outside the package on PYTHONPATH.

``data/supernets/spos_digits.py`` (copied to a fresh folder, so a stored profile never leaks in) is trained
with ``csp`` on 3 stages and ``csp-bw`` on 2 stages under jitter, both bit-identical to ``naspipe reference``,
while ``asp`` differs; ``search --json`` answers with label dicts; ``profile`` measures the costs that
``simulate`` then uses. Also: the presets train bit for bit as before the supernet API existed.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from naspipe.cli import main
from naspipe.runtime.transport.ports import free_port
from tests.helpers.per_cpu import AMD_EPYC_AVX2, EARLIER, cpu_key, for_this_cpu

pytestmark = pytest.mark.usefixtures("no_process_left_behind")

BIN = Path(sys.executable).parent
ROOT = Path(__file__).resolve().parents[2]
SPEC = "spos_digits:supernet"

# sha256 of params.json of `naspipe reference --space X --subnets 30 --seed 0`, recorded on the code before
# the supernet API (commit 249f9fa): the presets must keep training bit for bit the same. Per kind of CPU
# (tests/helpers/per_cpu.py): the AMD EPYC set is what 249f9fa's own reference gives on that machine.
PRESET_DIGESTS = {
    EARLIER: {
        "digits-cnn": "59f0a2d6a420867e45f238047f54fcfd67181cf4b8470260286047b11aa8769b",
        "tiny-transformer": "72db8724bc2f48d6fdb4e630806dd1a1e28c6e156d3653b1d9b4582310cdd049",
        "sparse-mlp": "d1797e0d0dbb708a5ae1903aa8f3b3f877f21992fbd861e903cf04b4c933ac3d",
    },
    AMD_EPYC_AVX2: {
        "digits-cnn": "0cfcf373cb1517d7fa89b1695ade03c08e95ec04a454f3ef46c59eb4cf75b957",
        "tiny-transformer": "994cb291932aa231b6d7eaf52ec8a1201e5c826ef521d948ebcefc2451da44ec",
        "sparse-mlp": "8ccaca724558ce8c466b94b11fb3e50d322acc15d54557bbe1ff20d55e2a1b0d",
    },
}


@pytest.mark.parametrize("preset", sorted(PRESET_DIGESTS[EARLIER]))
def test_presets_train_bit_for_bit_as_before(tmp_path, preset):
    out = tmp_path / preset
    assert main(["reference", "--space", preset, "--subnets", "30", "--seed", "0", "--out", str(out),
                 "--no-progress", "--shared-layers", "frozen"]) == 0  # (the digests were recorded frozen)
    digest = hashlib.sha256((out / "params.json").read_bytes()).hexdigest()
    assert digest == for_this_cpu(PRESET_DIGESTS)[preset], f"on {cpu_key()}"


def _verify(a: Path, b: Path, capsys, rc: int = 0) -> str:  # noqa: ANN001
    """``naspipe verify`` in this process: it reads the two run folders only, never the user's module."""
    capsys.readouterr()
    assert main(["verify", str(a), str(b)]) == rc
    return capsys.readouterr().out


@pytest.mark.slow
def test_your_own_supernet_from_a_module_on_pythonpath(tmp_path, capsys, warm):
    user = tmp_path / "mycode"
    user.mkdir()
    shutil.copy(ROOT / "data" / "supernets" / "spos_digits.py", user)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(user), str(ROOT)])}
    env.pop("PYTEST_CURRENT_TEST", None)
    # 12 subnets (24 before): the stages still overlap (asp differs); the check is the module on PYTHONPATH
    common = ["--space", SPEC, "--subnets", "12", "--seed", "5", "--no-progress"]
    ref = subprocess.run([str(BIN / "naspipe"), "reference", *common, "--out", "ref"], capture_output=True, text=True,
                         timeout=240, env=env, cwd=tmp_path)  # the console script itself, once
    assert ref.returncode == 0, ref.stderr[-2000:]

    def naspipe(*args: str) -> str:  # a process of its own, forked warm; its stage processes and torchrun's ranks
        return warm.stdout_of(list(args), tmp_path, env)  # are fresh interpreters importing the module themselves

    naspipe("train", *common, "--policy", "csp", "--stages", "3", "--jitter-ms", "2", "--out", "csp3")
    naspipe("train", *common, "--policy", "csp-bw", "--stages", "2", "--jitter-ms", "2", "--out", "bw2")
    naspipe("train", *common, "--policy", "asp", "--stages", "3", "--out", "asp3")
    assert _verify(tmp_path / "csp3", tmp_path / "ref", capsys).startswith("identical: 12 subnets")
    assert _verify(tmp_path / "bw2", tmp_path / "ref", capsys).startswith("identical: 12 subnets")
    assert _verify(tmp_path / "asp3", tmp_path / "ref", capsys, rc=1).startswith("differ")
    # torchrun: every rank imports the module itself
    port = free_port()  # (below the ephemeral range: naspipe.runtime.transport.ports)
    p = subprocess.run([str(BIN / "torchrun"), "--nproc-per-node", "2", "--master-addr", "127.0.0.1",
                        "--master-port", str(port), "-m", "naspipe.torchrun", *common, "--out", "torchrun"],
                       capture_output=True, text=True, timeout=240, env=env, cwd=tmp_path)
    assert p.returncode == 0, p.stderr[-3000:]
    assert _verify(tmp_path / "torchrun", tmp_path / "ref", capsys).startswith("identical: 12 subnets")
    naspipe("report", "csp3")
    html = (tmp_path / "csp3" / "report.html").read_text()
    assert SPEC in html and "DAG excerpt unavailable" not in html
    res = json.loads(naspipe("search", "csp3", "--space", SPEC, "--json", "--budget", "5", "--heldout", "2"))
    best = res["best"]["subnet"]
    assert res["space"] == SPEC and set(best) == {f"layer{i}" for i in range(4)}
    assert set(best.values()) <= {"shuffle3", "shuffle5", "shuffle7", "xception"}
    # costs: unit costs until profiled; the profile lands next to the module and simulate reads it
    unit = json.loads(naspipe("simulate", "--space", SPEC, "--stages", "2", "--subnets", "40", "--json"))
    out = naspipe("profile", "--space", SPEC, "--repeats", "2")
    prof_file = user / "spos_digits.supernet.costs.json"
    assert f"wrote {prof_file}" in out and prof_file.is_file()
    prof = json.loads(prof_file.read_text())
    cands = prof["candidates"]
    assert set(cands) == {"stem", "layer0", "layer1", "layer2", "layer3", "head"}
    assert all(0 < c["fwd"] < 1 and 0 < c["bwd"] < 1 and c["param_bytes"] > 0 and c["act_bytes"] > 0
               for blk in cands.values() for c in blk.values())
    assert prof["message_bytes"] == 16 * 8 * 8 * 4
    sim = json.loads(naspipe("simulate", "--space", SPEC, "--stages", "2", "--subnets", "40", "--json"))
    assert sim["makespan"] < unit["makespan"] / 100  # seconds measured, not unit costs
