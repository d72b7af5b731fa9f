"""The cluster as a network picture, the GPU matrix in nvidia-smi words, and the pairwise heatmap.

Input is the typed topology (ClusterTopology, as run.json stores it under "topology") and, for
measured bandwidth, a records frame; link words, active NVLinks and network kinds come from the
topology model and its rates, not from rules of its own. The picture has one row per kind of device, each node's devices side by side:
network fabrics on top, then NICs, CPUs (one per NUMA node), GPUs, and the NVSwitch fabric.
"""

from __future__ import annotations

import itertools

import networkx as nx
import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.colors import sample_colorscale

from commbench.analysis.pairwise import record_retransmit_pct
from commbench.topology.model import LINK_LEGEND, ClusterTopology, Gpu, Nic, NodeTopology
from commbench.topology.rates import network_kind
from dashboard.figures.common import message_figure

LAYERS = {"fabric": 4, "nic": 3, "cpu": 2, "gpu": 1, "nvswitch": 0}
NODE_STYLE = {  # symbol, colour, size
    "fabric": ("hexagon", "#444444", 26),
    "nic": ("diamond", "#2ca02c", 16),
    "cpu": ("square", "#1f77b4", 20),
    "gpu": ("circle", "#76b900", 20),
    "nvswitch": ("star-square", "#9467bd", 24),
}
LINK_COLOURS = {
    "NVLink": "#76b900",
    "PCIe switch (PIX/PXB)": "#17becf",
    "PCIe host bridge": "#1f77b4",
    "CPU interconnect (SYS)": "#d62728",
    "InfiniBand": "#ff7f0e",
    "RoCE": "#e377c2",
    "Ethernet": "#8c564b",
    "network": "#7f7f7f",
}
MATRIX_ORDER = ["X", "NV", "PIX", "PXB", "PHB", "NODE", "SYS", "?"]


# --- the network picture ---------------------------------------------------------------------


def cluster_topology(data: dict | None) -> ClusterTopology | None:
    """The typed topology of a run.json "topology" object; None without one or when it is not one."""
    if not isinstance(data, dict):
        return None
    try:
        return ClusterTopology.from_dict(data)
    except (TypeError, AttributeError):  # a node without hostname or source, a list where a dict belongs
        return None


def topology_graph(topology: ClusterTopology) -> nx.Graph:
    """Devices as nodes (attributes layer, kind, label, hover) and links as edges (link, label, scope)."""
    graph = nx.Graph()
    for node in topology.nodes:
        _add_node_devices(graph, node)
    return graph


def _add_node_devices(graph: nx.Graph, node: NodeTopology) -> None:
    host = node.hostname or f"node{node.node_id}"
    gpus = node.gpus
    numa_nodes = sorted({d.numa_node for d in [*gpus, *node.nics]} - {None}) or [None]
    for numa in numa_nodes:
        label = f"CPU{numa}" if numa is not None else "CPU"
        graph.add_node(
            f"{host}/{label}",
            layer=LAYERS["cpu"],
            kind="cpu",
            label=label,
            hover=f"{host}: {label} (NUMA node {numa if numa is not None else '?'})",
        )
    for first, second in itertools.pairwise(numa_nodes):
        graph.add_edge(
            f"{host}/CPU{first}", f"{host}/CPU{second}", link="CPU interconnect (SYS)", label="SYS", scope="intra"
        )

    switch_links = {gpu.index: len(gpu.active_nvlinks("NVSwitch")) for gpu in gpus}
    has_switch = any(switch_links.values())
    if has_switch:
        graph.add_node(
            f"{host}/NVSwitch",
            layer=LAYERS["nvswitch"],
            kind="nvswitch",
            label="NVSwitch",
            hover=f"{host}: NVSwitch fabric",
        )
    for gpu in gpus:
        gpu_id = f"{host}/GPU{gpu.index}"
        graph.add_node(gpu_id, layer=LAYERS["gpu"], kind="gpu", label=f"GPU{gpu.index}", hover=_gpu_hover(host, gpu))
        graph.add_edge(
            gpu_id, f"{host}/{_cpu_label(gpu)}", link="PCIe host bridge", label=_pcie_label(gpu), scope="intra"
        )
        if switch_links[gpu.index]:
            graph.add_edge(
                gpu_id, f"{host}/NVSwitch", link="NVLink", label=f"NV{switch_links[gpu.index]}", scope="intra"
            )
    if not has_switch:  # direct NVLinks between GPU pairs
        for i, gpu in enumerate(gpus):
            for peer in gpus[i + 1 :]:
                link = node.link(f"GPU{gpu.index}", f"GPU{peer.index}")
                if link.startswith("NV"):
                    graph.add_edge(
                        f"{host}/GPU{gpu.index}", f"{host}/GPU{peer.index}", link="NVLink", label=link, scope="intra"
                    )
    _add_nics(graph, host, node)


