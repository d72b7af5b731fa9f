"""GPUs through NVML (nvidia-ml-py, `import pynvml`).

pynvml is imported only when discovery runs: it is optional, and a machine without the NVIDIA
driver is a normal case (the result is no GPUs and a note, never an error). NVML ignores
CUDA_VISIBLE_DEVICES but not cgroups, so run discovery where all of the node's GPUs are visible.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from commbench.topology.model import Gpu, NvLink, NvlinkFabric, PcieLink, compact_ranges, pci_bus_id

# The wrapper spells NVML_P2P_CAPS_INDEX_READ as the tuple (0,) (a stray comma); NVML wants 0.
P2P_CAPS_INDEX_READ = 0

# nvmlGpuP2PStatus_t -> the words of `nvidia-smi topo -p2p r`; 4 (disabled by a registry key)
# has no word of its own there and reads as "not supported".
P2P_WORDS = {0: "OK", 1: "CNS", 2: "GNS", 3: "TNS", 4: "NS", 5: "NS", 6: "U"}

# nvmlGpuTopologyLevel_t -> nvidia-smi word. INTERNAL (two GPUs on one board) shows as PIX.
TOPOLOGY_LEVEL_WORDS = {0: "PIX", 10: "PIX", 20: "PXB", 30: "PHB", 40: "NODE", 50: "SYS"}

REMOTE_TYPE_WORDS = {0: "GPU", 1: "IBM NPU", 2: "NVSwitch"}

# nvmlGpuFabricState_t (NVML_GPU_FABRIC_STATE_*) -> words
FABRIC_STATE_WORDS = {0: "not supported", 1: "not started", 2: "in progress", 3: "completed"}


@dataclass
class NvmlView:
    """What NVML says about this node's GPUs."""

    gpus: list[Gpu] = field(default_factory=list)
    # PCIe word for ordered pairs of GPU bus ids, from TopologyCommonAncestor where NVML answers
    pcie_words: dict[tuple[str, str], str] = field(default_factory=dict)
    p2p_read: list[list[str]] = field(default_factory=list)
    driver_version: str | None = None
    notes: list[str] = field(default_factory=list)


def read_gpus() -> NvmlView:
    try:
        import pynvml
    except ImportError:
        return NvmlView(notes=["nvidia-ml-py is not installed, so GPUs were not looked at (pip install nvidia-ml-py)"])
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:
        return NvmlView(notes=[f"no NVIDIA GPU here: NVML did not start ({exc})"])
    try:
        return _read_gpus(pynvml)
    except pynvml.NVMLError as exc:
        # A GPU that falls off the bus mid-read: report what is known, not a traceback.
        return NvmlView(notes=[f"NVML failed while reading the GPUs ({exc})"])
    finally:
        pynvml.nvmlShutdown()


def _read_gpus(nvml) -> NvmlView:
    handles = [nvml.nvmlDeviceGetHandleByIndex(index) for index in range(nvml.nvmlDeviceGetCount())]
    view = NvmlView(
        gpus=[_read_gpu(nvml, index, handle) for index, handle in enumerate(handles)],
        driver_version=_optional(nvml, nvml.nvmlSystemGetDriverVersion),
    )
    if not handles:
        view.notes.append("the NVIDIA driver is loaded but shows no GPU")
    bus_ids = [gpu.pci_bus_id for gpu in view.gpus]
    for i, handle in enumerate(handles):
        for j, peer in enumerate(handles):
            level = _optional(nvml, nvml.nvmlDeviceGetTopologyCommonAncestor, handle, peer) if i != j else None
            if level in TOPOLOGY_LEVEL_WORDS:  # otherwise sysfs places the pair
                view.pcie_words[bus_ids[i], bus_ids[j]] = TOPOLOGY_LEVEL_WORDS[level]
    view.p2p_read = [
        ["X" if i == j else _p2p_word(nvml, handle, peer) for j, peer in enumerate(handles)]
        for i, handle in enumerate(handles)
    ]
    return view


def _read_gpu(nvml, index: int, handle) -> Gpu:
    memory = _optional(nvml, nvml.nvmlDeviceGetMemoryInfo, handle)
    capability = _optional(nvml, nvml.nvmlDeviceGetCudaComputeCapability, handle)
    numa_node = _optional(nvml, nvml.nvmlDeviceGetNumaNodeId, handle)
    return Gpu(
        index=index,
        name=_text(nvml.nvmlDeviceGetName(handle)),
        pci_bus_id=pci_bus_id(_text(nvml.nvmlDeviceGetPciInfo(handle).busId)),
        memory_bytes=memory.total if memory else None,
        compute_capability=f"{capability[0]}.{capability[1]}" if capability else None,
        numa_node=numa_node if numa_node is not None and numa_node >= 0 else None,
        cpu_affinity=_cpu_affinity(nvml, handle),
        pcie=PcieLink(
            gen_current=_optional(nvml, nvml.nvmlDeviceGetCurrPcieLinkGeneration, handle),
            gen_max=_optional(nvml, nvml.nvmlDeviceGetMaxPcieLinkGeneration, handle),
            width_current=_optional(nvml, nvml.nvmlDeviceGetCurrPcieLinkWidth, handle),
            width_max=_optional(nvml, nvml.nvmlDeviceGetMaxPcieLinkWidth, handle),
        ),
        nvlinks=_nvlinks(nvml, handle),
        fabric=read_fabric(nvml, handle),
    )


