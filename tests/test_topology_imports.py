"""Imports of NCCL's topology dump and of `nvidia-smi topo -m` text (DGX-class fixtures)."""

from __future__ import annotations

from pathlib import Path

import pytest

from commbench.topology import read_nccl_xml, read_smi_topo

FIXTURES = Path(__file__).parent / "fixtures" / "topology"
NCCL_XML = FIXTURES / "dgx_h100_nccl_topo.xml"
SMI_TOPO = FIXTURES / "dgx_h100_nvidia_smi_topo.txt"


def expected_dgx_word(a: str, b: str) -> str:
    """The DGX-class fixture: NVSwitch between all GPUs; GPU i and NIC i share a PCIe switch;
    GPUs 0-3 and NICs 0-3 on NUMA node 0; the rest, and the dual-port NIC8/NIC9, on node 1."""
    if a == b:
        return "X"
    kind_a, kind_b, index_a, index_b = a[:3], b[:3], int(a[3:]), int(b[3:])
    if kind_a == kind_b == "GPU":
        return "NV18"
    if (kind_a != kind_b and index_a == index_b) or ({index_a, index_b} == {8, 9} and kind_a == kind_b == "NIC"):
        return "PIX"
    return "NODE" if (index_a < 4) == (index_b < 4) else "SYS"


@pytest.fixture(params=[read_nccl_xml, read_smi_topo], ids=["nccl-xml", "nvidia-smi"])
def dgx(request):
    return request.param(NCCL_XML if request.param is read_nccl_xml else SMI_TOPO, "dgx-a01")


def test_dgx_matrix(dgx):
    devices = [f"GPU{i}" for i in range(8)] + [f"NIC{i}" for i in range(10)]
    assert dgx.devices == devices
    assert dgx.links == [[expected_dgx_word(a, b) for b in devices] for a in devices]
    assert dgx.nic_legend == {f"NIC{i}": f"mlx5_{i}" for i in range(10)}
    assert dgx.hostname == "dgx-a01"


def test_dgx_cpu_affinity(dgx):
    assert [gpu.numa_node for gpu in dgx.gpus] == [0] * 4 + [1] * 4
    assert dgx.gpus[0].cpu_affinity == "0-55,112-167"
    assert dgx.gpus[7].cpu_affinity == "56-111,168-223"


def test_nccl_xml_details():
    node = read_nccl_xml(NCCL_XML)
    assert node.hostname == "dgx_h100_nccl_topo" and node.source == "nccl-xml:dgx_h100_nccl_topo.xml"
    gpu = node.gpus[3]
    assert (gpu.index, gpu.pci_bus_id, gpu.compute_capability) == (3, "0000:5c:00.0", "9.0")
    assert (gpu.pcie.gen_max, gpu.pcie.width_max) == (5, 16)
    assert len(gpu.nvlinks) == 18 and {link.remote_type for link in gpu.nvlinks} == {"NVSwitch"}
    nic = node.nics[4]
    assert (nic.name, nic.port, nic.rate_gbps, nic.pci_bus_id, nic.numa_node) == ("mlx5_4", 1, 400.0, "0000:9b:00.0", 1)


def test_nccl_xml_direct_nvlinks_and_nested_switches(tmp_path):
    """Two GPUs bonded by 4 direct NVLinks under a two-level switch tree, a third on PCIe only."""
    dump = tmp_path / "topo.xml"
    dump.write_text("""<system version="1">
  <cpu numaid="0" affinity="0000ffff" arch="x86_64" vendor="AuthenticAMD">
    <pci busid="0000:40:00.0" class="0x060400" link_speed="16.0 GT/s PCIe" link_width="16">
      <pci busid="0000:41:00.0" class="0x060400" link_speed="16.0 GT/s PCIe" link_width="16">
        <pci busid="0000:42:00.0" class="0x030200" link_speed="16.0 GT/s PCIe" link_width="16">
          <gpu dev="0" sm="80" rank="0" gdr="1"><nvlink target="0000:43:00.0" count="4" tclass="0x030200"/></gpu>
        </pci>
        <pci busid="0000:43:00.0" class="0x030200" link_speed="16.0 GT/s PCIe" link_width="16">
          <gpu dev="1" sm="80" rank="1" gdr="1"><nvlink target="0000:42:00.0" count="4" tclass="0x030200"/></gpu>
        </pci>
      </pci>
      <pci busid="0000:44:00.0" class="0x030200" link_speed="16.0 GT/s PCIe" link_width="16">
        <gpu dev="2" sm="80" rank="2" gdr="1"/>
      </pci>
    </pci>
  </cpu>
</system>
""")
    node = read_nccl_xml(dump)
    assert node.links == [["X", "NV4", "PXB"], ["NV4", "X", "PXB"], ["PXB", "PXB", "X"]]
    assert node.gpus[0].cpu_affinity == "0-15" and node.gpus[0].pcie.gen_max == 4


def test_smi_text_with_terminal_underline_and_spaces(tmp_path):
    """Output captured from a terminal: ANSI underline on the header, spaces instead of tabs,
    and the older style that names NICs in the header."""
    text = (
        "\x1b[4m        GPU0    GPU1    mlx5_0  CPU Affinity    NUMA Affinity\x1b[0m\n"
        "GPU0     X      NV12    PXB     0-31    0\n"
        "GPU1    NV12     X      PXB     0-31    0\n"
        "mlx5_0  PXB     PXB      X\n"
        "\nLegend:\n\n  X    = Self\n"
    )
    capture = tmp_path / "topo.txt"
    capture.write_text(text)
    node = read_smi_topo(capture)
    assert node.devices == ["GPU0", "GPU1", "NIC0"]
    assert node.nic_legend == {"NIC0": "mlx5_0"}
    assert node.links[2] == ["PXB", "PXB", "X"]
    assert node.gpus[1].cpu_affinity == "0-31"


@pytest.mark.parametrize("reader", [read_nccl_xml, read_smi_topo])
def test_unparsable_files_raise_value_error(tmp_path, reader):
    junk = tmp_path / "junk.txt"
    junk.write_text("<html>not a topology</html>\n")
    with pytest.raises(ValueError, match=r"junk\.txt"):
        reader(junk)


def test_round_trip_through_json(dgx):
    import json

    from commbench.topology import NodeTopology

    again = NodeTopology.from_dict(json.loads(json.dumps(dgx.to_dict())))
    assert again == dgx