def _add_nics(graph: nx.Graph, host: str, node: NodeTopology) -> None:
    matrix_label = {name: label for label, name in node.nic_legend.items()}
    seen = set()
    for nic in node.nics:
        if (nic.name, nic.port) in seen:
            continue
        seen.add((nic.name, nic.port))
        nic_id = f"{host}/{nic.name}" + (f":{nic.port}" if nic.port not in (None, 1) else "")
        graph.add_node(nic_id, layer=LAYERS["nic"], kind="nic", label=nic.name, hover=_nic_hover(host, nic))
        label = matrix_label.get(nic.name)
        close = [g for g in node.gpus if label and node.link(f"GPU{g.index}", label) in ("PIX", "PXB")]
        for gpu in close:
            graph.add_edge(
                nic_id,
                f"{host}/GPU{gpu.index}",
                link="PCIe switch (PIX/PXB)",
                label=node.link(f"GPU{gpu.index}", label),
                scope="intra",
            )
        if not close:
            graph.add_edge(nic_id, f"{host}/{_cpu_label(nic)}", link="PCIe host bridge", label="PCIe", scope="intra")
        kind = network_kind(nic)
        fabric = f"fabric:{kind}"
        if fabric not in graph:
            graph.add_node(
                fabric,
                layer=LAYERS["fabric"],
                kind="fabric",
                label=f"{kind} fabric",
                hover=f"{kind} network between nodes",
            )
        rate = f"{nic.rate_gbps:g} Gb/s" if nic.rate_gbps else "rate unknown"
        graph.add_edge(nic_id, fabric, link=kind, label=rate, scope="inter")


def _cpu_label(device: Gpu | Nic) -> str:
    return f"CPU{device.numa_node}" if device.numa_node is not None else "CPU"


def _pcie_label(gpu: Gpu) -> str:
    if gpu.pcie.gen_max and gpu.pcie.width_max:
        return f"PCIe Gen{gpu.pcie.gen_max} x{gpu.pcie.width_max}"
    return "PCIe"


def _gpu_hover(host: str, gpu: Gpu) -> str:
    memory = f"{gpu.memory_bytes / 2**30:.0f} GiB" if gpu.memory_bytes else "memory ?"
    return (
        f"{host}: GPU{gpu.index} {gpu.name or ''}<br>{gpu.pci_bus_id or 'bus ?'}, {memory}, "
        f"NUMA {gpu.numa_node}, {len(gpu.nvlinks)} NVLinks"
    )


def _nic_hover(host: str, nic: Nic) -> str:
    rate = f"{nic.rate_gbps:g} Gb/s" if nic.rate_gbps else "rate ?"
    return (
        f"{host}: {nic.name} port {nic.port}<br>{nic.kind}, {rate} {nic.rate_detail or ''}, "
        f"state {nic.state or '?'}, NUMA {nic.numa_node}"
    )


def layered_positions(graph: nx.Graph) -> dict[str, tuple[float, float]]:
    """Each layer on its own row, devices spread evenly.

    The GPU and NVSwitch rows keep the order devices were added (node by node, GPU index); each
    row above is ordered by where its neighbours below sit, so a NIC lands over its GPU and a
    CPU over the GPUs it hosts, which keeps lines from crossing.
    """
    rows: dict[int, list[str]] = {}
    for name, layer in graph.nodes(data="layer"):
        rows.setdefault(layer, []).append(name)
    positions: dict[str, tuple[float, float]] = {}
    for layer in sorted(rows):
        names = rows[layer]
        if layer > LAYERS["gpu"]:
            names = sorted(names, key=lambda name: _mean_x_below(graph, positions, name))
        for i, name in enumerate(names):
            positions[name] = ((i + 0.5) / len(names), float(layer))
    return positions


