"""Import the text of `nvidia-smi topo -m`.

A header row names the columns (GPU0.., NIC0.., then CPU Affinity, NUMA Affinity, GPU NUMA ID);
one row per GPU and NIC follows, cells separated by tabs; then the legend and, in newer
versions, a "NIC Legend" that names each NICn (NIC0: mlx5_0). Older versions put the NIC's name
(mlx5_0) in the header itself. Terminal output may carry ANSI underline codes; copies pasted
from a terminal may have spaces instead of tabs. Both are accepted.
"""

from __future__ import annotations

import re
from pathlib import Path

from commbench.topology.model import Gpu, Nic, NodeTopology

ANSI_ESCAPE = re.compile(r"\x1b\[[0-9;]*m")
NIC_LEGEND_LINE = re.compile(r"^\s*(NIC\d+)\s*:\s*(\S+)")
GPU_LABEL = re.compile(r"^GPU(\d+)$")


def read_smi_topo(path: str | Path, hostname: str | None = None) -> NodeTopology:
    """Raises OSError when the file cannot be read and ValueError when it holds no topology matrix."""
    path = Path(path)
    lines = ANSI_ESCAPE.sub("", path.read_text()).splitlines()
    header_at = next((i for i, line in enumerate(lines) if "GPU0" in _cells(line) or "NIC0" in _cells(line)), None)
    if header_at is None:
        raise ValueError(f"{path} is not `nvidia-smi topo -m` output: no header row naming GPU0 or NIC0")
    columns = _cells(lines[header_at])
    rows = {}
    for line in lines[header_at + 1 :]:
        cells = _cells(line)
        if not cells or cells[0] not in columns:
            break  # the blank line before the legend
        rows[cells[0]] = dict(zip(columns, cells[1:]))
    devices = [column for column in columns if column in rows]
    legend = dict(NIC_LEGEND_LINE.match(line).groups() for line in lines if NIC_LEGEND_LINE.match(line))
    return _node(path, hostname, devices, rows, legend)


def _node(path: Path, hostname: str | None, devices: list[str], rows: dict, legend: dict) -> NodeTopology:
    gpu_labels = [label for label in devices if GPU_LABEL.match(label)]
    nic_labels = [label for label in devices if label not in gpu_labels]
    # NIC columns become NIC0.. in order, named by the legend, or by themselves in older output
    nic_names = [legend.get(label, label) for label in nic_labels]
    labels = {label: f"NIC{position}" for position, label in enumerate(nic_labels)}
    return NodeTopology(
        hostname=hostname or path.stem,
        source=f"nvidia-smi:{path.name}",
        gpus=[_gpu(label, rows[label]) for label in gpu_labels],
        nics=[Nic(name=name) for name in nic_names],
        devices=[labels.get(label, label) for label in devices],
        links=[[rows[row].get(column, "?") for column in devices] for row in devices],
        nic_legend={f"NIC{position}": name for position, name in enumerate(nic_names)},
        notes=["imported from `nvidia-smi topo -m`: links and CPU affinity only"],
    )


def _gpu(label: str, row: dict[str, str]) -> Gpu:
    numa = row.get("NUMA Affinity", "")
    return Gpu(
        index=int(GPU_LABEL.match(label).group(1)),
        cpu_affinity=row.get("CPU Affinity") or None,
        numa_node=int(numa) if numa.isdigit() else None,
    )


def _cells(line: str) -> list[str]:
    """Tab-separated cells (the first, empty one of the header dropped); else runs of 2+ spaces."""
    if "\t" in line:
        cells = [cell.strip() for cell in line.split("\t")]
        return cells[1:] if cells and not cells[0] else cells
    return re.split(r"\s{2,}", line.strip()) if line.strip() else []
