"""Show how this node's GPUs and NICs connect, or a topology recorded elsewhere.

By default the node is discovered live:
  GPUs     through NVML (nvidia-ml-py): name, memory, PCI bus id, NUMA node, CPU affinity,
           PCIe generation and width (now / max: the current one drops at idle), NVLinks
           (state, version, peer GPU or NVSwitch) and peer-to-peer read status;
  NICs     from sysfs: RDMA ports (InfiniBand, or RoCE when the link layer is Ethernet) with
           state and rate, then plain Ethernet interfaces with speed, MTU and address;
  links    a GPU/NIC matrix in `nvidia-smi topo -m` words: NV# (# NVLinks, direct or through
           NVSwitches), PIX (one PCIe switch), PXB (several bridges), PHB (a host bridge),
           NODE (inside one NUMA node), SYS (across NUMA nodes).
A machine without an NVIDIA driver or GPU is a normal case: the view lists its NICs only.
Run it where all of the node's GPUs are visible (per-task cgroups hide peers).

To show a node discovered elsewhere, import instead of discovering:
  --import-nccl-xml FILE   the XML NCCL writes with NCCL_TOPO_DUMP_FILE=FILE
  --import-smi-topo FILE   saved output of `nvidia-smi topo -m`
Both may be given (each becomes a node of the view). --json prints the same object that
run.json stores under "topology": {"nodes": [...]}.

Examples:
  commbench topo
  commbench topo --json > topo.json
  commbench topo --import-nccl-xml topo.xml --node-name dgx-a01
"""

from __future__ import annotations

import argparse
import json
import sys

from commbench.errors import UsageError

HELP = "show how GPUs and NICs connect (NVML, sysfs, or an NCCL / nvidia-smi dump)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--json", action="store_true", help="print JSON (the run.json 'topology' object) instead of tables"
    )
    parser.add_argument(
        "--node-name",
        metavar="NAME",
        help="name of the node (default: $COMMBENCH_NODE_NAME, $SLURMD_NODENAME, the hostname; "
        "for imports, the file name)",
    )
    parser.add_argument("--import-nccl-xml", metavar="FILE", help="read NCCL's topology dump (NCCL_TOPO_DUMP_FILE)")
    parser.add_argument("--import-smi-topo", metavar="FILE", help="read saved `nvidia-smi topo -m` output")


def main(args: argparse.Namespace) -> int:
    from commbench.topology import ClusterTopology, discover_node

    imports = _imported_nodes(args)
    cluster = ClusterTopology(nodes=imports or [discover_node(args.node_name)])
    if args.json:
        json.dump(cluster.to_dict(), sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        from rich.console import Console

        from commbench.topology.render import render_cluster

        render_cluster(cluster, Console())
    return 0


def _imported_nodes(args: argparse.Namespace) -> list:
    from commbench.topology import read_nccl_xml, read_smi_topo

    readers = [(args.import_nccl_xml, read_nccl_xml), (args.import_smi_topo, read_smi_topo)]
    nodes = []
    for path, read in readers:
        if path is None:
            continue
        try:
            nodes.append(read(path, args.node_name))
        except OSError as exc:
            raise UsageError(f"cannot read {path}: {exc.strerror or exc}") from None
        except UnicodeDecodeError:
            raise UsageError(f"{path}: not a text file (not UTF-8)") from None
        except ValueError as exc:
            raise UsageError(str(exc)) from None
    return nodes
