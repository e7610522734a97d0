// The α-β cost of collectives on a cluster: closed forms for ring algorithms and the hierarchical all-reduce
// that NCCL and Neuron collectives use across nodes (intra-node reduce-scatter over NVSwitch or NeuronLink,
// inter-node all-reduce over EFA, intra-node all-gather). α: per-hop latency in seconds; β: seconds per byte.
// The cluster performance model and --device trainium-sim time
// the buckets the reducer really launches with it. No LibTorch.
#pragma once

namespace joule::sim {

struct Link {
  double latency_s = 0;    // α per hop
  double bytes_per_s = 1;  // achievable bandwidth per device on this link (already x efficiency)
  double beta() const { return 1.0 / bytes_per_s; }
};

// Ring all-reduce of `bytes` over p ranks: 2(p-1)α + 2(p-1)/p · n · β.
double ring_all_reduce_seconds(int p, double bytes, const Link& link);
// Ring reduce-scatter (or all-gather) of `bytes` in total over p ranks: (p-1)α + (p-1)/p · n · β.
double ring_reduce_scatter_seconds(int p, double bytes, const Link& link);

struct Topology {
  int nodes = 1;
  int devices_per_node = 1;
  Link intra;  // per device, inside a node
  Link inter;  // per node (the NIC bandwidth one node has), between nodes
};

struct AllReduceTime {
  double intra_reduce_scatter_s = 0, inter_all_reduce_s = 0, intra_all_gather_s = 0;
  double total_s() const { return intra_reduce_scatter_s + inter_all_reduce_s + intra_all_gather_s; }
};

// Hierarchical all-reduce of `bytes` per device: reduce-scatter inside each node, then every device's 1/d shard
// all-reduced across the nodes by d concurrent rings that share the node's network bandwidth, then all-gather
// inside each node. With one node it is the ring all-reduce; with one device per node, the inter-node ring.
AllReduceTime hierarchical_all_reduce(const Topology& topology, double bytes);

// Hierarchical reduce-scatter (or all-gather) of `bytes` per device, ZeRO-1's pair of the all-reduce: inside each
// node, then every device's 1/d shard reduce-scattered across the nodes by d concurrent rings sharing the node's
// network bandwidth. Each device ends with (or starts from) its 1/(n d) of the buffer: half of an all-reduce's traffic.
double hierarchical_reduce_scatter_seconds(const Topology& topology, double bytes);

// nccl-tests' bus bandwidth of an all-reduce over n ranks: algbw x 2(n-1)/n.
double all_reduce_bus_bandwidth(double bytes, double seconds, int ranks);

}  // namespace joule::sim