def _mean_x_below(graph: nx.Graph, positions, name: str) -> float:
    placed = [positions[n][0] for n in graph.neighbors(name) if n in positions]
    return sum(placed) / len(placed) if placed else 0.5


def measured_by_scope(frame: pd.DataFrame, node_count: int) -> dict[str, tuple[float, str]]:
    """Peak busbw (GB/s) measured inside a node ("intra") and between nodes ("inter"), with a label.

    A world-scope run stands for intra on one node and for inter across several (the slowest
    links set its pace). all_reduce is preferred, being what nccl-tests users compare.
    """
    if frame.empty or "scope" not in frame:
        return {}
    op = "all_reduce" if (frame["op"] == "all_reduce").any() else frame["op"].iloc[0]
    rows = frame[frame["op"] == op]
    found = {}
    for tier, scopes in (
        ("intra", ["intra"] + (["world"] if node_count <= 1 else [])),
        ("inter", ["inter"] + (["world"] if node_count > 1 else [])),
    ):
        for scope in scopes:
            series = rows.loc[rows["scope"] == scope, "busbw_gbps"]
            if len(series):
                found[tier] = (float(series.max()), f"{op} {scope} busbw {series.max():.3g} GB/s")
                break
    return found


def topology_figure(topology: ClusterTopology, colour_by: str = "link", measured: dict | None = None) -> go.Figure:
    """The network picture; colour_by "link" colours edges by link type, "measured" by busbw."""
    graph = topology_graph(topology)
    if graph.number_of_nodes() == 0:
        return message_figure("This topology lists no devices.")
    positions = layered_positions(graph)
    figure = go.Figure()
    if colour_by == "measured":
        _draw_measured_edges(figure, graph, positions, measured or {})
    else:
        _draw_typed_edges(figure, graph, positions)
    _draw_edge_labels(figure, graph, positions, measured if colour_by == "measured" else None)
    _draw_devices(figure, graph, positions)
    figure.update_layout(
        template="plotly_white",
        height=520,
        hovermode="closest",
        margin={"t": 30, "l": 10, "r": 10},
        xaxis={"visible": False, "range": [-0.03, 1.03]},
        yaxis={"visible": False, "range": [-0.6, 4.6]},
        legend={"orientation": "h", "y": -0.05},
    )
    return figure


def _edge_xy(graph, positions, edges) -> tuple[list, list]:
    xs, ys = [], []
    for a, b in edges:
        xs += [positions[a][0], positions[b][0], None]
        ys += [positions[a][1], positions[b][1], None]
    return xs, ys


def _draw_typed_edges(figure: go.Figure, graph: nx.Graph, positions) -> None:
    by_link: dict[str, list] = {}
    for a, b, link in graph.edges(data="link"):
        by_link.setdefault(link, []).append((a, b))
    for link, edges in by_link.items():
        xs, ys = _edge_xy(graph, positions, edges)
        figure.add_trace(
            go.Scatter(
                x=xs,
                y=ys,
                mode="lines",
                name=link,
                hoverinfo="skip",
                line={"color": LINK_COLOURS.get(link, "#7f7f7f"), "width": 3},
            )
        )


