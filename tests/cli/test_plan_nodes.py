"""``naspipe plan --nodes N``: the SLURM script runs, and the options it is made from are checked first.

Issue 43, item 10. The script ``--slurm`` prints is run by bash against stub ``scontrol``, ``srun``, ``ip`` and
``torchrun`` (executables in a temporary folder first on ``PATH``; each records its arguments): every node gets its
own interface, a failing ``ip`` ends the job before torchrun starts, and the printed text is what ``sbatch`` takes as
it is. An empty node address and a port above 65535 are refused in one line, and a GPU plan is made on a machine
without one (the plan is for other machines). No torch process starts here; each test takes a second or two.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from naspipe.cli import main

COMMON = ["--space", "digits-cnn", "--subnets", "16", "--shared-layers", "serial", "--no-progress",
          "--out", "/shared/run"]
PLAN = ["plan", "--nodes", "2", "--procs-per-node", "2"]

# the stubs: srun runs its command once per node (SLURM_NODEID 0..N-1; -w: the node named), ip prints node i's
# address 10.0.0.(i+1) on the interface asked for, or fails when STUB_IP_FAILS names the node
STUBS = {
    "scontrol": """#!/bin/bash
echo "scontrol $*" >> "$STUB_LOG"
for ((i = 0; i < STUB_NODES; i++)); do echo "node$i"; done
""",
    "srun": """#!/bin/bash
