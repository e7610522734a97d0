#include "trainer/sim/validation.h"

#include <cstdio>
#include <filesystem>
#include <sstream>
#include <utility>

#include "models/bert_config.h"
#include "trainer/cost/hardware.h"
#include "trainer/sim/alpha_beta.h"
#include "trainer/sim/perf_model.h"

namespace joule::trainer {
namespace fs = std::filesystem;
namespace {

std::string f(const char* fmt, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, fmt, v);
  return buf;
}

}  // namespace

std::vector<ValidationCase> validation_cases(const std::string& config_dir) {
  const std::string hw = (fs::path(config_dir) / "hardware").string(), presets = (fs::path(config_dir) / "models").string();
  const ClusterModel p4d(load_instance_profile("p4d.24xlarge", hw), presets);
  const ClusterModel trn1(load_instance_profile("trn1.32xlarge", hw), presets);
  const models::BertConfig large = models::load_config("bert-large", presets);
  std::vector<ValidationCase> cases;
  auto workload = [&](int64_t seq_len, int64_t global_batch, const std::string& dtype) {
    Workload w;
    w.model = large;
    w.seq_len = seq_len;
    w.max_predictions = default_max_predictions(seq_len);
    w.global_batch = global_batch;
    w.micro_batch = seq_len <= 128 ? 64 : 16;
    w.dtype = dtype;
    return w;
  };
  const std::string dle = "NVIDIA DeepLearningExamples BERT README (DGX A100 80 GB)";
  struct A100 {
    const char* what;
    int gpus;
    int64_t seq;
    const char* dtype;
    double published;
  };
  for (const A100& c : {A100{"8 x A100 AMP, phase 1", 8, 128, "bf16", 4591}, A100{"1 x A100 AMP, phase 1", 1, 128, "bf16", 580},
                        A100{"8 x A100 TF32, phase 1", 8, 128, "tf32", 2505}, A100{"1 x A100 TF32, phase 1", 1, 128, "tf32", 317},
                        A100{"8 x A100 AMP, phase 2", 8, 512, "bf16", 1657}, A100{"1 x A100 AMP, phase 2", 1, 512, "bf16", 210},
                        A100{"8 x A100 TF32, phase 2", 8, 512, "tf32", 860}, A100{"1 x A100 TF32, phase 2", 1, 512, "tf32", 110}}) {
    const int64_t per_gpu_batch = c.seq == 128 ? 8192 : 4096;  // NVIDIA's recipe per GPU (65,536 and 32,768 on 8)
    const double seq_per_s = p4d.predict(workload(c.seq, per_gpu_batch * c.gpus, c.dtype), 1, {}, 475, c.gpus).seq_per_s;
    const bool calibration = std::string(c.what) == "8 x A100 AMP, phase 1";
    cases.push_back({std::string("BERT-Large ") + c.what, "seq/s",
                     calibration ? "calibration (0 by construction)" : "independent: devices, dtype or sequence length", dle, c.published,
                     seq_per_s});
  }
  const std::string neuron = "AWS Neuron trn1 benchmarks (1 x trn1.32xlarge)";
  cases.push_back({"BERT-Large trn1.32xlarge LAMB GBS 65,536, phase 1", "seq/s", "calibration (0 by construction)", neuron, 3733,
                   trn1.predict(workload(128, 65536, "bf16"), 1).seq_per_s});
  cases.push_back({"BERT-Large trn1.32xlarge AdamW GBS 16,384, phase 1", "seq/s", "independent: global batch (optimizer not modelled apart)",
                   neuron, 3826.6, trn1.predict(workload(128, 16384, "bf16"), 1).seq_per_s});
  // NCCL all-reduce bus bandwidth, 1 GiB, on p4d nodes.
  const InstanceProfile& pp = p4d.profile();
  const double gib = 1024.0 * 1024 * 1024;
  const std::pair<int, double> nccl[] = {{1, 230.8}, {2, 57.2}, {3, 31.8}, {4, 29.6}};
  for (const auto& [nodes, published] : nccl) {
    const Topology t = cluster_topology(pp, nodes, pp.devices);
    const double seconds = hierarchical_all_reduce(t, gib).total_s();
    cases.push_back({"NCCL all-reduce busbw, 1 GiB, " + std::to_string(nodes) + " p4d node(s)", "GB/s",
                     nodes == 1 ? "calibration of intra_node_efficiency" : "independent: inter-node α-β", "NVIDIA/nccl issue 527 (p4dn, NCCL 2.9.9)",
                     published, all_reduce_bus_bandwidth(gib, seconds, nodes * pp.devices) / 1e9});
  }
  // The seed article: 16 x trn1.32xlarge against 16 x p4d.24xlarge, BERT-Large phase 1, 450M sequences.
  const Workload card = workload(128, 65536, "bf16");
  const StepPrediction t16 = trn1.predict(card, 16), p16 = p4d.predict(card, 16);
  const std::string article = "AWS ML blog (the seed article): 16 x trn1 vs 16 x p4d";
  cases.push_back({"trn1 / p4d sequences per hour, 16 nodes", "ratio", "independent", article, 1.7, t16.seq_per_hour / p16.seq_per_hour});
  cases.push_back({"trn1 / p4d energy for the run, 16 nodes", "ratio", "independent of any trn1 figure but its assumed power", article, 0.71,
                   t16.kwh / p16.kwh});
  cases.push_back({"trn1 / p4d cost for the run, 16 nodes", "ratio", "independent", article, 0.38, t16.usd / p16.usd});
  return cases;
}

std::string validation_table(const std::vector<ValidationCase>& cases) {
  std::ostringstream out;
  out << "| case | unit | published | predicted | error | basis | source |\n|---|---|---|---|---|---|---|\n";
  for (const auto& c : cases)
    out << "| " << c.name << " | " << c.unit << " | " << f("%.4g", c.published) << " | " << f("%.4g", c.predicted) << " | "
        << f("%+.1f %%", 100 * c.relative_error()) << " | " << c.basis << " | " << c.source << " |\n";
  return out.str();
}

}  // namespace joule::trainer
