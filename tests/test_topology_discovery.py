"""Live discovery against a mocked NVML and a fake sysfs tree: a DGX-class node and a PCIe box."""

from __future__ import annotations

import os
import sys
import types
from dataclasses import dataclass, field
from pathlib import Path

import pynvml as real_nvml
import pytest

from commbench.topology import discover_node, node_name
from commbench.topology.smi_text import read_smi_topo
from commbench.topology.sysfs import pcie_word

FIXTURES = Path(__file__).parent / "fixtures" / "topology"

# NVML's own numbers, spelled out so the fakes read like the API
NVLINK_TO_GPU, NVLINK_TO_SWITCH = 0, 2
NVLINK_VERSION_4_0 = 6
SINGLE, MULTIPLE, NODE, SYSTEM = 10, 20, 40, 50


# ---------------------------------------------------------------- mocked NVML


@dataclass
class FakeGpu:
    name: str
    bus_id: str  # NVML spelling, 00000000:18:00.0
    numa_node: int | None  # None: the driver does not answer nvmlDeviceGetNumaNodeId
    cpus: list[int]
    memory_bytes: int = 80 * 2**30
    nvlinks: list[tuple[str, int]] = field(default_factory=list)  # (remote bus id, remote type)
    pcie: tuple[int, int, int, int] = (5, 5, 16, 16)  # current gen, max gen, current width, max width


