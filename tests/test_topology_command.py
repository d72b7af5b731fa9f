"""`commbench topo` on this machine, on imported fixtures, and on bad input."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from commbench import cli
from commbench.topology import netns
from commbench.topology.discover import read_nics

FIXTURES = Path(__file__).parent / "fixtures" / "topology"


@pytest.fixture
def topo(monkeypatch, capsys):
    """Run `commbench topo ARGS`; returns (exit code, stdout, stderr)."""
    monkeypatch.setitem(cli.COMMANDS, "topo", "topo")
    monkeypatch.setenv("COLUMNS", "200")  # rich wraps to the terminal; keep the tables whole

    def run(*args: str):
        code = cli.main(["topo", *args])
        out, err = capsys.readouterr()
        return code, out, err

    return run


def test_this_machine_human_view(topo):
    code, out, _ = topo("--node-name", "here")
    assert code == 0
    assert "Nodes" in out and "here" in out and "nvml+sysfs" in out


def test_this_machine_json(topo):
    code, out, _ = topo("--json")
    assert code == 0
    node = json.loads(out)["nodes"][0]
    assert node["source"] == "nvml+sysfs"
    assert isinstance(node["gpus"], list) and isinstance(node["nics"], list)
    if not node["gpus"]:  # a machine without GPU says why
        assert node["notes"]


def test_imported_dgx_views(topo):
    code, out, _ = topo(
        "--import-nccl-xml",
        str(FIXTURES / "dgx_h100_nccl_topo.xml"),
        "--import-smi-topo",
        str(FIXTURES / "dgx_h100_nvidia_smi_topo.txt"),
        "--node-name",
        "dgx-a01",
    )
    assert code == 0
    assert out.count("NV18") == 2 * 8 * 7  # both matrices
    assert "NIC9 = mlx5_9" in out and "nccl-xml:dgx_h100_nccl_topo.xml" in out


def test_imported_json_matrix(topo):
    code, out, _ = topo("--json", "--import-smi-topo", str(FIXTURES / "dgx_h100_nvidia_smi_topo.txt"))
    node = json.loads(out)["nodes"][0]
    assert code == 0 and node["links"][0][:3] == ["X", "NV18", "NV18"] and node["links"][0][8] == "PIX"


@pytest.mark.parametrize("option", ["--import-nccl-xml", "--import-smi-topo"])
def test_missing_file_is_a_usage_error(topo, option):
    code, _, err = topo(option, "/nonexistent/topo")
    assert code == 2 and "cannot read /nonexistent/topo" in err


def test_unparsable_file_is_a_usage_error(topo, tmp_path):
    junk = tmp_path / "topo.xml"
    junk.write_text("not xml at all <")
    code, _, err = topo("--import-nccl-xml", str(junk))
    assert code == 2 and "is not XML" in err and err.count("\n") == 1


def test_kernel_view_of_interfaces_matches_sysfs():
    """The ioctl reading used when /sys belongs to another network namespace."""
    by_name = {nic.name: nic for nic in netns.read_interfaces()}
    assert "lo" not in by_name
    for name, nic in by_name.items():
        sysfs = Path("/sys/class/net") / name
        assert nic.mtu == int((sysfs / "mtu").read_text())
        assert nic.address == (sysfs / "address").read_text().strip()


def test_foreign_sysfs_falls_back_to_the_kernel(monkeypatch):
    """When /sys lists an interface this namespace lacks, only the namespace's are reported."""
    present = netns.namespace_interfaces() - {"lo"}
    if not present:
        pytest.skip("no network interface besides loopback")
    only_in_sysfs = max(present)
    monkeypatch.setattr(netns, "namespace_interfaces", lambda: present - {only_in_sysfs})
    nics, notes = read_nics(Path("/sys"))
    assert "another network namespace" in notes[0]
    assert only_in_sysfs not in {nic.name for nic in nics}


@pytest.mark.cluster
@pytest.mark.skipif(
    os.geteuid() != 0 or not shutil.which("ip") or not shutil.which("nsenter"),
    reason="needs root, ip and nsenter to build a network namespace",
)
def test_discovery_inside_a_namespace_entered_with_nsenter():
    """The emulated cluster's way in: /sys stays the host's, the interfaces are the namespace's."""
    namespace, host_end = f"topons{os.getpid()}", f"topov{os.getpid()}"
    subprocess.run(["ip", "netns", "add", namespace], check=True)
    try:
        subprocess.run(
            ["ip", "link", "add", host_end, "type", "veth", "peer", "name", "eth0", "netns", namespace], check=True
        )
        subprocess.run(["ip", "netns", "exec", namespace, "ip", "link", "set", "eth0", "mtu", "1400", "up"], check=True)
        script = "import json; from commbench.topology import discover_node; print(json.dumps(discover_node('n1').to_dict()))"
        result = subprocess.run(
            ["nsenter", f"--net=/var/run/netns/{namespace}", sys.executable, "-c", script],
            check=True,
            capture_output=True,
            text=True,
            timeout=60,
        )
    finally:
        subprocess.run(["ip", "netns", "del", namespace], check=False)  # takes the veth pair with it
    node = json.loads(result.stdout)
    assert [(nic["name"], nic["mtu"]) for nic in node["nics"] if nic["kind"] == "Ethernet"] == [("eth0", 1400)]
    assert any("another network namespace" in note for note in node["notes"])