def read_fabric(nvml, handle) -> NvlinkFabric | None:
    """The GPU's NVLink fabric registration: nvmlDeviceGetGpuFabricInfoV (versioned struct, newer
    drivers), else nvmlDeviceGetGpuFabricInfo; None where the driver or GPU has none, or the state
    says the GPU is not on a multi-node fabric."""
    info = None
    if hasattr(nvml, "nvmlDeviceGetGpuFabricInfoV") and hasattr(nvml, "c_nvmlGpuFabricInfoV_t"):
        info = nvml.c_nvmlGpuFabricInfoV_t()
        info.version = getattr(nvml, "nvmlGpuFabricInfo_v2", 0)
        if _optional(nvml, nvml.nvmlDeviceGetGpuFabricInfoV, handle, info) is None:
            info = None
    if info is None and hasattr(nvml, "nvmlDeviceGetGpuFabricInfo") and hasattr(nvml, "c_nvmlGpuFabricInfo_t"):
        info = nvml.c_nvmlGpuFabricInfo_t()
        if _optional(nvml, nvml.nvmlDeviceGetGpuFabricInfo, handle, info) is None:
            info = None
    if info is None or info.state == 0:  # NVML_GPU_FABRIC_STATE_NOT_SUPPORTED
        return None
    state = FABRIC_STATE_WORDS.get(info.state, f"state {info.state}")
    return NvlinkFabric(
        cluster_uuid=_uuid(bytes(info.clusterUuid)),
        clique_id=int(info.cliqueId),
        state=state,
        status=int(info.status) if state == "completed" else None,
    )


def _uuid(raw: bytes) -> str:
    text = raw.hex()
    return f"{text[:8]}-{text[8:12]}-{text[12:16]}-{text[16:20]}-{text[20:32]}"


def _cpu_affinity(nvml, handle) -> str | None:
    """The CPUs close to the GPU, from NVML's bitmask of 64-bit words.

    Room for at least 1024 CPUs: os.cpu_count() may count fewer than the machine has
    (CPU hotplug, some containers), and NVML leaves words past the last CPU zero.
    """
    words = -(-max(os.cpu_count() or 1, 1024) // 64)
    masks = _optional(nvml, nvml.nvmlDeviceGetCpuAffinity, handle, words)
    if masks is None:
        return None
    cpus = [word * 64 + bit for word, mask in enumerate(masks) for bit in range(64) if mask >> bit & 1]
    return compact_ranges(cpus) or None


def _nvlinks(nvml, handle) -> list[NvLink]:
    """Every link NVML knows; links a GPU does not have raise, and are skipped."""
    versions = _nvlink_version_names(nvml)
    links = []
    for link in range(nvml.NVML_NVLINK_MAX_LINKS):
        state = _nvlink_state(nvml, handle, link)
        if state is None:
            continue
        remote = _optional(nvml, nvml.nvmlDeviceGetNvLinkRemotePciInfo, handle, link)
        remote_type = _optional(nvml, nvml.nvmlDeviceGetNvLinkRemoteDeviceType, handle, link)
        links.append(
            NvLink(
                link=link,
                active=state == nvml.NVML_FEATURE_ENABLED,
                version=versions.get(_optional(nvml, nvml.nvmlDeviceGetNvLinkVersion, handle, link)),
                remote_pci_bus_id=pci_bus_id(_text(remote.busId)) if remote else None,
                remote_type=REMOTE_TYPE_WORDS.get(remote_type, "unknown"),
            )
        )
    return links


def _nvlink_state(nvml, handle, link: int) -> int | None:
    state = _optional(nvml, nvml.nvmlDeviceGetNvLinkState, handle, link)
    if state is not None:
        return state
    # Hopper and later may answer only through field values (NCCL reads them there this way)
    values = _optional(nvml, nvml.nvmlDeviceGetFieldValues, handle, [(nvml.NVML_FI_DEV_NVLINK_GET_STATE, link)])
    if values and values[0].nvmlReturn == nvml.NVML_SUCCESS:
        return values[0].value.uiVal
    return None


def _nvlink_version_names(nvml) -> dict[int, str]:
    """nvmlNvlinkVersion_t is an enum (A100 reports 5 = NVLink 3.1): map it to "3.1" etc."""
    prefix = "NVML_NVLINK_VERSION_"
    return {
        getattr(nvml, name): name[len(prefix) :].replace("_", ".")
        for name in dir(nvml)
        if name.startswith(prefix) and name[len(prefix)].isdigit()
    }


def _p2p_word(nvml, handle, peer) -> str:
    status = _optional(nvml, nvml.nvmlDeviceGetP2PStatus, handle, peer, P2P_CAPS_INDEX_READ)
    return P2P_WORDS.get(status, "U")


def _optional(nvml, query, *args):
    """A query some GPUs or drivers do not support: None instead of NVMLError."""
    try:
        return query(*args)
    except nvml.NVMLError:
        return None


def _text(value: str | bytes) -> str:
    # older nvidia-ml-py releases return bytes for strings
    return value.decode() if isinstance(value, bytes) else value
