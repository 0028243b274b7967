"""CPU kernels as part of a run (``naspipe.lifecycle.kernels``): each kind's recipe, what a process computing under
other kernels does, and what ``verify`` and ``--resume`` say of two kinds.

The golden digests of each kind are in ``tests/supernet/test_runs.py`` and ``tests/runtime/test_replicas.py``; the
fresh-process route from a process that already computed natively is taken there too.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from naspipe.cli import main
from naspipe.lifecycle import kernels

pytestmark = pytest.mark.usefixtures("no_process_left_behind")


def test_each_kind_sets_its_recipe_and_clears_the_others():
    base = {"ATEN_CPU_CAPABILITY": "avx512", "MKL_CBWR": "AVX512", "HOME": "/x"}
    assert kernels.environment("native", base) == {"HOME": "/x"}
    avx2 = kernels.environment("avx2", base)
    assert avx2["MKL_ENABLE_INSTRUCTIONS"] == "AVX2" and "MKL_CBWR" not in avx2 and avx2["HOME"] == "/x"
    assert kernels.environment("portable", base)["MKL_CBWR"] == "COMPATIBLE"
    assert kernels.recipe_kind(kernels.environment("portable", base)) == "portable"
    assert kernels.recipe_kind(base) is None  # caps of no kind
    assert "unknown kernels kind 'sse'" in kernels.kind_error("sse")


def test_launching_restores_this_process_environment():
    before = {k: os.environ.get(k) for k in kernels.MANAGED}
    with kernels.launching("portable"):
        assert kernels.recipe_kind() == "portable"
    assert {k: os.environ.get(k) for k in kernels.MANAGED} == before


def test_a_process_that_computed_natively_cannot_enter_another_kind():
    code = ("import torch; torch.ones(64) @ torch.ones(64)\n"
            "from naspipe.lifecycle import kernels\n"
            "try:\n    kernels.enter('avx2')\nexcept kernels.KernelsError as e:\n    print(e)\n")
    env = {k: v for k, v in os.environ.items() if k not in kernels.MANAGED and k != "PYTEST_CURRENT_TEST"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env).stdout
    if kernels.native_capability() == kernels.CAPPED_AT:  # (an AVX2 CPU: ATen's choice is the capped one anyway)
        assert out == "", out
    else:
        assert f"computed with torch's {kernels.native_capability()} kernels before --kernels avx2" in out, out


def test_verify_of_a_native_and_an_avx2_run_names_both(tmp_path, capsys):
    common = ["--space", "tiny-transformer", "--subnets", "6", "--no-progress"]
    assert main(["reference", *common, "--out", str(tmp_path / "n")]) == 0
    assert main(["reference", *common, "--kernels", "avx2", "--out", str(tmp_path / "a")]) == 0
    ident = json.loads((tmp_path / "a" / "run.json").read_text())["identity"]
    assert ident["kernels"] == "avx2" and ident["cpu_capability"] == "AVX2" and ident["cpu"] == kernels.cpu_name()
    capsys.readouterr()
    assert main(["verify", str(tmp_path / "n"), str(tmp_path / "a")]) == 1
    out = capsys.readouterr().out
    assert "kernels native" in out and "vs avx2 AVX2 on" in out and "rerun with --kernels avx2" in out, out


def test_a_checkpoint_of_other_kernels_is_refused_by_name(tmp_path, capsys):
    common = ["--space", "digits-cnn", "--stages", "2", "--subnets", "8", "--no-progress"]
    assert main(["train", *common, "--checkpoint-every", "4", "--fault", "raise:1:6", "--out",
                 str(tmp_path / "r")]) == 1
    capsys.readouterr()
    assert main(["train", *common, "--checkpoint-every", "4", "--kernels", "portable", "--resume",
                 str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err
    assert "was taken with kernels 'native', but the arguments give kernels 'portable'" in err, err


def test_runs_from_two_vendors_are_named_where_their_kernels_agree_only_within_one():
    """``avx2`` always; ``portable`` with an optimizer that takes a square root (adam, adamw, rmsprop: torch's CPU
    square root is MKL's, whose code follows the vendor) or with behaviour digests that differ; portable with
    momentum and equal behaviour is not named: it agrees. Two models of one vendor are not named either."""
    from naspipe.runfolder.runs import describe_differences, differences, machines_note

    intel, intel2, amd = ("GenuineIntel Intel(R) Xeon(R) Processor", "GenuineIntel Intel(R) Core(TM) i7",
                          "AuthenticAMD AMD EPYC")

    def ident(kind: str, optimizer: str, cpu: str, behaviour: str = "b" * 64) -> dict:
        return {"kernels": kind, "cpu": cpu, "optimizer": optimizer, "behaviour_sha256": behaviour}

    def note(kind: str, optimizer: str, a: str = intel, b: str = amd, behaviour: tuple[str, str] = ("b" * 64,) * 2):
        return machines_note(ident(kind, optimizer, a, behaviour[0]), ident(kind, optimizer, b, behaviour[1]))

    assert note("avx2", "momentum").endswith("avx2 gives the same bits only on CPUs of one vendor; rerun both with "
                                             "--kernels portable")
    assert note("avx2", "adam").endswith("adam's square root gives the same bits only on CPUs of one vendor, under "
                                         "any kernels; rerun both on CPUs of one vendor")
    for opt in ("adam", "adamw", "rmsprop"):
        assert kernels.vendor_bound("portable", opt)
        assert f"{opt}'s square root gives the same bits only on CPUs of one vendor" in note("portable", opt)
        assert note("portable", opt, intel, intel2) is None and note("avx2", opt, intel, intel2) is None
    assert note("portable", "momentum") is None and note("portable", "sgd") is None
    differ = ("a" * 64, "c" * 64)
    assert "forward or backward differs between the two CPUs (behaviour aaaa" in note("portable", "momentum",
                                                                                        behaviour=differ)
    both = note("portable", "adam", behaviour=differ)  # both causes named, and no advice that cannot help
    assert "forward or backward differs" in both and "adam's square root" in both and "sgd" not in both
    assert "forward or backward" not in note("avx2", "momentum", behaviour=differ)  # (avx2's MKL: expected)
    assert note("native", "adam") is None and note("unknown", "adam") is None  # (configuration differences)
    # another kernels kind, or two CPUs under native: named as configurations that differ
    assert "rerun both with --kernels portable (on CPUs of one vendor where the optimizer takes a square root)" in \
        describe_differences(differences(ident("native", "adam", intel), ident("avx2", "adam", amd)))
    assert describe_differences(differences(ident("native", "sgd", intel), ident("avx2", "sgd", intel2))).endswith(
        "rerun with --kernels avx2")
    assert "on CPUs of one vendor where the optimizer takes a square root" in describe_differences(
        differences(ident("native", "adam", intel), ident("native", "adam", amd)))
    assert kernels.vendor_of("portable AVX2 on GenuineIntel Intel(R) Xeon(R) Processor") == "GenuineIntel"
    assert kernels.vendor_of(amd) == "AuthenticAMD" and kernels.vendor_of(None) is None
    assert kernels.vendor_of("") is None and kernels.vendor_of("portable AVX2 (CPU not recorded)") is None


def test_a_truth_from_another_vendor_says_why_it_differs(monkeypatch):
    from naspipe.truth import check

    built = "portable AVX2 on GenuineIntel Intel(R) Xeon(R) Processor"
    monkeypatch.setattr(kernels, "cpu_vendor", lambda: "AuthenticAMD")
    monkeypatch.setattr(kernels, "cpu_name", lambda: "AuthenticAMD AMD EPYC")
    assert f"(built under {built}: adam's square root gives the same bits only on CPUs of one vendor" in \
        check._built_elsewhere("portable", "adam", built)
    assert "MKL gives the same bits only on CPUs of one vendor under kernels avx2" in check._built_elsewhere(
        "avx2", "momentum", built.replace("portable", "avx2"))
    assert "does not say which CPU built it" in check._built_elsewhere("portable", "adam", None)
    assert check._built_elsewhere("portable", "momentum", built) == ""
    assert check._built_elsewhere("portable", "momentum", None) == ""
    assert "agrees only on the kind of CPU that built it" in check._built_elsewhere(
        "native", "momentum", "native AVX512 on GenuineIntel Intel(R) Xeon(R) Processor")
    monkeypatch.setattr(kernels, "cpu_vendor", lambda: "GenuineIntel")
    assert check._built_elsewhere("portable", "adam", built) == ""


def test_a_portable_run_with_a_square_root_optimizer_says_at_its_start_where_its_bits_hold(tmp_path):
    """Before the hours of training a user meant to share across machines, not after a failed verify."""
    assert kernels.start_line("portable", "momentum") is None and kernels.start_line("avx2", "adam") is None
    assert kernels.start_line("native", "rmsprop") is None
    env = {k: v for k, v in os.environ.items() if k != "PYTEST_CURRENT_TEST"}
    p = subprocess.run([str(Path(sys.executable).with_name("naspipe")), "reference", "--space", "digits-cnn",
                        "--subnets", "2", "--kernels", "portable", "--optimizer", "adamw", "--out", str(tmp_path)],
                       capture_output=True, text=True, timeout=120, env=env)
    assert p.returncode == 0, p.stderr[-2000:]
    assert ("naspipe: kernels portable with adamw: the same bits only on CPUs of one vendor (adamw's square root "
            "follows the CPU's vendor") in p.stderr, p.stderr
    quiet = subprocess.run([*p.args, "--overwrite", "--no-progress"], capture_output=True, text=True, timeout=120,
                           env=env)
    assert quiet.returncode == 0 and quiet.stderr == "", quiet.stderr[-2000:]  # --no-progress keeps stderr quiet
