"""Human view of a topology: a node summary, then per node its GPUs, link matrix and NICs."""

from __future__ import annotations

from collections import Counter

from rich.console import Console
from rich.table import Table

from commbench.topology.model import LINK_LEGEND, ClusterTopology, Gpu, Nic, NodeTopology, compact_ranges

# Closer links in calmer colours: the eye should land on the slow pairs.
LINK_STYLES = {"PIX": "cyan", "PXB": "cyan", "PHB": "yellow", "NODE": "yellow", "SYS": "red", "?": "dim"}


def render_cluster(cluster: ClusterTopology, console: Console) -> None:
    console.print(node_summary(cluster))
    for node in cluster.nodes:
        console.rule(f"[bold]{node.hostname}[/] ({node.source})")
        for note in node.notes:
            console.print(f"[dim]note:[/] {note}")
        if node.gpus:
            console.print(gpu_table(node))
        if node.devices:
            console.print(link_table(node))
            console.print(_legend(node), soft_wrap=True)
        _print_p2p(node, console)
        console.print(nic_table(node) if node.nics else "No network interfaces found.")


def node_summary(cluster: ClusterTopology) -> Table:
    table = Table(title="Nodes", title_justify="left")
    for column in ("node", "id", "ranks", "GPUs", "NICs", "driver", "source"):
        table.add_column(column)
    for node in cluster.nodes:
        table.add_row(
            node.hostname,
            _text(node.node_id),
            _ranks(node),
            _count_by(_gpu_model(gpu) for gpu in node.gpus) or "none",
            _count_by(_nic_kind(nic) for nic in node.nics) or "none",
            node.driver_version or "",
            node.source,
        )
    return table


def gpu_table(node: NodeTopology) -> Table:
    labels = {gpu.pci_bus_id: f"GPU{gpu.index}" for gpu in node.gpus}
    rows = [
        [
            str(gpu.index),
            _gpu_model(gpu),
            f"{gpu.memory_bytes / 2**30:.0f} GiB" if gpu.memory_bytes else "",
            gpu.pci_bus_id or "",
            _text(gpu.numa_node),
            gpu.cpu_affinity or "",
            _pcie(gpu),
            _nvlink_summary(gpu, labels),
        ]
        for gpu in node.gpus
    ]
    columns = ["GPU", "name", "memory", "PCI bus id", "NUMA", "CPU affinity", "PCIe now / max", "NVLink"]
    if any(gpu.fabric for gpu in node.gpus):  # a multi-node NVLink domain (NVL72): which one, per GPU
        columns.append("NVLink fabric (cluster / clique, state)")
        for row, gpu in zip(rows, node.gpus):
            fabric = gpu.fabric
            row.append(f"{fabric.cluster_uuid} / {fabric.clique_id}, {fabric.state}" if fabric else "none")
    return _table("GPUs", columns, rows)


def link_table(node: NodeTopology) -> Table:
    """The matrix as `nvidia-smi topo -m` draws it, with GPU CPU/NUMA affinity at the right."""
    table = Table(title="Links (nvidia-smi topo -m words)", title_justify="left")
    table.add_column("")
    for device in node.devices:
        table.add_column(device, justify="center")
    table.add_column("CPU affinity")
    table.add_column("NUMA")
    gpus = {f"GPU{gpu.index}": gpu for gpu in node.gpus}
    for device, row in zip(node.devices, node.links):
        gpu = gpus.get(device)
        table.add_row(
            device,
            *(_styled(word) for word in row),
            gpu.cpu_affinity or "" if gpu else "",
            _text(gpu.numa_node) if gpu else "",
        )
    return table


def nic_table(node: NodeTopology) -> Table:
    rows = [
        [
            nic.name,
            _nic_kind(nic),
            _text(nic.port),
            _nic_state(nic),
            _rate(nic),
            nic.pci_bus_id or "",
            _text(nic.numa_node),
            nic.netdev or "",
            nic.address or "",
            _text(nic.mtu),
        ]
        for nic in node.nics
    ]
    columns = ["NIC", "kind", "port", "state", "rate", "PCI bus id", "NUMA", "netdev", "address", "MTU"]
    return _table("NICs", columns, rows)


