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
from naspipe.lifecycle import kernels
from naspipe.runtime.transport.ports import free_port
from tests.helpers.per_cpu import PORTABLE, recorded

pytestmark = pytest.mark.usefixtures("no_process_left_behind")

BIN = Path(sys.executable).parent
ROOT = Path(__file__).resolve().parents[2]
SPEC = "spos_digits:supernet"

# sha256 of params.json of `naspipe reference --space X --subnets 30 --seed 0 --shared-layers frozen --kernels K`:
# the presets must keep training bit for bit as on the code before the supernet API (commit 249f9fa, run under the
# same kernels' environment gives these same digests). Per kernels kind (tests/helpers/per_cpu.py): portable one
# table (recorded on RECORDED_ON); avx2 one per vendor (AMD's: what an AMD EPYC with AVX2 gives natively, which
# an AMD EPYC with AVX-512 capped at AVX2 reproduces).
PRESET_DIGESTS = {
    PORTABLE: {
        "digits-cnn": "fc995dde8002a2e408037ff00691862e68cf364f04fd8a22f881d84955024b08",
        "tiny-transformer": "caad79bb91ed2553eed80255c7f8ebd6728f27bc1e11575febddda93fa3f63cf",
        "sparse-mlp": "548dfba6068ebdb318684c1aa71ad38afb2da6c9f3a974d8f89e16653ac55dfe",
    },
    "avx2 on GenuineIntel": {
        "digits-cnn": "531701f79286d908aada0191c63221179bf44655c73d2cc6e51245044ac3ca67",
        "tiny-transformer": "82134d4080fc05012feda9eafc2609c26cb4afbcd0004467cb5fe32cb1020022",
        "sparse-mlp": "88e33ee426b32c043e622360624ba1526df684407825a9aa4b3223dad3d7e533",
    },
    "avx2 on AuthenticAMD": {
        "digits-cnn": "0cfcf373cb1517d7fa89b1695ade03c08e95ec04a454f3ef46c59eb4cf75b957",
        "tiny-transformer": "994cb291932aa231b6d7eaf52ec8a1201e5c826ef521d948ebcefc2451da44ec",
        "sparse-mlp": "8ccaca724558ce8c466b94b11fb3e50d322acc15d54557bbe1ff20d55e2a1b0d",
    },
}


@pytest.mark.parametrize("kind", [PORTABLE, "avx2"])
@pytest.mark.parametrize("preset", sorted(PRESET_DIGESTS[PORTABLE]))
def test_presets_train_bit_for_bit_as_before(pinned_runs, preset, kind):
    """``naspipe reference`` under ``kind`` (tests/helpers/runs.py's ``pinned_runs``: every such run of the suite in
    one fresh process per kind)."""
    digest = hashlib.sha256((pinned_runs(kind) / f"{preset}-30" / "params.json").read_bytes()).hexdigest()
    assert digest == recorded(PRESET_DIGESTS, kind)[preset], f"{kind} on {kernels.cpu_name()}"


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
