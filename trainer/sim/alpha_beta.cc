#include "trainer/sim/alpha_beta.h"

namespace joule::sim {

double ring_all_reduce_seconds(int p, double bytes, const Link& l) {
  if (p <= 1) return 0;
  return 2.0 * (p - 1) * l.latency_s + 2.0 * (p - 1) / p * bytes * l.beta();
}

double ring_reduce_scatter_seconds(int p, double bytes, const Link& l) {
  if (p <= 1) return 0;
  return (p - 1) * l.latency_s + static_cast<double>(p - 1) / p * bytes * l.beta();
}

AllReduceTime hierarchical_all_reduce(const Topology& t, double bytes) {
  AllReduceTime r;
  const int d = t.devices_per_node, n = t.nodes;
  r.intra_reduce_scatter_s = ring_reduce_scatter_seconds(d, bytes, t.intra);
  r.intra_all_gather_s = ring_reduce_scatter_seconds(d, bytes, t.intra);
  if (n > 1) {
    // d rings, one per local device, each over n nodes with bytes/d, sharing the node's link: each gets 1/d of
    // the bandwidth, so the bandwidth term is that of the whole message over the node's link.
    const Link shared{t.inter.latency_s, t.inter.bytes_per_s / d};
    r.inter_all_reduce_s = ring_all_reduce_seconds(n, bytes / d, shared);
  }
  return r;
}

double hierarchical_reduce_scatter_seconds(const Topology& t, double bytes) {
  const int d = t.devices_per_node, n = t.nodes;
  double s = ring_reduce_scatter_seconds(d, bytes, t.intra);
  if (n > 1) s += ring_reduce_scatter_seconds(n, bytes / d, Link{t.inter.latency_s, t.inter.bytes_per_s / d});
  return s;
}

double all_reduce_bus_bandwidth(double bytes, double seconds, int ranks) {
  if (ranks <= 1 || seconds <= 0) return 0;
  return bytes / seconds * 2.0 * (ranks - 1) / ranks;
}

}  // namespace joule::sim