def _table(title: str, columns: list[str], rows: list[list[str]]) -> Table:
    """A table without the columns no row fills in (imports and small machines leave many empty)."""
    kept = [i for i in range(len(columns)) if any(row[i] for row in rows)]
    table = Table(title=title, title_justify="left")
    for i in kept:
        table.add_column(columns[i])
    for row in rows:
        table.add_row(*(row[i] for i in kept))
    return table


def _text(value: int | None) -> str:
    return "" if value is None else str(value)


def _legend(node: NodeTopology) -> str:
    words = {word for row in node.links for word in row}
    used = [key for key in LINK_LEGEND if key in words or (key == "NV#" and any(w.startswith("NV") for w in words))]
    legend = "Legend: " + "; ".join(f"{key} = {LINK_LEGEND[key]}" for key in used)
    if node.nic_legend:
        legend += "\nNICs: " + ", ".join(f"{label} = {name}" for label, name in node.nic_legend.items())
    return legend


def _print_p2p(node: NodeTopology, console: Console) -> None:
    """One line when every pair can read its peer; the matrix when some cannot."""
    pairs = [word for i, row in enumerate(node.p2p_read) for j, word in enumerate(row) if i != j]
    if not pairs:
        return
    if all(word == "OK" for word in pairs):
        console.print("P2P read: OK between every pair of GPUs")
        return
    table = Table(
        title="P2P read (OK, CNS chipset / GNS GPU / TNS topology not supported, NS not supported, U unknown)"
    )
    labels = [f"GPU{gpu.index}" for gpu in node.gpus]
    table.add_column("")
    for label in labels:
        table.add_column(label, justify="center")
    for label, row in zip(labels, node.p2p_read):
        table.add_row(label, *row)
    console.print(table)


def _styled(word: str) -> str:
    if word.startswith("NV"):
        return f"[green]{word}[/]"
    style = LINK_STYLES.get(word)
    return f"[{style}]{word}[/]" if style else word


def _pcie(gpu: Gpu) -> str:
    link = gpu.pcie

    def generation_width(generation, width) -> str:
        return f"Gen{generation or '?'} x{width or '?'}" if generation or width else ""

    now = generation_width(link.gen_current, link.width_current)
    best = generation_width(link.gen_max, link.width_max)
    return f"{now} / {best}" if now else best


def _nvlink_summary(gpu: Gpu, gpu_labels: dict[str | None, str]) -> str:
    """ "18 -> NVSwitch (v4.0)" or "2 -> GPU1, 2 -> GPU3", plus inactive links."""
    active = [link for link in gpu.nvlinks if link.active]
    if not gpu.nvlinks:
        return ""
    groups = Counter(
        (link.remote_type, link.remote_pci_bus_id if link.remote_type == "GPU" else None) for link in active
    )
    versions = {link.version for link in active if link.version}
    parts = [
        f"{count} -> {gpu_labels.get(remote_bus, remote_bus) if remote_bus else remote_type}"
        for (remote_type, remote_bus), count in groups.items()
    ]
    summary = ", ".join(parts) or "none active"
    if versions:
        summary += f" (v{'/'.join(sorted(versions))})"
    inactive = len(gpu.nvlinks) - len(active)
    return summary + (f", {inactive} inactive" if inactive else "")


def _gpu_model(gpu: Gpu) -> str:
    """The name, or for imports that lack it the compute capability."""
    return gpu.name or (f"sm {gpu.compute_capability}" if gpu.compute_capability else "GPU")


def _nic_kind(nic: Nic) -> str:
    return f"{nic.kind} ({nic.roce_version})" if nic.roce_version else nic.kind


def _nic_state(nic: Nic) -> str:
    text = nic.state or ""
    if nic.up is True:
        return f"[green]{text or 'up'}[/]"
    if nic.up is False:
        return f"[red]{text or 'down'}[/]"
    return text


def _rate(nic: Nic) -> str:
    if nic.rate_gbps is None:
        return ""
    rate = f"{nic.rate_gbps:g} Gb/s"
    return f"{rate} ({nic.rate_detail})" if nic.rate_detail else rate


def _ranks(node: NodeTopology) -> str:
    return compact_ranges(node.ranks)


def _count_by(names) -> str:
    return ", ".join(f"{count}x {name}" for name, count in Counter(names).items())
