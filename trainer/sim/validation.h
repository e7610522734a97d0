// The cluster performance model checked against every published figure at hand (VALIDATION.md, generated from
// these cases and checked by a unit test): each case says whether it is a calibration (0 by construction), an
// independent prediction, or consistent by construction. No LibTorch.
#pragma once

#include <string>
#include <vector>

#include "trainer/sim/perf_model.h"

namespace joule::sim {

struct ValidationCase {
  std::string name, unit, basis, source;
  double published = 0, predicted = 0;
  double relative_error() const { return (predicted - published) / published; }
};

// Every case, recomputed from the profiles and presets under `config_dir` (configs/).
std::vector<ValidationCase> validation_cases(const std::string& config_dir);
std::string validation_table(const std::vector<ValidationCase>& cases);  // the Markdown table of VALIDATION.md

// The inference half's cases (VALIDATION.md's second table): the seed study's inference experiment (LayoutLM at
// 1,000,000 inferences per hour on Inf1 against a GPU fleet) and other published inference figures, each predicted
// by `joule plan --inference` (trainer/sim/inference_sizing.h) from the inference profiles under `config_dir`.
std::vector<ValidationCase> inference_validation_cases(const std::string& config_dir);

// The seed study (AWS Machine Learning Blog, "Reduce energy consumption of your machine learning workloads by up to
// 90% with AWS purpose-built accelerators"): BERT-Large phase 1, 450M sequences, 16 x trn1.32xlarge against 16 x
// p4d.24xlarge. It publishes each cluster's hours and dollars and their ratios (below); its GPU rate matches NVIDIA's
// TF32 recipe, not AMP (VALIDATION.md). The model's predictions of the same cluster: trn1 in
// bf16 against p4d in TF32 (the study's comparison) and in bf16 (what changes with NVIDIA's AMP recipe).
struct StudyComparison {
  // The study's published figures (the article's text): each cluster's hours and dollars for the whole run, and its
  // ratios, trn1 against p4d: 43 % less time, 62 % less cost, about 29 % less energy, 1.7x the sequences per hour.
  static constexpr double kTrn1Hours = 2.3, kP4dHours = 4.0, kTrn1Usd = 787, kP4dUsd = 2091;
  static constexpr double kTimeReduction = 0.43, kCostReduction = 0.62, kEnergyReduction = 0.29;
  static constexpr double kSeqPerHourRatio = 1.7;
  int nodes = 16;
  double sequences = 450e6;
  StepPrediction trn1, p4d_tf32, p4d_bf16;
};
StudyComparison study_comparison(const std::string& config_dir);
// A few lines a reader follows without VALIDATION.md: the study's published figures beside the model's with the error
// of each, the model's energy, then p4d in bf16.
std::string study_text(const StudyComparison& study);

}  // namespace joule::sim