def _draw_measured_edges(figure: go.Figure, graph: nx.Graph, positions, measured: dict) -> None:
    peak = max((value for value, _ in measured.values()), default=0.0)
    groups: dict[str | None, list] = {}
    for a, b, scope in graph.edges(data="scope"):
        groups.setdefault(scope if scope in measured else None, []).append((a, b))
    for scope, edges in groups.items():
        xs, ys = _edge_xy(graph, positions, edges)
        if scope is None:
            figure.add_trace(
                go.Scatter(
                    x=xs,
                    y=ys,
                    mode="lines",
                    name="not measured",
                    hoverinfo="skip",
                    line={"color": "#d0d0d0", "width": 2},
                )
            )
            continue
        value, label = measured[scope]
        colour = sample_colorscale("Viridis", [value / peak if peak else 0.0])[0]
        figure.add_trace(
            go.Scatter(
                x=xs, y=ys, mode="lines", name=f"{scope}: {label}", hoverinfo="skip", line={"color": colour, "width": 4}
            )
        )
    if measured:
        figure.add_trace(
            go.Scatter(
                x=[None],
                y=[None],
                mode="markers",
                showlegend=False,
                hoverinfo="skip",
                marker={
                    "colorscale": "Viridis",
                    "cmin": 0,
                    "cmax": peak,
                    "color": [peak],
                    "showscale": True,
                    "colorbar": {"title": "busbw GB/s", "thickness": 12},
                },
            )
        )
    else:
        figure.add_annotation(
            text="no measurement in this run maps onto these links",
            showarrow=False,
            x=0.5,
            y=4.45,
            xref="paper",
            yref="y",
        )


def _draw_edge_labels(figure: go.Figure, graph: nx.Graph, positions, measured: dict | None) -> None:
    xs, ys, texts, hovers = [], [], [], []
    for a, b, data in graph.edges(data=True):
        upper, lower = sorted((positions[a], positions[b]), key=lambda xy: -xy[1])
        # Half a row below the upper end, so labels of links that skip a row miss that row's devices.
        share = 0.5 / max(1.0, upper[1] - lower[1])
        xs.append(upper[0] + share * (lower[0] - upper[0]))
        ys.append(upper[1] + share * (lower[1] - upper[1]))
        texts.append(data["label"])
        extra = f"<br>measured: {measured[data['scope']][1]}" if measured and data["scope"] in measured else ""
        hovers.append(f"{graph.nodes[a]['label']} – {graph.nodes[b]['label']}: {data['label']} ({data['link']}){extra}")  # noqa: RUF001
    figure.add_trace(
        go.Scatter(
            x=xs,
            y=ys,
            mode="text",
            text=texts,
            hovertext=hovers,
            hoverinfo="text",
            textfont={"size": 9, "color": "#333"},
            showlegend=False,
        )
    )


def _draw_devices(figure: go.Figure, graph: nx.Graph, positions) -> None:
    for kind, (symbol, colour, size) in NODE_STYLE.items():
        names = [name for name, node_kind in graph.nodes(data="kind") if node_kind == kind]
        if not names:
            continue
        figure.add_trace(
            go.Scatter(
                x=[positions[n][0] for n in names],
                y=[positions[n][1] for n in names],
                mode="markers+text",
                text=[graph.nodes[n]["label"] for n in names],
                textposition="bottom center",
                hovertext=[graph.nodes[n]["hover"] for n in names],
                hoverinfo="text",
                showlegend=False,
                marker={"symbol": symbol, "color": colour, "size": size, "line": {"width": 1, "color": "white"}},
            )
        )


# --- the GPU matrix --------------------------------------------------------------------------


def link_matrix_figure(node: NodeTopology) -> go.Figure:
    """One node's device matrix in `nvidia-smi topo -m` words, closest links darkest."""
    devices, links, host = node.devices, node.links, node.hostname
    if not devices or not links:
        return message_figure(f"{host}: no GPU/NIC link matrix recorded.", title=host)
    legend = node.nic_legend
    labels = [f"{d} ({legend[d]})" if d in legend else d for d in devices]
    rank = [[_matrix_rank(word) for word in row] for row in links]
    hover = [
        [f"{labels[i]} ↔ {labels[j]}: {word} — {_meaning(word)}" for j, word in enumerate(row)]
        for i, row in enumerate(links)
    ]
    figure = go.Figure(
        go.Heatmap(
            z=rank,
            x=labels,
            y=labels,
            text=links,
            texttemplate="%{text}",
            hovertext=hover,
            hoverinfo="text",
            colorscale="Greens",
            reversescale=True,
            zmin=0,
            zmax=len(MATRIX_ORDER) - 1,
            showscale=False,
        )
    )
    figure.update_layout(
        template="plotly_white",
        title=f"{host}: links ({node.source})",
        height=max(320, 28 * len(devices) + 140),
        yaxis={"autorange": "reversed"},
        margin={"t": 40},
    )
    return figure