def fake_nvml(gpus: list[FakeGpu], levels: dict[tuple[int, int], int], state_by_field_values=False):
    """A stand-in for the pynvml module: real constants and errors, answers from `gpus`.

    Handles are GPU indices. With state_by_field_values, nvmlDeviceGetNvLinkState is not
    supported and link state comes from nvmlDeviceGetFieldValues, as on some Hopper drivers.
    """
    nvml = types.ModuleType("pynvml")
    for name in dir(real_nvml):
        if name.startswith(("NVML_", "NVMLError")):
            setattr(nvml, name, getattr(real_nvml, name))
    nvml.calls = []

    def not_supported(*_):
        raise real_nvml.NVMLError_NotSupported()

    def link(handle, index):
        if index >= len(gpus[handle].nvlinks):
            raise real_nvml.NVMLError_NotSupported()
        return gpus[handle].nvlinks[index]

    def field_values(handle, fields):
        ((field_id, index),) = fields
        assert field_id == real_nvml.NVML_FI_DEV_NVLINK_GET_STATE
        link(handle, index)
        return [types.SimpleNamespace(nvmlReturn=real_nvml.NVML_SUCCESS, value=types.SimpleNamespace(uiVal=1))]

    def p2p_status(handle, peer, index):
        nvml.calls.append(("p2p", index))
        return real_nvml.NVML_P2P_STATUS_OK

    def cpu_affinity(handle, words):
        return [sum(1 << (cpu - 64 * word) for cpu in gpus[handle].cpus if cpu // 64 == word) for word in range(words)]

    nvml.nvmlInit = nvml.nvmlShutdown = lambda: None
    nvml.nvmlSystemGetDriverVersion = lambda: "550.54.15"
    nvml.nvmlDeviceGetCount = lambda: len(gpus)
    nvml.nvmlDeviceGetHandleByIndex = lambda index: index
    nvml.nvmlDeviceGetName = lambda handle: gpus[handle].name
    nvml.nvmlDeviceGetPciInfo = lambda handle: types.SimpleNamespace(busId=gpus[handle].bus_id)
    nvml.nvmlDeviceGetMemoryInfo = lambda handle: types.SimpleNamespace(total=gpus[handle].memory_bytes)
    nvml.nvmlDeviceGetCudaComputeCapability = lambda handle: (9, 0)
    nvml.nvmlDeviceGetNumaNodeId = lambda handle: (
        gpus[handle].numa_node if gpus[handle].numa_node is not None else not_supported()
    )
    nvml.nvmlDeviceGetCpuAffinity = cpu_affinity
    nvml.nvmlDeviceGetCurrPcieLinkGeneration = lambda handle: gpus[handle].pcie[0]
    nvml.nvmlDeviceGetMaxPcieLinkGeneration = lambda handle: gpus[handle].pcie[1]
    nvml.nvmlDeviceGetCurrPcieLinkWidth = lambda handle: gpus[handle].pcie[2]
    nvml.nvmlDeviceGetMaxPcieLinkWidth = lambda handle: gpus[handle].pcie[3]
    nvml.nvmlDeviceGetNvLinkState = not_supported if state_by_field_values else lambda h, i: link(h, i) and 1
    nvml.nvmlDeviceGetFieldValues = field_values if state_by_field_values else not_supported
    nvml.nvmlDeviceGetNvLinkVersion = lambda h, i: link(h, i) and NVLINK_VERSION_4_0
    nvml.nvmlDeviceGetNvLinkRemotePciInfo = lambda h, i: types.SimpleNamespace(busId=link(h, i)[0])
    nvml.nvmlDeviceGetNvLinkRemoteDeviceType = lambda h, i: link(h, i)[1]
    nvml.nvmlDeviceGetTopologyCommonAncestor = lambda a, b: levels[min(a, b), max(a, b)]
    nvml.nvmlDeviceGetP2PStatus = p2p_status
    return nvml


# ---------------------------------------------------------------- fake sysfs


class FakeSysfs:
    """Builds a sysfs tree: PCI devices under host bridges, RDMA devices, network interfaces."""

    def __init__(self, root: Path):
        self.root = root

    def pci(self, path: list[str], numa_node: int) -> Path:
        """path = [host bridge, root port, ..., the device's bus id]; every level gets numa_node."""
        directory = self.root / "devices"
        for part in path:
            directory = directory / part
            directory.mkdir(parents=True, exist_ok=True)
            (directory / "numa_node").write_text(f"{numa_node}\n")
        self._link(self.root / "bus" / "pci" / "devices" / path[-1], directory)
        return directory

    def rdma(
        self,
        name: str,
        device: Path,
        link_layer: str,
        state="4: ACTIVE",
        phys_state="5: LinkUp",
        rate="400 Gb/sec (4X NDR)",
        gid_types=(),
        netdev: str | None = None,
    ) -> None:
        rdma = self.root / "class" / "infiniband" / name
        port = rdma / "ports" / "1"
        (port / "gid_attrs" / "types").mkdir(parents=True)
        self._link(rdma / "device", device)
        (rdma / "node_guid").write_text("a088:c203:00ab:1200\n")
        for attribute, value in [
            ("state", state),
            ("phys_state", phys_state),
            ("rate", rate),
            ("link_layer", link_layer),
        ]:
            (port / attribute).write_text(value + "\n")
        for index, gid_type in enumerate(gid_types):
            (port / "gid_attrs" / "types" / str(index)).write_text(gid_type + "\n")
        if netdev:
            self.netdev(netdev, device=device, kind="32" if link_layer == "InfiniBand" else "1")

    def netdev(
        self,
        name: str,
        device: Path | None = None,
        kind="1",
        speed="400000",
        mtu="9000",
        operstate="up",
        ifindex="5",
        iflink="5",
        extra_dirs=(),
    ) -> Path:
        """An interface; with `device`, under that PCI function, else under devices/virtual/net."""
        parent = device / "net" if device else self.root / "devices" / "virtual" / "net"
        interface = parent / name
        interface.mkdir(parents=True)
        attributes = {
            "type": kind,
            "speed": speed,
            "mtu": mtu,
            "operstate": operstate,
            "address": "94:6d:ae:f4:5a:20",
            "ifindex": ifindex,
            "iflink": iflink,
        }
        for attribute, value in attributes.items():
            (interface / attribute).write_text(value + "\n")
        for directory in extra_dirs:
            (interface / directory).mkdir()
        if device:
            self._link(interface / "device", device)
        self._link(self.root / "class" / "net" / name, interface)
        return interface

    @staticmethod
    def _link(link: Path, target: Path) -> None:
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(target)


# ---------------------------------------------------------------- the DGX-class node

# One host bridge per PCIe switch; each switch holds GPU i and NIC mlx5_i.
DGX_HOST_BRIDGES = [0x15, 0x37, 0x48, 0x59, 0x97, 0xB7, 0xC7, 0xD7]
DGX_CPUS = {0: list(range(0, 56)) + list(range(112, 168)), 1: list(range(56, 112)) + list(range(168, 224))}


def dgx_gpu_bus(i: int) -> str:
    return f"0000:{DGX_HOST_BRIDGES[i] + 3:02x}:00.0"


def dgx_nvml(state_by_field_values=False):
    # 18 NVLink 4 links per GPU, spread 5/4/4/5 over the four NVSwitches
    switch_of_link = [0] * 5 + [1] * 4 + [2] * 4 + [3] * 5
    switch_links = [(f"00000000:{0xE0 + switch:02x}:00.0", NVLINK_TO_SWITCH) for switch in switch_of_link]
    gpus = [
        FakeGpu(
            "NVIDIA H100 80GB HBM3", "0000" + dgx_gpu_bus(i).upper(), i // 4, DGX_CPUS[i // 4], nvlinks=switch_links
        )
        for i in range(8)
    ]
    levels = {(a, b): NODE if a // 4 == b // 4 else SYSTEM for a in range(8) for b in range(a + 1, 8)}
    return fake_nvml(gpus, levels, state_by_field_values)


def dgx_sysfs(root: Path) -> FakeSysfs:
    sysfs = FakeSysfs(root)
    for i, bridge in enumerate(DGX_HOST_BRIDGES):
        numa = i // 4
        switch = [f"pci0000:{bridge:02x}", f"0000:{bridge:02x}:01.0", f"0000:{bridge + 1:02x}:00.0"]
        sysfs.pci(switch + [f"0000:{bridge + 2:02x}:00.0", dgx_gpu_bus(i)], numa)
        nic = sysfs.pci(switch + [f"0000:{bridge + 2:02x}:01.0", f"0000:{bridge + 4:02x}:00.0"], numa)
        down = i == 7  # one compute port with its cable pulled
        sysfs.rdma(
            f"mlx5_{i}",
            nic,
            "InfiniBand",
            netdev=f"ibp{bridge + 4}s0",
            state="1: DOWN" if down else "4: ACTIVE",
            phys_state="2: Polling" if down else "5: LinkUp",
        )
    for function in (0, 1):  # a dual-port storage NIC running RoCE v2
        port = sysfs.pci(["pci0000:a7", "0000:a7:01.0", f"0000:a8:00.{function}"], 1)
        sysfs.rdma(
            f"mlx5_{8 + function}",
            port,
            "Ethernet",
            rate="400 Gb/sec (4X)",
            gid_types=["IB/RoCE v1", "RoCE v2"],
            netdev=f"ens8f{function}np{function}",
        )
    management = sysfs.pci(["pci0000:00", "0000:00:1c.0", "0000:06:00.0"], 0)
    sysfs.netdev("eno3", device=management, speed="1000", mtu="1500")
    # host plumbing that is not a NIC of the node
    sysfs.netdev("lo", kind="772", ifindex="1", iflink="1")
    sysfs.netdev("docker0", extra_dirs=["bridge"], ifindex="3", iflink="3")
    sysfs.netdev("veth1a2b", extra_dirs=["brport"], ifindex="9", iflink="8")
    sysfs.netdev("ifb0", ifindex="4", iflink="4")
    return sysfs


@pytest.fixture
def dgx(tmp_path, monkeypatch):
    nvml = dgx_nvml()
    monkeypatch.setitem(sys.modules, "pynvml", nvml)
    dgx_sysfs(tmp_path)
    return discover_node("dgx-a01", sysfs_root=tmp_path), nvml


def test_dgx_matrix_matches_nvidia_smi(dgx):
    node, _ = dgx
    smi = read_smi_topo(FIXTURES / "dgx_h100_nvidia_smi_topo.txt")
    assert node.devices == smi.devices
    assert node.links == smi.links
    assert node.nic_legend == {f"NIC{i}": f"mlx5_{i}" for i in range(10)}
    assert node.link("GPU3", "GPU6") == "NV18"
    assert node.link("GPU2", "NIC2") == "PIX"
    assert node.link("GPU2", "NIC3") == "NODE"
    assert node.link("GPU2", "NIC6") == "SYS"
    assert node.link("NIC8", "NIC9") == "PIX"


def test_dgx_gpus(dgx):
    node, _ = dgx
    gpu = node.gpus[5]
    assert (gpu.name, gpu.pci_bus_id, gpu.numa_node) == ("NVIDIA H100 80GB HBM3", "0000:ba:00.0", 1)
    assert gpu.memory_bytes == 80 * 2**30 and gpu.compute_capability == "9.0"
    assert gpu.cpu_affinity == "56-111,168-223"
    assert (gpu.pcie.gen_current, gpu.pcie.gen_max, gpu.pcie.width_current, gpu.pcie.width_max) == (5, 5, 16, 16)
    assert len(gpu.nvlinks) == 18
    assert {(link.active, link.version, link.remote_type) for link in gpu.nvlinks} == {(True, "4.0", "NVSwitch")}
    assert node.driver_version == "550.54.15"
    assert node.notes == []


def test_p2p_status_is_asked_with_index_0_not_the_wrappers_tuple(dgx):
    node, nvml = dgx
    assert {index for call, index in nvml.calls} == {0}
    assert node.p2p_read[0] == ["X"] + ["OK"] * 7


def test_nvlink_state_from_field_values_when_get_state_is_unsupported(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", dgx_nvml(state_by_field_values=True))
    dgx_sysfs(tmp_path)
    node = discover_node("dgx-a01", sysfs_root=tmp_path)
    assert node.link("GPU0", "GPU7") == "NV18"


def test_dgx_nics(dgx):
    node, _ = dgx
    names = [nic.name for nic in node.nics]
    assert names == [f"mlx5_{i}" for i in range(10)] + ["eno3"]  # IPoIB/RoCE netdevs folded in, plumbing left out
    infiniband = node.nics[0]
    assert (infiniband.kind, infiniband.port, infiniband.up, infiniband.rate_gbps, infiniband.rate_detail) == (
        "InfiniBand",
        1,
        True,
        400.0,
        "4X NDR",
    )
    assert (infiniband.pci_bus_id, infiniband.numa_node, infiniband.netdev) == ("0000:19:00.0", 0, "ibp25s0")
    assert infiniband.state == "ACTIVE / LinkUp"
    assert node.nics[7].up is False and node.nics[7].state == "DOWN / Polling"
    roce = node.nics[9]
    assert (roce.kind, roce.roce_version, roce.netdev, roce.mtu, roce.numa_node) == (
        "RoCE",
        "RoCE v2",
        "ens8f1np1",
        9000,
        1,
    )
    ethernet = node.nics[10]
    assert (ethernet.kind, ethernet.rate_gbps, ethernet.mtu, ethernet.up) == ("Ethernet", 1.0, 1500, True)


# ---------------------------------------------------------------- a PCIe-only 4-GPU box

# GPU0 and GPU1 share an inner switch, which hangs with GPU2 below an outer switch; GPU3 sits on
# the other socket. mlx5_0 has a host bridge of its own on socket 0; mlx5_1 shares GPU0's host
# bridge through another root port. (Four GPUs in a tree show at most three levels among them.)
BOX_GPU_PATHS = {
    0: (
        ["pci0000:00", "0000:00:01.0", "0000:01:00.0", "0000:02:00.0", "0000:03:00.0", "0000:04:00.0", "0000:05:00.0"],
        0,
    ),
    1: (
        ["pci0000:00", "0000:00:01.0", "0000:01:00.0", "0000:02:00.0", "0000:03:00.0", "0000:04:01.0", "0000:06:00.0"],
        0,
    ),
    2: (["pci0000:00", "0000:00:01.0", "0000:01:00.0", "0000:02:01.0", "0000:07:00.0"], 0),
    3: (["pci0000:80", "0000:80:01.0", "0000:81:00.0"], 1),
}


@pytest.fixture
def pcie_box(tmp_path, monkeypatch):
    gpus = [
        FakeGpu(
            "NVIDIA L40S",
            "0000" + path[-1].upper(),
            None,
            list(range(0, 32)) if numa == 0 else list(range(32, 64)),
            memory_bytes=48 * 2**30,
            pcie=(1, 4, 16, 16),
        )
        for path, numa in BOX_GPU_PATHS.values()
    ]
    levels = {(0, 1): SINGLE, (0, 2): MULTIPLE, (1, 2): MULTIPLE, (0, 3): SYSTEM, (1, 3): SYSTEM, (2, 3): SYSTEM}
    monkeypatch.setitem(sys.modules, "pynvml", fake_nvml(gpus, levels))
    sysfs = FakeSysfs(tmp_path)
    for path, numa in BOX_GPU_PATHS.values():
        sysfs.pci(path, numa)
    sysfs.rdma(
        "mlx5_0",
        sysfs.pci(["pci0000:40", "0000:40:01.0", "0000:41:00.0"], 0),
        "Ethernet",
        rate="100 Gb/sec (4X EDR)",
        gid_types=["IB/RoCE v1"],
        netdev="enp65s0np0",
    )
    sysfs.rdma(
        "mlx5_1", sysfs.pci(["pci0000:00", "0000:00:02.0", "0000:08:00.0"], 0), "InfiniBand", rate="200 Gb/sec (4X HDR)"
    )
    return discover_node("box", sysfs_root=tmp_path)


def test_pcie_box_matrix(pcie_box):
    expected = [
        ["X", "PIX", "PXB", "SYS", "NODE", "PHB"],
        ["PIX", "X", "PXB", "SYS", "NODE", "PHB"],
        ["PXB", "PXB", "X", "SYS", "NODE", "PHB"],
        ["SYS", "SYS", "SYS", "X", "SYS", "SYS"],
        ["NODE", "NODE", "NODE", "SYS", "X", "NODE"],
        ["PHB", "PHB", "PHB", "SYS", "NODE", "X"],
    ]
    assert pcie_box.devices == ["GPU0", "GPU1", "GPU2", "GPU3", "NIC0", "NIC1"]
    assert pcie_box.links == expected


def test_pcie_box_gpus(pcie_box):
    gpu0, gpu3 = pcie_box.gpus[0], pcie_box.gpus[3]
    assert [gpu.nvlinks for gpu in pcie_box.gpus] == [[]] * 4
    # the driver did not say: NUMA nodes come from sysfs
    assert (gpu0.numa_node, gpu3.numa_node) == (0, 1)
    assert (gpu0.cpu_affinity, gpu3.cpu_affinity) == ("0-31", "32-63")
    assert (gpu0.pcie.gen_current, gpu0.pcie.gen_max) == (1, 4)  # idle GPUs drop to Gen1
    assert pcie_box.nics[0].roce_version == "RoCE v1"


def test_sysfs_levels_agree_with_nvml_levels(pcie_box, tmp_path):
    buses = [path[-1] for path, _ in BOX_GPU_PATHS.values()]
    from_sysfs = [[pcie_word(tmp_path, a, b) if a != b else "X" for b in buses] for a in buses]
    assert from_sysfs == [row[:4] for row in pcie_box.links[:4]]


# ---------------------------------------------------------------- no GPU, names


def test_no_driver_gives_no_gpus_and_a_note(tmp_path, monkeypatch):
    nvml = fake_nvml([], {})

    def library_not_found():
        raise real_nvml.NVMLError_LibraryNotFound()

    nvml.nvmlInit = library_not_found
    monkeypatch.setitem(sys.modules, "pynvml", nvml)
    node = discover_node("cpu-node", sysfs_root=tmp_path)
    assert node.gpus == [] and node.devices == [] and node.nics == []
    assert "NVML Shared Library Not Found" in node.notes[0]


def test_missing_nvidia_ml_py_gives_a_note(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)  # makes `import pynvml` raise ImportError
    node = discover_node("cpu-node", sysfs_root=tmp_path)
    assert node.gpus == [] and "nvidia-ml-py is not installed" in node.notes[0]


def test_node_name_precedence(monkeypatch):
    monkeypatch.delenv("COMMBENCH_NODE_NAME", raising=False)
    monkeypatch.delenv("SLURMD_NODENAME", raising=False)
    assert node_name() == os.uname().nodename
    monkeypatch.setenv("SLURMD_NODENAME", "gpu-017")
    assert node_name() == "gpu-017"
    monkeypatch.setenv("COMMBENCH_NODE_NAME", "n1")
    assert node_name() == "n1"
    assert node_name("given") == "given"