echo "srun $*" >> "$STUB_LOG"
only=""
while [[ "$1" == -* ]]; do
  if [[ "$1" == -w ]]; then only=${2#node}; shift; fi
  shift
done
status=0
for ((i = 0; i < STUB_NODES; i++)); do
  if [[ -n "$only" && "$i" != "$only" ]]; then continue; fi
  SLURM_NODEID=$i SLURMD_NODENAME=node$i "$@" || status=$?
done
exit $status
""",
    "ip": """#!/bin/bash
echo "ip node$SLURM_NODEID $*" >> "$STUB_LOG"
if [[ "${STUB_IP_FAILS:-}" == "$SLURM_NODEID" ]]; then echo "ip: cannot talk to the kernel" >&2; exit 1; fi
dev=${@: -1}
echo "2: $dev    inet 10.0.0.$((SLURM_NODEID + 1))/24 brd 10.0.0.255 scope global $dev\\       valid_lft forever"
""",
    "torchrun": """#!/bin/bash
echo "torchrun node$SLURM_NODEID GLOO_SOCKET_IFNAME=$GLOO_SOCKET_IFNAME $*" >> "$STUB_LOG"
""",
}


def _stub_path(tmp_path: Path) -> Path:
    d = tmp_path / "bin"
    d.mkdir()
    for name, text in STUBS.items():
        (d / name).write_text(text)
        (d / name).chmod(0o755)
    return d


def _script(capsys, *args: str) -> str:
    assert main([*PLAN, *args, "--slurm", "--", *COMMON]) == 0
    cap = capsys.readouterr()
    assert cap.err == ""
    return cap.out


def _run(script: str, tmp_path: Path, **env: str) -> tuple[subprocess.CompletedProcess, list[str]]:
    """Run ``script`` as sbatch would (bash, the job's variables set) against the stubs; its result and the log."""
    log = tmp_path / "calls.log"
    log.unlink(missing_ok=True)
    bindir = tmp_path / "bin" if (tmp_path / "bin").exists() else _stub_path(tmp_path)
    path = f"{bindir}:{os.environ['PATH']}"
    job = {"PATH": path, "STUB_LOG": str(log), "STUB_NODES": "2", "SLURM_JOB_NODELIST": "node[0-1]",
           "SLURM_JOB_ID": "77", "HOME": str(tmp_path), **env}
    (tmp_path / "job.sh").write_text(script)
    done = subprocess.run([shutil.which("bash") or "/bin/bash", str(tmp_path / "job.sh")], env=job,
                          capture_output=True, text=True, timeout=30)
    return done, log.read_text().splitlines() if log.exists() else []


def test_the_printed_script_is_what_sbatch_takes(capsys):
    """The whole of stdout: the interpreter line first, every #SBATCH line before the first command (sbatch stops
    reading directives there), nothing else; bash parses it."""
    script = _script(capsys, "--ifname", "eth1")
    lines = script.splitlines()
    assert lines[0] == "#!/bin/bash"
    first_command = next(i for i, x in enumerate(lines) if x and not x.startswith("#"))
    assert [x for x in lines[first_command:] if x.startswith("#SBATCH")] == []
    assert "#SBATCH --nodes=2" in lines[:first_command] and "#SBATCH --ntasks-per-node=1" in lines[:first_command]
    assert subprocess.run(["bash", "-n"], input=script, text=True).returncode == 0


def test_each_node_runs_torchrun_on_its_own_interface_and_address(capsys, tmp_path):
    done, log = _run(_script(capsys, "--ifname", "eth1,ib0"), tmp_path)
    assert done.returncode == 0, done.stderr
    runs = [x for x in log if x.startswith("torchrun")]
    assert len(runs) == 2, log
    for i, (iface, addr) in enumerate((("eth1", "10.0.0.1"), ("ib0", "10.0.0.2"))):
        assert runs[i].startswith(f"torchrun node{i} GLOO_SOCKET_IFNAME={iface} --nnodes 2 --nproc-per-node 2 "), runs
        assert "--rdzv-endpoint 10.0.0.1:29400 --rdzv-id naspipe-77" in runs[i]
        assert f"--rdzv-conf is_host={int(i == 0)},join_timeout=60 --local-addr {addr} " in runs[i]
        assert runs[i].endswith("-m naspipe.torchrun " + " ".join(COMMON))
    assert [x for x in log if x.startswith("ip")] == [  # node 0's address for the endpoint, then each its own
        "ip node0 -o -4 addr show dev eth1", "ip node0 -o -4 addr show dev eth1", "ip node1 -o -4 addr show dev ib0"]
    # one interface serves every node
    done, log = _run(_script(capsys, "--ifname", "eth1"), tmp_path)
    assert done.returncode == 0, done.stderr
    assert [x.split()[2] for x in log if x.startswith("torchrun")] == ["GLOO_SOCKET_IFNAME=eth1"] * 2


@pytest.mark.parametrize("node", ["0", "1"])
def test_a_failing_ip_ends_the_job_before_torchrun_starts_with_an_empty_address(capsys, tmp_path, node):
    done, log = _run(_script(capsys, "--ifname", "eth1,eth2"), tmp_path, STUB_IP_FAILS=node)
    assert done.returncode != 0
    assert f"naspipe: ip cannot read interface eth{int(node) + 1} on " in done.stderr, done.stderr
    assert not any(x.startswith("torchrun") and "--local-addr  " in x for x in log), log
    if node == "0":  # the rendezvous address is node 0's: nothing starts
        assert not any(x.startswith("torchrun") for x in log), log


def test_an_interface_without_an_ipv4_address_is_named(capsys, tmp_path):
    _stub_path(tmp_path)
    (tmp_path / "bin" / "ip").write_text("#!/bin/bash\necho \"ip $*\" >> \"$STUB_LOG\"\n")  # no address at all
    done, log = _run(_script(capsys, "--ifname", "eth1"), tmp_path)
    assert done.returncode != 0 and "naspipe: interface eth1 on " in done.stderr and "has no IPv4 address" in \
        done.stderr, done.stderr
    assert not any(x.startswith("torchrun") for x in log), log


@pytest.mark.parametrize("args,says", [
    (["--node-addrs", "10.0.0.1,"], "--node-addrs: node 1's address '' is empty"),
    (["--node-addrs", ",10.0.0.2"], "--node-addrs: node 0's address '' is empty"),
    (["--rdzv-port", "70000"], "--rdzv-port must be <= 65535, got 70000"),
    (["--rdzv-port", "0"], "--rdzv-port must be >= 1, got 0"),
    (["--ifname", "eth1,"], "--ifname: node 1's interface name is empty"),
    (["--ifname", "eth1 eth2"], "--ifname: the interface name 'eth1 eth2' is not an interface name"),
    (["--ifname", "a-very-long-interface"], "is longer than 15 characters"),
    (["--ifname="], "--ifname: the interface name is empty"),  # (given empty is not "not given")
    (["--node-addrs="], "--node-addrs is empty: give one address per node"),
    (["--node-addrs", "10.0.0.1"], "--node-addrs lists 1 address for 2 nodes"),
    (["--nodes", "99999999999999999999"], "--nodes must be <= 65536"),  # (not a line per node first)
    (["--procs-per-node", "100000"], "--procs-per-node must be <= 1024"),
])
def test_bad_node_options_are_one_line_before_anything_is_printed(capsys, monkeypatch, args, says):
    _training_options_unread(monkeypatch)  # refused at once, before the plan choice
    assert main([*PLAN, *args, "--", *COMMON]) == 2
    cap = capsys.readouterr()
    assert cap.out == "" and says in cap.err and cap.err.count("\n") == 1, cap.err


def test_the_note_names_only_what_is_missing(capsys):
    assert main([*PLAN, "--node-addrs", "10.0.0.1,10.0.0.2", "--", *COMMON]) == 0
    assert capsys.readouterr().err == "naspipe: note: replace IFACE with its interface (or give --ifname)\n"
    assert main([*PLAN, "--ifname", "eth1", "--", *COMMON]) == 0
    assert capsys.readouterr().err == "naspipe: note: replace HOST<i> with node i's address (or give --node-addrs)\n"


def test_slurm_needs_the_interface(capsys, monkeypatch):
    _training_options_unread(monkeypatch)
    assert main([*PLAN, "--slurm", "--", *COMMON]) == 2
    assert "--slurm needs --ifname" in capsys.readouterr().err


def _training_options_unread(monkeypatch) -> None:  # noqa: ANN001
    """The training options' checks (a plan choice: up to 200 simulations) fail the test if they are reached."""
    def reached(*_a: object, **_k: object) -> None:
        raise AssertionError("the training options were checked before the node options")

    monkeypatch.setattr("naspipe.cli.cmd_train.world_config", reached)


def test_a_gpu_plan_is_made_on_a_machine_without_one(capsys):
    """The plan is for the other machines: --device cuda is kept (and asks SLURM for the GPUs), not refused here."""
    import torch

    if torch.cuda.is_available():  # (the point is a login node without a GPU: pretend to be one)
        pytest.skip("this machine has a GPU")
    assert main([*PLAN, "--ifname", "eth1", "--", *COMMON, "--device", "cuda"]) == 0
    out = capsys.readouterr().out
    assert out.count("--device cuda") == 3 and "#SBATCH --gpus-per-node=2" in out  # two nodes' lines, the script
    assert main([*PLAN, "--ifname", "eth1", "--", *COMMON]) == 0
    assert "--gpus-per-node" not in capsys.readouterr().out
    # training itself still refuses cuda on a machine without it
    assert main(["train", *COMMON[:-2], "--stages", "2", "--device", "cuda", "--out", "x"]) == 2
    assert "torch sees no CUDA device" in capsys.readouterr().err


def test_plans_run_options_reach_every_nodes_command(capsys):
    """--space, --subnets (and the other run options) given before -- go into every node's command; the same
    option before and after -- with two values is refused."""
    from naspipe.cli import main

    assert main(["plan", "--nodes", "2", "--space", "digits-cnn", "--subnets", "30", "--ifname", "eth0",
                 "--node-addrs", "10.0.0.1,10.0.0.2", "--", "--out", "/shared/run"]) == 0
    lines = [x for x in capsys.readouterr().out.splitlines() if "naspipe.torchrun" in x]
    assert lines and all("--space digits-cnn" in x and "--subnets 30" in x for x in lines), lines
    assert main(["plan", "--nodes", "2", "--space", "digits-cnn", "--ifname", "eth0", "--", "--out", "/x",
                 "--space", "tiny-transformer"]) == 2
    assert "give it once" in capsys.readouterr().err


@pytest.mark.parametrize("addr", ["::1", "[::1]"])
def test_an_ipv6_address_is_bracketed_once_in_the_endpoint(capsys, addr):
    """[::1] gave the endpoint [[::1]]:29400 (and --local-addr [::1]): both forms give [::1]:29400 and ::1."""
    assert main([*PLAN, "--ifname", "eth0", "--node-addrs", f"{addr},[fe80::2]", "--", *COMMON]) == 0
    lines = [x for x in capsys.readouterr().out.splitlines() if "naspipe.torchrun" in x and "srun" not in x]
    node_lines = [x for x in lines if x.startswith("GLOO_SOCKET_IFNAME")]
    assert len(node_lines) == 2, lines
    for line, own in zip(node_lines, ("::1", "fe80::2"), strict=True):
        assert "--rdzv-endpoint '[::1]:29400'" in line and f"--local-addr {own} " in line, line
        assert "[[" not in line


@pytest.mark.parametrize("addr", ["[::1", "::1]", "[]", "[[::1]]"])
def test_an_address_with_a_bracket_without_its_pair_is_refused(capsys, addr):
    assert main([*PLAN, "--ifname", "eth0", "--node-addrs", f"10.0.0.1,{addr}", "--", *COMMON]) == 2
    cap = capsys.readouterr()
    assert cap.out == "" and f"--node-addrs: node 1's address {addr!r} is not an address" in cap.err
    assert cap.err.count("\n") == 1


def test_the_slurm_script_honours_the_rendezvous_id(capsys, tmp_path):
    """--rdzv-id was ignored under --slurm (always naspipe-$SLURM_JOB_ID): given, it is the id every node joins;
    one that is not a word is refused in one line."""
    done, log = _run(_script(capsys, "--ifname", "eth1", "--rdzv-id", "id-1"), tmp_path)
    assert done.returncode == 0, done.stderr
    runs = [x for x in log if x.startswith("torchrun")]
    assert len(runs) == 2 and all("--rdzv-id id-1 --rdzv-conf" in x for x in runs), runs
    done, log = _run(_script(capsys, "--ifname", "eth1", "--rdzv-id", "it's"), tmp_path)
    assert done.returncode == 0, done.stderr
    assert all("--rdzv-id it's --rdzv-conf" in x for x in log if x.startswith("torchrun")), log
    assert main([*PLAN, "--ifname", "eth1", "--rdzv-id", "a b", "--", *COMMON]) == 2
    assert "--rdzv-id must be one word" in capsys.readouterr().err
    assert main([*PLAN, "--ifname", "eth1", "--rdzv-id", "job7", "--", *COMMON]) == 0
    out = capsys.readouterr().out
    assert out.count("--rdzv-id job7 ") == 3, out  # (two nodes' lines, and the script)


@pytest.mark.parametrize("addr", ["10.0.0.1\necho INJECTED\n#", "10.0.0.1\recho x", "10.0.0.1\tx", "node\x1b[2J",
                                  "10.0.0.1\u2028x"])
def test_an_address_with_whitespace_or_a_control_character_is_refused(capsys, addr):
    """The ``# node 0 (ADDRESS, ...)`` comment printed the address raw: a newline in it printed ``echo INJECTED`` as a
    line of its own in the plan a user pastes. Refused in one line, nothing printed."""
    assert main([*PLAN, "--ifname", "eth0", "--node-addrs", f"{addr},10.0.0.2", "--", *COMMON]) == 2
    cap = capsys.readouterr()
    assert cap.out == "" and cap.err.count("\n") == 1 and "INJECTED" not in cap.err.replace(repr(addr), ""), cap.err
    assert f"--node-addrs: node 0's address {addr!r}" in cap.err
    assert "whitespace or a control character" in cap.err or "has spaces" in cap.err


@pytest.mark.parametrize("addr,host", [("10.0.0.1:29400", "10.0.0.1"), ("node1:29400", "node1"),
                                       ("[::1]:29400", "::1")])
def test_a_host_and_port_is_refused_naming_rdzv_port(capsys, addr, host):
    """``10.0.0.1:29400`` was taken as an IPv6 address (it holds a ':'): the endpoint [10.0.0.1:29400]:29400."""
    assert main([*PLAN, "--ifname", "eth0", "--node-addrs", f"{addr},10.0.0.2", "--", *COMMON]) == 2
    cap = capsys.readouterr()
    assert cap.out == "" and cap.err.count("\n") == 1, cap.err
    assert f"is a host and a port: give the host alone ({host!r}) and the port with --rdzv-port" in cap.err


@pytest.mark.parametrize("addr,says", [
    ("10.0.0.256", "is neither an IP address nor a host name"), ("node_1", "is neither an IP address nor a host name"),
    ("-node", "is neither an IP address nor a host name"), ("1.2.3", "is neither an IP address nor a host name"),
    ("[10.0.0.1]", "is an IPv4 address in brackets"), ("fe80::1%a;b", "has the zone 'a;b'"),
    ("fe80::zz", "is not an IPv6 address"), ("[node1]", "is not an IPv6 address"),
])
def test_an_address_that_is_neither_an_ip_nor_a_host_name_is_refused(capsys, addr, says):
    assert main([*PLAN, "--ifname", "eth0", "--node-addrs", f"10.0.0.1,{addr}", "--", *COMMON]) == 2
    cap = capsys.readouterr()
    assert cap.out == "" and cap.err.count("\n") == 1 and f"node 1's address {addr!r} {says}" in cap.err, cap.err


@pytest.mark.parametrize("addr,local,endpoint", [
    ("fe80::1%eth0", "fe80::1%eth0", "[fe80::1%eth0]:29400"),
    ("[fe80::1%eth0]", "fe80::1%eth0", "[fe80::1%eth0]:29400"),
    ("node-1.cluster.example", "node-1.cluster.example", "node-1.cluster.example:29400"),
    ("10.0.0.1", "10.0.0.1", "10.0.0.1:29400"),
])
def test_ip_literals_zones_and_host_names_are_taken(capsys, addr, local, endpoint):
    assert main([*PLAN, "--ifname", "eth0", "--node-addrs", f"{addr},node2", "--", *COMMON]) == 0
    out = capsys.readouterr().out
    node0 = next(x for x in out.splitlines() if x.startswith("GLOO_SOCKET_IFNAME") and "is_host=1" in x)
    assert f"--rdzv-endpoint {endpoint}" in node0.replace("'", "") and f"--local-addr {local} " in node0, node0
    head = out.split("# the same under SLURM")[0].splitlines()  # the lines before the script: comments and commands
    assert all(x.startswith(("#", "GLOO_SOCKET_IFNAME")) for x in head) and f"# node 0 ({local};" in out, head