def _matrix_rank(word: str) -> int:
    key = "NV" if word.startswith("NV") else word
    return MATRIX_ORDER.index(key) if key in MATRIX_ORDER else len(MATRIX_ORDER) - 1


def _meaning(word: str) -> str:
    if word.startswith("NV") and word[2:].isdigit():
        return LINK_LEGEND["NV#"].replace("#", word[2:], 1)
    return LINK_LEGEND.get(word, "unknown")


# --- the pairwise matrix ---------------------------------------------------------------------


def pair_ends(record: dict) -> tuple[str, str]:
    """'rank (node)' for both ends of a `commbench run --pairwise` record."""
    nodes = record.get("pair_nodes") or ["?", "?"]
    return tuple(f"{rank} ({node})" for rank, node in zip(record["pair"], nodes))


def pairwise_figure(frame: pd.DataFrame) -> go.Figure | None:
    """Heatmap of each pair's ping-pong bandwidth at the largest size measured, with the pairs that
    `commbench run --pairwise` flagged (slow or lossy) crossed out and their TCP retransmissions
    in the hover; None without pair records."""
    pairs = frame[frame["scope"] == "pair"] if "scope" in frame else frame.iloc[0:0]
    if pairs.empty:
        return None
    pairs = pairs[pairs["size_bytes"] == pairs["size_bytes"].max()]
    records = pairs.to_dict("records")
    bandwidth = {pair_ends(r): float(r["algbw_gbps"]) for r in records}
    health = {pair_ends(r): _pair_health(r) for r in records}
    flagged = [pair_ends(r) for r in records if r.get("outlier") is True]
    names = sorted({end for ends in bandwidth for end in ends}, key=_natural_key)
    index = {name: i for i, name in enumerate(names)}
    grid = np.full((len(names), len(names)), np.nan)
    notes = np.full((len(names), len(names)), "", dtype=object)
    for (a, b), value in bandwidth.items():
        grid[index[a], index[b]] = grid[index[b], index[a]] = value
        notes[index[a], index[b]] = notes[index[b], index[a]] = health[(a, b)]
    figure = go.Figure(
        go.Heatmap(
            z=grid,
            x=names,
            y=names,
            customdata=notes,
            colorscale="Viridis",
            colorbar={"title": "GB/s"},
            texttemplate="%{z:.3g}",
            hovertemplate="%{y} ↔ %{x}: %{z:.4g} GB/s<br>%{customdata}<extra></extra>",
        )
    )
    if flagged:
        xs = [end for a, b in flagged for end in (b, a)]
        ys = [end for a, b in flagged for end in (a, b)]
        figure.add_trace(
            go.Scatter(
                x=xs,
                y=ys,
                mode="markers",
                name="flagged pair (slow or lossy)",
                marker={"symbol": "x-thin-open", "size": 22, "color": "red", "line": {"width": 3}},
                hoverinfo="skip",
            )
        )
    size = int(pairs["size_bytes"].iloc[0])
    figure.update_layout(
        template="plotly_white",
        title=f"pairwise ping-pong bandwidth at {size} B",
        height=max(320, 40 * len(names) + 140),
        yaxis={"autorange": "reversed"},
        legend={"orientation": "h", "y": -0.15},
        margin={"t": 40},
    )
    return figure


def _pair_health(record: dict) -> str:
    """'TCP re-sent 2.10% of segments · flagged: lossy' (parts left out when unknown or clean)."""
    parts = []
    resent = record_retransmit_pct(record)
    if resent is not None:
        parts.append(f"TCP re-sent {resent:.2f}% of segments")
    reasons = record.get("outlier_reasons")
    if isinstance(reasons, (list, tuple)) and len(reasons):
        parts.append("flagged: " + ", ".join(map(str, reasons)))
    return " · ".join(parts)


def _natural_key(name: str):
    rank = name.split(" ", 1)[0]
    return (0, int(rank), name) if rank.isdigit() else (1, 0, name)
