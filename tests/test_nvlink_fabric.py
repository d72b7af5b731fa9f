"""NVML's NVLink fabric (nvmlDeviceGetGpuFabricInfoV / nvmlDeviceGetGpuFabricInfo) through the suite's
fake pynvml: a GB200 NVL72 compute tray reports its rack's cluster UUID and clique per GPU, `topo`
records and shows them, and a host's NVLink domain comes from them."""

from __future__ import annotations

import json
import sys
import uuid

import pynvml as real_nvml
import pytest

from commbench import cli
from commbench.topology import discover_node, nvlink_domain
from commbench.topology.model import NvlinkFabric
from tests.test_topology_discovery import dgx_nvml, dgx_sysfs

RACK = uuid.UUID("6a1f0c2e-94b7-4c1d-8e2a-5b3c7d9e0f11")


def with_fabric(
    nvml, cluster: uuid.UUID | None, clique: int, state=real_nvml.NVML_GPU_FABRIC_STATE_COMPLETED, versioned=True
):
    """The fake NVML of the DGX-class node, its GPUs registered in a multi-node NVLink fabric."""
    nvml.c_nvmlGpuFabricInfoV_t = real_nvml.c_nvmlGpuFabricInfoV_t
    nvml.c_nvmlGpuFabricInfo_t = real_nvml.c_nvmlGpuFabricInfo_t
    nvml.nvmlGpuFabricInfo_v2 = real_nvml.nvmlGpuFabricInfo_v2

    def fill(handle, info):
        if cluster is None:
            raise real_nvml.NVMLError_NotSupported()
        info.clusterUuid[:] = list(cluster.bytes)
        info.cliqueId, info.state, info.status = clique, state, real_nvml.NVML_SUCCESS
        return real_nvml.NVML_SUCCESS

    def not_supported(*_):
        raise real_nvml.NVMLError_NotSupported()

    nvml.nvmlDeviceGetGpuFabricInfoV = fill if versioned else not_supported
    nvml.nvmlDeviceGetGpuFabricInfo = fill
    return nvml


@pytest.mark.parametrize("versioned", [True, False])
def test_fabric_registration_is_read_per_gpu(tmp_path, monkeypatch, versioned):
    monkeypatch.setitem(sys.modules, "pynvml", with_fabric(dgx_nvml(), RACK, 7, versioned=versioned))
    dgx_sysfs(tmp_path)
    node = discover_node("gb200-tray-03", sysfs_root=tmp_path)
    assert {gpu.fabric.cluster_uuid for gpu in node.gpus} == {str(RACK)}
    assert {(gpu.fabric.clique_id, gpu.fabric.state) for gpu in node.gpus} == {(7, "completed")}
    assert node.nvlink_domain == f"{RACK}/7"
    monkeypatch.delenv("COMMBENCH_NVLINK_DOMAIN", raising=False)
    assert nvlink_domain(node) == f"{RACK}/7"
    monkeypatch.setenv("COMMBENCH_NVLINK_DOMAIN", "rack-a")  # the operator's label wins
    assert nvlink_domain(node) == "rack-a"


def test_no_fabric_or_an_unfinished_registration_is_no_domain(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", with_fabric(dgx_nvml(), None, 0))
    dgx_sysfs(tmp_path)
    node = discover_node("dgx-a01", sysfs_root=tmp_path)
    assert all(gpu.fabric is None for gpu in node.gpus) and node.nvlink_domain is None
    pending = NvlinkFabric(cluster_uuid=str(RACK), clique_id=1, state="in progress")
    zero = NvlinkFabric(cluster_uuid=str(uuid.UUID(int=0)), clique_id=0, state="completed", status=0)
    assert pending.domain is None and zero.domain is None


def test_topo_records_and_shows_the_fabric(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "pynvml", with_fabric(dgx_nvml(), RACK, 7))
    dgx_sysfs(tmp_path)
    node = discover_node("gb200-tray-03", sysfs_root=tmp_path)
    monkeypatch.setattr("commbench.topology.discover_node", lambda *a, **k: node)
    assert cli.main(["topo", "--json"]) == 0
    gpus = json.loads(capsys.readouterr().out)["nodes"][0]["gpus"]
    assert gpus[0]["fabric"] == {"cluster_uuid": str(RACK), "clique_id": 7, "state": "completed", "status": 0}
    monkeypatch.setenv("COLUMNS", "400")  # the GPU table is wide; rich cuts cells to the terminal
    assert cli.main(["topo"]) == 0
    assert f"{RACK} / 7, completed" in capsys.readouterr().out
