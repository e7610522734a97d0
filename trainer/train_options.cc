#include "trainer/train_options.h"

#include "launch/util/format.h"

namespace joule::trainer {

std::vector<OptionField> TrainOptions::fields() {
  return {{"steps", &steps, OptionRange{0, 1LL << 40}, "0: from train.target_sequences"},
          {"target_sequences", &target_sequences, OptionRange{0, 1LL << 50}, "0: train.steps x the global batch"},
          {"micro_batch", &micro_batch, OptionRange{1, 1 << 20}},
          {"accumulation", &accumulation, OptionRange{1, 1 << 20}},
          {"global_batch", &global_batch, OptionRange{0, 1LL << 40}, "0: micro_batch x accumulation x ranks"},
          {"seq_len", &seq_len, OptionRange{0, 65536}, "0: the shards'"},
          {"threads", &threads, OptionRange{0, 4096}, "0: the node's cores / local ranks"},
          {"seed", &seed, at_least(0)},
          {"log_every_steps", &log_every_steps, at_least(1)},
          {"throughput_warmup_steps", &throughput_warmup_steps, at_least(0)},
          {"max_nonfinite_steps", &max_nonfinite_steps, at_least(1)},
          {"loss_spike_factor", &loss_spike_factor, OptionRange{0, 1000}, "0: off; else above 1"},
          {"collective_timeout_seconds", &collective_timeout_seconds, OptionRange{0, 1e7, true, false}},
          {"precision", option_choice(&precision, models::kPrecisionWords)},
          {"fp32_gemm", option_choice(&fp32_gemm, launch::kFp32GemmWords)},
          {"device", option_choice(&device, launch::kDeviceWords)},
          {"progress", option_choice(&progress, kProgressWords)}};
}

void TrainOptions::validate() const {
  check_section_ranges(*this);
  if (loss_spike_factor > 0 && loss_spike_factor <= 1)
    throw RunConfigError("run config: train.loss_spike_factor " + format_number("%g", loss_spike_factor) +
                         " would call every step a spike: 0 (off) or above 1");
  if (global_batch > 0 && global_batch % micro_batch != 0)
    throw RunConfigError("run config: train.global_batch " + std::to_string(global_batch) +
                         " is not divisible by train.micro_batch " + std::to_string(micro_batch));
}

std::vector<OptionField> RunOptions::fields() { return {{"dir", &dir}}; }

}  // namespace joule::trainer
