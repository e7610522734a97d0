// The inference half's validation cases (VALIDATION.md, "Inference"): `joule plan --inference`'s sizing against the
// seed study's inference experiment and other published inference figures.
#include <filesystem>
#include <string>
#include <vector>

#include "trainer/cost/hardware.h"
#include "trainer/sim/inference_sizing.h"
#include "trainer/sim/validation.h"

namespace joule::sim {
namespace fs = std::filesystem;
namespace {

// The seed study's inference experiment, as published: a rate of 1,000,000 LayoutLM inferences per hour served by Inf1
// and by "comparable" GPU instances optimised for inference. Its instance types are not named; its own figures fit
// inf1.2xlarge and g4dn.2xlarge (6 x USD 0.362 = 2.17 per million; against 33 x USD 0.752, 91 % less).
constexpr double kRatePerHour = 1e6, kInf1Instances = 6, kGpuInstances = 33, kThroughputRatio = 6.3,
                 kEnergyRatio = 1 - 0.92, kCostRatio = 1 - 0.91, kUsdPerMillionInf1 = 2.0;
constexpr const char* kStudy = "AWS ML blog (the seed article): LayoutLM, 1,000,000 inferences per hour, Inf1 vs GPU";
constexpr const char* kInf1 = "inf1.2xlarge";
constexpr const char* kGpu = "g4dn.2xlarge";

cost::InstanceProfile profile(const std::string& instance, const std::string& config_dir) {
  return cost::load_instance_profile(instance, inference_profile_dir(config_dir));
}

FleetSizing size(const cost::InstanceProfile& p, const InferenceWorkload& w, const std::string& config_dir) {
  return size_fleet(p, published_rates(p, w, (fs::path(config_dir) / "models").string()), w);
}

InferenceWorkload workload(const std::string& model, int64_t seq_len, const std::string& config_dir) {
  InferenceWorkload w;
  w.model_name = model;
  w.model = models::load_config(model, (fs::path(config_dir) / "models").string());
  w.seq_len = seq_len;
  w.rate_per_hour = kRatePerHour;
  w.headroom = 0;  // the study states none
  w.grid_g_per_kwh = 0;
  return w;
}

}  // namespace

std::vector<ValidationCase> inference_validation_cases(const std::string& config_dir) {
  std::vector<ValidationCase> cases;
  // The study: LayoutLM-base (BERT-base's FLOPs plus the box embeddings' lookups) at its longest input, 512 tokens.
  const InferenceWorkload study = workload("layoutlm-base", 512, config_dir);
  const cost::InstanceProfile pi = profile(kInf1, config_dir), pg = profile(kGpu, config_dir);
  const FleetSizing inf1 = size(pi, study, config_dir), gpu = size(pg, study, config_dir);
  const std::string fleets = std::string(" (") + kInf1 + " vs " + kGpu + ", layoutlm-base, 512 tokens)";
  cases.push_back({"Inf1 instances for the rate (inf1.2xlarge, layoutlm-base, 512 tokens)", "instances",
                   "independent: Hugging Face's one-stream BERT-base run at 512 tokens on an inf1.2xlarge; no headroom",
                   kStudy, kInf1Instances, static_cast<double>(inf1.instances)});
  cases.push_back({"USD per million inferences on Inf1 (inf1.2xlarge)", "USD",
                   "independent: the predicted fleet at the profile's On-Demand price", kStudy, kUsdPerMillionInf1,
                   inf1.usd_per_million});
  cases.push_back({"GPU instances for the rate (g4dn.2xlarge, layoutlm-base, 512 tokens)", "instances",
                   "independent: NVIDIA's TensorRT FP16 T4 figure, scaled by FLOPs to 512 tokens", kStudy,
                   kGpuInstances, static_cast<double>(gpu.instances)});
  cases.push_back({"Inf1 / GPU throughput per instance" + fleets, "ratio", "independent", kStudy, kThroughputRatio,
                   inf1.rate.inferences_per_s / gpu.rate.inferences_per_s});
  cases.push_back({"Inf1 / GPU instances" + fleets, "ratio", "independent", kStudy, kInf1Instances / kGpuInstances,
                   static_cast<double>(inf1.instances) / gpu.instances});
  cases.push_back({"Inf1 / GPU energy per inference" + fleets, "ratio",
                   "independent; rests on the assumed Inferentia power (AWS publishes none)", kStudy, kEnergyRatio,
                   inf1.kwh_per_million / gpu.kwh_per_million});
  cases.push_back({"Inf1 / GPU cost per inference" + fleets, "ratio", "independent", kStudy, kCostRatio,
                   inf1.usd_per_million / gpu.usd_per_million});
  // The same ratios for the study's own fleets (6 and 33 instances): what the power model and the prices say given
  // its instance counts, the GPU fleet taken as fully busy (33 instances sized for the rate).
  {
    const double inf1_busy = kRatePerHour / 3600 / (kInf1Instances * inf1.rate.inferences_per_s);
    cases.push_back({"Inf1 / GPU energy at the study's fleets (6 x inf1.2xlarge, 33 x g4dn.2xlarge)", "ratio",
                     "the study's instance counts; rests on the assumed Inferentia power and a busy T4", kStudy,
                     kEnergyRatio,
                     kInf1Instances * pi.power_w(inf1_busy) * pi.pue / (kGpuInstances * pg.power_w(1.0) * pg.pue)});
    cases.push_back(
        {"Inf1 / GPU cost at the study's fleets (6 x inf1.2xlarge, 33 x g4dn.2xlarge)", "ratio",
         "consistent by construction: the price ratio of the instance types argued from the study's figures", kStudy,
         kCostRatio, kInf1Instances * pi.usd_per_hour / (kGpuInstances * pg.usd_per_hour)});
  }
  // ExaDeploy's Inferentia write-up: bert-base-cased-finetuned-mrpc on one inf1.xlarge, and CPU : Inferentia : GPU
  // serving priced at 1 : 2 : 4 from the On-Demand prices of c5.xlarge, inf1.xlarge and g4dn.xlarge.
  const std::string exa = "ExaDeploy (Exafunction) Inferentia write-up; page not retrieved: unverified";
  const cost::InstanceProfile inf1_xlarge = profile("inf1.xlarge", config_dir);
  const FleetSizing mrpc = size(inf1_xlarge, workload("bert-base", 128, config_dir), config_dir);
  cases.push_back({"bert-base-cased-finetuned-mrpc on one inf1.xlarge, 128 tokens", "inf/s",
                   "independent: AWS Neuron's published run of the same model and instance (Neuron 2.20.0, batch 4)",
                   exa, 1140, mrpc.rate.inferences_per_s});
  const double c5 = profile("c5.xlarge", config_dir).usd_per_hour;
  cases.push_back({"inf1.xlarge / c5.xlarge On-Demand price", "ratio", "the profiles' prices", exa, 2,
                   inf1_xlarge.usd_per_hour / c5});
  cases.push_back({"g4dn.xlarge / c5.xlarge On-Demand price", "ratio", "the profiles' prices", exa, 4,
                   profile("g4dn.xlarge", config_dir).usd_per_hour / c5});
  return cases;
}

}  // namespace joule::sim
