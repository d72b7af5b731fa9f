"""Who sits where: a node's GPUs, NICs and links, and the cluster view stored in run.json.

Discover this node with `discover_node()`; import views made elsewhere with `read_nccl_xml()`
(NCCL_TOPO_DUMP_FILE) or `read_smi_topo()` (`nvidia-smi topo -m` text); place ranks on nodes with
`place_ranks()` and merge per-node views into one `ClusterTopology` with `merge_nodes()`. The nominal
rates of the links a topology shows (NVLink per generation, NICs) are in `rates`.
"""

from commbench.topology.cluster import NodePlacement, RankIdentity, merge_nodes, place_ranks
from commbench.topology.discover import discover_node, node_name, nvlink_domain
from commbench.topology.model import ClusterTopology, Gpu, Nic, NodeTopology, NvLink, PcieLink
from commbench.topology.nccl_xml import read_nccl_xml
from commbench.topology.smi_text import read_smi_topo

__all__ = [
    "ClusterTopology",
    "Gpu",
    "Nic",
    "NodePlacement",
    "NodeTopology",
    "NvLink",
    "PcieLink",
    "RankIdentity",
    "discover_node",
    "merge_nodes",
    "node_name",
    "nvlink_domain",
    "place_ranks",
    "read_nccl_xml",
    "read_smi_topo",
]
