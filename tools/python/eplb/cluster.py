"""The cluster model: nodes, GPUs and links (eplb/topo.h)."""

from __future__ import annotations

import ctypes

from ._lib import GpuInfoC, Handle, NodeInfoC, cstr, lib, struct_dict


class Cluster(Handle):
    """A cluster (eplb_cluster_t): Cluster("4x8"), Cluster("live"),
    Cluster("cluster.json") or Cluster.uniform(nodes, gpus_per_node)."""

    _kind = "cluster"

    def __init__(self, spec=None, *, _handle=None):
        if _handle is None:
            h = ctypes.c_void_p()
            lib.eplb_cluster_open(cstr(spec), ctypes.byref(h))
            _handle = h.value
        self._own(_handle, lib.eplb_cluster_destroy)
        self.spec = spec

    @classmethod
    def uniform(cls, nodes: int, gpus_per_node: int) -> "Cluster":
        h = ctypes.c_void_p()
        lib.eplb_cluster_create_uniform(nodes, gpus_per_node, ctypes.byref(h))
        c = cls(_handle=h.value)
        c.spec = f"{nodes}x{gpus_per_node}"
        return c

    @property
    def num_nodes(self) -> int:
        return lib.eplb_cluster_num_nodes(self._p)

    @property
    def num_gpus(self) -> int:
        return lib.eplb_cluster_num_gpus(self._p)

    def node_of(self, gpu: int) -> int:
        n = lib.eplb_cluster_node_of(self._p, gpu)
        if n == 0xFFFFFFFF:
            raise IndexError(f"gpu {gpu} out of range (cluster has {self.num_gpus} GPUs)")
        return n

    def node(self, node: int) -> dict:
        """Node description (eplb_node_info_t) as a dict."""
        info = NodeInfoC()
        lib.eplb_cluster_node(self._p, node, ctypes.byref(info))
        return struct_dict(info)

    def gpu(self, gpu: int) -> dict:
        """GPU description (eplb_gpu_info_t) as a dict; nic_affinity as text."""
        info = GpuInfoC()
        lib.eplb_cluster_gpu(self._p, gpu, ctypes.byref(info))
        d = struct_dict(info)
        d["nic_affinity"] = lib.eplb_nic_affinity_str(info.nic_affinity).decode()
        return d

    def link(self, gpu_a: int, gpu_b: int) -> str:
        """"same-gpu"-like link class text between two GPUs."""
        return lib.eplb_link_class_str(lib.eplb_cluster_link(self._p, gpu_a, gpu_b)).decode()

    def bandwidth_gbps(self, gpu_a: int, gpu_b: int) -> float:
        return lib.eplb_cluster_bandwidth_gbps(self._p, gpu_a, gpu_b)

    def info(self) -> dict:
        """Every node and GPU description."""
        return {
            "num_nodes": self.num_nodes,
            "num_gpus": self.num_gpus,
            "nodes": [self.node(i) for i in range(self.num_nodes)],
            "gpus": [self.gpu(i) for i in range(self.num_gpus)],
        }

    def __repr__(self):
        if self.closed:
            return "<eplb.Cluster closed>"
        return f"<eplb.Cluster {self.spec} nodes={self.num_nodes} gpus={self.num_gpus}>"
