"""Across machines: torchrun with c10d rendezvous on two hosts (network namespaces, tests/helpers/netns.py).

The commands ``naspipe plan --nodes 2`` prints run in each host's shell (2 stages x 2 replicas, a replica per host):
a host killed mid-run ends the other within 60 s, ``status.json`` names it, and the run resumes on both hosts from its
checkpoint, identical to the reference; a rank that fails on one host (4 stages, the pipeline across the hosts) is not
a lost host, and its run resumed on both hosts is identical to the reference; wrong network settings end every process
fast with one line naming the setting. Namespaces that cannot be made fail the
test (one line).
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from naspipe.cli import main
from naspipe.runtime.checkpoint import newest_complete, root_of
from naspipe.runtime.transport.netcheck import NetworkError, check_master, own_endpoint
from tests.helpers.netns import IFACE, SUBNET, NamespaceError, leftovers, two_hosts
from tests.helpers.waiting import wait_until

pytestmark = pytest.mark.usefixtures("no_process_left_behind")

COMMON = ["--space", "digits-cnn", "--subnets", "16", "--shared-layers", "serial", "--no-progress"]
TAG = f"nsp{os.getpid() % 10**7}"


@pytest.fixture
def hosts():
    try:
        with two_hosts(TAG) as hs:
            yield hs
    except NamespaceError as e:
        pytest.fail(f"cannot make the two hosts (network namespaces need root and iproute2): {e}", pytrace=False)
    assert not leftovers(TAG)


@pytest.fixture(scope="module")
def references(tmp_path_factory):
    d = tmp_path_factory.mktemp("refs")
    for name, extra in (("ref", []), ("ref-r2", ["--replicas", "2"])):
        assert main(["reference", *COMMON, *extra, "--out", str(d / name)]) == 0
    return d


def plan_lines(capsys, *args: str) -> list[str]:
    """The per-node lines ``naspipe plan --nodes 2 ...`` prints (the SLURM script after them is checked too)."""
    assert main(["plan", "--nodes", "2", "--procs-per-node", "2", "--node-addrs", f"{SUBNET}.1,{SUBNET}.2",
                 *args]) == 0
    out = capsys.readouterr().out
    head, script = out.split("# the same under SLURM: the same command with --slurm prints this script alone, for "
                             "sbatch as it is\n")
    assert subprocess.run(["bash", "-n"], input=script, text=True).returncode == 0
    lines = [line for line in head.splitlines() if not line.startswith("#")]
    assert len(lines) == 2
    return lines


def run_nodes(hosts, lines: list[str], logs: Path, limit: float) -> list[int]:
    """Node 0 first, then node 1; both must end within ``limit`` seconds (the processes inside too)."""
    logs.mkdir(exist_ok=True)
    procs = [h.shell(line, logs / f"node{i}.log") for i, (h, line) in enumerate(zip(hosts, lines, strict=True))]
    deadline = time.monotonic() + limit
    codes = []
    for p in procs:
        try:
            codes.append(p.wait(max(0.1, deadline - time.monotonic())))
        except subprocess.TimeoutExpired:
            pytest.fail(f"a node did not end within {limit:g} s: {_tail(logs)}")
    for h in hosts:
        assert h.wait_empty(5), f"processes left in {h.ns}"
    return codes


def _tail(logs: Path) -> str:
    return "\n".join(f"--- {p.name}\n" + p.read_text()[-3000:] for p in sorted(logs.glob("*.log")))


def _errors(logs: Path, pattern: str = "*.log") -> list[str]:
    return [line for p in sorted(logs.glob(pattern)) for line in p.read_text().splitlines()
            if line.startswith("naspipe: error:")]


def test_a_host_lost_mid_run_ends_the_other_and_the_run_resumes_on_both(hosts, references, tmp_path, capsys):
    """2 stages x 2 replicas on two hosts (a host holds one replica's stages): host 1 lost mid-run ends host 0, and
    the run resumed on both hosts from its checkpoint is identical to the reference. (The suite's torchrun run of
    stages x replicas: torchrun's world of 4 ranks is 2 stages x 2 replicas.)"""
    run, resumed = tmp_path / "run", tmp_path / "resumed"
    layout = ["--stages", "2", "--replicas", "2"]
    slow = ["--checkpoint-every", "4", "--jitter-ms", "150"]
    lines = plan_lines(capsys, "--ifname", IFACE, "--", *COMMON, *layout, *slow, "--out", str(run))
    logs = tmp_path / "logs"
    logs.mkdir()
    procs = [h.shell(line, logs / f"node{i}.log") for i, (h, line) in enumerate(zip(hosts, lines, strict=True))]
    assert wait_until(lambda: (newest_complete(root_of(run)) or 0) >= 4, 240,
                      unless=lambda: procs[0].poll() is not None), _tail(logs)
    hosts[1].kill_all()  # host 1 goes away: every process on it, at once
    lost_at = time.monotonic()
    assert hosts[0].wait_empty(60), f"host 0 still runs 60 s after host 1 was lost: {_tail(logs)}"
    assert procs[0].wait(5) != 0
    assert time.monotonic() - lost_at < 60
    assert (run / "status.json").exists(), f"no status.json after host 1 was lost: {_tail(logs)}"
    status = json.loads((run / "status.json").read_text())
    assert status["complete"] is False and not (run / "metrics.json").exists(), status
    assert status["lost"]["host"] == f"{SUBNET}.2" and len(status["lost"]["ranks"]) == 2, status
    assert any(f"lost host {SUBNET}.2" in e for e in _errors(logs)), _tail(logs)
    # (the resumed run needs no jitter: nothing is killed in it, and jitter never changes a result)
    lines = plan_lines(capsys, "--ifname", IFACE, "--", *COMMON, *layout, "--checkpoint-every", "4", "--resume",
                       str(run), "--out", str(resumed))
    assert run_nodes(hosts, lines, tmp_path / "logs2", 240) == [0, 0], _tail(tmp_path / "logs2")
    # the commands `naspipe plan --nodes 2` printed trained on both hosts, identical to the reference
    assert main(["verify", str(resumed), str(references / "ref-r2")]) == 0
    assert re.search(r"on digits-cnn, 2 stages x 2 replicas, resumed at subnet \d+: trained \d+ subnets "
                     r"\(\d+\.\.15 of 16\)", _tail(tmp_path / "logs2")), _tail(tmp_path / "logs2")


def test_a_rank_that_fails_on_another_host_is_not_a_lost_host(hosts, references, tmp_path, capsys):
    """4 stages on two hosts (stages 2 and 3 on host 1: the pipeline crosses the hosts); rank 2 fails at subnet 14.
    The run names the rank, not a lost host, and the command it prints (without --fault, with --resume) finishes
    the run on both hosts identical to the reference."""
    run, resumed = tmp_path / "run", tmp_path / "resumed"
    lines = plan_lines(capsys, "--ifname", IFACE, "--", *COMMON, "--checkpoint-every", "4", "--fault", "raise:2:14",
                       "--out", str(run))
    assert all(c != 0 for c in run_nodes(hosts, lines, tmp_path / "logs", 240)), _tail(tmp_path / "logs")
    assert "InjectedFault" in (run / "error-stage2.txt").read_text()
    # rank 0, stopped by torchrun's SIGTERM or meeting rank 1's end first (whichever wins the race), still says
    # how the run ended and which rank failed (no lost host)
    status = json.loads((run / "status.json").read_text())
    assert status["complete"] is False and "lost" not in status and status["rank"] == 2, status
    assert status["error"].startswith(("rank 0 was stopped by SIGTERM after rank(s) 2 failed",
                                       "stage 0 (rank 0) failed after rank(s) 2 failed")), status
    assert not any("lost host" in e for e in _errors(tmp_path / "logs"))
    assert f"without --fault with --resume {run}" in _tail(tmp_path / "logs")
    lines = plan_lines(capsys, "--ifname", IFACE, "--", *COMMON, "--checkpoint-every", "4", "--resume", str(run),
                       "--out", str(resumed))
    assert run_nodes(hosts, lines, tmp_path / "logs2", 240) == [0, 0], _tail(tmp_path / "logs2")
    assert main(["verify", str(resumed), str(references / "ref")]) == 0
    assert re.search(r"on digits-cnn, 4 stages, resumed at subnet \d+: trained \d+ subnets \(\d+\.\.15 of 16\)",
                     _tail(tmp_path / "logs2")), _tail(tmp_path / "logs2")


WRONG = ["GLOO_SOCKET_IFNAME=np9: this host", "has no interface 'np9'", f"set GLOO_SOCKET_IFNAME={IFACE}"]
MISSING = ["GLOO_SOCKET_IFNAME is not set", "loopback", f"set GLOO_SOCKET_IFNAME={IFACE}"]


def test_a_wrong_or_missing_interface_ends_every_process_fast_naming_it(hosts, tmp_path, capsys):
    """Host 0 names an interface it does not have, host 1 names none (one launch for both mistakes): every rank
    ends within 90 s with one line naming its own host's mistake."""
    lines = plan_lines(capsys, "--ifname", "np9", "--", *COMMON, "--out", str(tmp_path / "run"))
    lines[1] = lines[1].replace("GLOO_SOCKET_IFNAME=np9 ", "")
    assert "GLOO_SOCKET_IFNAME" not in lines[1] and "GLOO_SOCKET_IFNAME=np9 " in lines[0]
    t0 = time.monotonic()
    codes = run_nodes(hosts, lines, tmp_path / "logs", 90)
    assert all(c != 0 for c in codes) and time.monotonic() - t0 < 90
    for node, expected in ((0, WRONG), (1, MISSING)):
        errors = _errors(tmp_path / "logs", f"node{node}.log")
        assert len(errors) == 2, _tail(tmp_path / "logs")  # one line per rank
        for e in errors:
            assert all(x in e for x in expected), e


def _direct(host, rank: int, world: int, log: Path, master: str, extra: list[str] = (), per_host: int = 2):
    """Rank ``rank`` without torchrun (rank 0 serves the store), ``per_host`` ranks per host."""
    env = {"RANK": str(rank), "WORLD_SIZE": str(world), "LOCAL_RANK": str(rank % per_host),
           "LOCAL_WORLD_SIZE": str(per_host), "MASTER_ADDR": master, "MASTER_PORT": "29411",
           "GLOO_SOCKET_IFNAME": IFACE}
    line = f"exec {sys.executable} -m naspipe.torchrun {' '.join(COMMON)} --out {log.parent / 'run'} {' '.join(extra)}"
    return host.shell(line, log, env)


def test_an_unreachable_or_loopback_master_and_a_rank_that_never_arrives_are_named_fast(hosts, tmp_path):
    a, b = hosts
    t0 = time.monotonic()
    p_unreach = _direct(b, 2, 4, tmp_path / "unreachable.log", f"{SUBNET}.9", ["--connect-timeout", "10"])
    p_loop = _direct(b, 3, 4, tmp_path / "loopback.log", "localhost")
    # ranks 0, 1 (host a) and 2 (host b) meet at host a; rank 3 never starts
    meet = [_direct(a, 0, 4, tmp_path / "meet0.log", f"{SUBNET}.1", ["--connect-timeout", "15"]),
            _direct(a, 1, 4, tmp_path / "meet1.log", f"{SUBNET}.1", ["--connect-timeout", "15"]),
            _direct(b, 2, 4, tmp_path / "meet2.log", f"{SUBNET}.1", ["--connect-timeout", "15"])]
    for p in [p_unreach, p_loop, *meet]:
        assert p.wait(90 - (time.monotonic() - t0)) == 2
    read = {p.stem: [x for x in p.read_text().splitlines() if x.startswith("naspipe:")] for p in tmp_path.glob("*.log")}
    assert len(read["unreachable"]) == 1 and re.fullmatch(
        rf"naspipe: error: rank 2: cannot reach the master {SUBNET}\.9:29411 from {SUBNET}\.2 \(chosen by "
        rf"GLOO_SOCKET_IFNAME={IFACE}\) within 10 s .*", read["unreachable"][0]), read["unreachable"]
    assert read["loopback"] == ["naspipe: error: rank 3: MASTER_ADDR is localhost, a loopback address the other hosts "
                                "cannot reach: start node 0's torchrun with --local-addr <node 0's address> (c10d "
                                "rendezvous passes it on as MASTER_ADDR), or give --master-addr"]
    for r in range(3):
        assert len(read[f"meet{r}"]) == 1 and read[f"meet{r}"][0].startswith(
            f"naspipe: error: rank {r}: rank(s) 3 of 4 did not arrive at the master {SUBNET}.1:29411 within 15 s "
            "(--connect-timeout)"), read[f"meet{r}"]
        assert "GLOO_SOCKET_IFNAME" in read[f"meet{r}"][0] and "--local-addr" in read[f"meet{r}"][0]
    assert json.loads((tmp_path / "run" / "status.json").read_text())["complete"] is False


def test_bad_options_on_one_host_end_the_other_at_once(hosts, tmp_path):
    a, b = hosts
    t0 = time.monotonic()
    p0 = _direct(a, 0, 2, tmp_path / "r0.log", f"{SUBNET}.1", ["--connect-timeout", "60"], per_host=1)
    p1 = _direct(b, 1, 2, tmp_path / "r1.log", f"{SUBNET}.1", ["--connect-timeout", "60", "--window", "0"],
                 per_host=1)
    assert p1.wait(60) == 2 and p0.wait(60) == 2
    assert time.monotonic() - t0 < 45  # not the 60 s of --connect-timeout: rank 1 told rank 0
    lines = [x for x in (tmp_path / "r0.log").read_text().splitlines() if x.startswith("naspipe:")]
    assert len(lines) == 1 and lines[0].startswith("naspipe: error: rank 0: rank 1: ") and "--window" in lines[0], lines


# ---- the checks themselves, on this machine's own network stack (no namespaces) --------------------------
def test_an_interface_that_does_not_exist_is_named():
    env = {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29400", "WORLD_SIZE": "2", "LOCAL_WORLD_SIZE": "2",
           "GLOO_SOCKET_IFNAME": "nope0"}
    with pytest.raises(NetworkError, match=r"^GLOO_SOCKET_IFNAME=nope0: this host .* has no interface 'nope0'"):
        own_endpoint(env)


def test_one_host_needs_no_routable_address_and_a_closed_port_still_proves_the_route():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed once the block ends: the connection is refused
    ep = own_endpoint({"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "WORLD_SIZE": "2",
                       "LOCAL_WORLD_SIZE": "2", "GLOO_SOCKET_IFNAME": "lo"})
    assert not ep.multi_host and ep.address == "127.0.0.1"
    check_master(ep, 5)


def test_plan_needs_out_and_a_matching_world(capsys):
    assert main(["plan", "--nodes", "2", "--", *COMMON]) == 2
    assert "give --out after --" in capsys.readouterr().err
    assert main(["plan", "--nodes", "2", "--procs-per-node", "3", "--", *COMMON, "--stages", "4", "--out", "x"]) == 2
    assert "--stages 4 x --replicas 1 differs from the 6 processes" in capsys.readouterr().err
    assert main(["plan", "--nodes", "2", "--node-addrs", "a,b,c", "--", *COMMON, "--out", "x"]) == 2
    assert "--node-addrs lists 3 addresses for 2 nodes" in capsys.readouterr().err
    assert main(["plan", "--space", "digits-cnn"]) == 2
    assert "give --devices" in capsys.readouterr().err


def test_plan_fills_placeholders_and_one_interface_serves_every_node(capsys):
    assert main(["plan", "--nodes", "3", "--", *COMMON, "--out", "/shared/run"]) == 0
    cap = capsys.readouterr()
    assert cap.out.startswith("# 3 nodes x 1 process = 3 ranks (3 stages x 1 replica); ")
    assert "replace HOST<i>" in cap.err
    lines = [x for x in cap.out.splitlines() if x.startswith("GLOO_SOCKET_IFNAME=")]
    assert len(lines) == 3 and all("--rdzv-endpoint HOST0:29400" in x for x in lines)
    assert [("is_host=1" in x, f"--local-addr HOST{i}" in x) for i, x in enumerate(lines)] == [
        (True, True), (False, True), (False, True)]
    assert main(["plan", "--nodes", "2", "--ifname", "eth1", "--node-addrs", "h0,h1", "--", *COMMON,
                 "--out", "/shared/run"]) == 0
    out = capsys.readouterr().out
    assert out.count("GLOO_SOCKET_IFNAME=eth1 torchrun") == 2 and "#SBATCH --nodes=2" in out
    assert main(["plan", "--nodes", "1", "--", *COMMON, "--out", "/shared/run"]) == 0
    assert capsys.readouterr().out.startswith("# 1 node x 1 process = 1 rank (1 stage x 1 replica); ")
