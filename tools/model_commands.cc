#include "tools/model_commands.h"

#include <cstdio>
#include <filesystem>
#include <sstream>

#include "data/hdf5.h"
#include "launch/cpu_allocator.h"
#include "launch/cpu_isa.h"
#include "launch/process.h"
#include "launch/runtime.h"
#include "launch/util/error.h"
#include "launch/util/file_io.h"
#include "launch/util/format.h"
#include "models/bert.h"
#include "models/encoder_model.h"
#include "models/infer/infer.h"
#include "models/model_dir.h"
#include "models/precision.h"
#include "models/safetensors.h"
#include "tools/config_dir.h"

namespace joule::tools {
namespace {

std::string with_commas(int64_t n) { return grouped(static_cast<double>(n)); }

std::string row(const std::string& name, int64_t n) {
  char buf[160];
  std::snprintf(buf, sizeof buf, "  %-40s %16s\n", name.c_str(), with_commas(n).c_str());
  return buf;
}

}  // namespace

models::BertConfig resolve_model_config(const std::string& arg) {
  return models::load_config(arg, config_dir() + "/models");
}

std::string model_info(const std::string& arg) {
  const models::BertConfig c = resolve_model_config(arg);
  const models::ParameterCounts p = models::parameter_counts(c);
  models::BertForPreTraining model(c);
  int64_t instantiated = 0;
  for (const auto& [name, t] : model->hf_named_parameters()) instantiated += t.numel();
  if (instantiated != p.total())
    throw joule::InternalError("model info: instantiated model has " + std::to_string(instantiated) +
                               " parameters but the closed form gives " + std::to_string(p.total()));

  std::ostringstream out;
  out << "BertForPreTraining: " << c.num_hidden_layers << " layers, hidden " << c.hidden_size << ", "
      << c.num_attention_heads << " heads, intermediate " << c.intermediate_size << ", vocab " << c.vocab_size
      << ", positions " << c.max_position_embeddings << "\n";
  out << row("embeddings", p.embeddings);
  out << row("encoder (" + std::to_string(c.num_hidden_layers) + " x " + with_commas(p.per_layer) + ")", p.encoder);
  out << row("pooler", p.pooler);
  out << row("MLM head (decoder tied to embeddings)", p.mlm_head);
  out << row("NSP head", p.nsp_head);
  out << row("total", p.total());
  char mb[96];
  std::snprintf(mb, sizeof mb, "  %-40s %13.1f MB\n", "fp32 weights", p.total() * 4.0 / 1e6);
  out << mb;

  const std::filesystem::path weights = std::filesystem::path(arg) / "model.safetensors";
  if (std::filesystem::is_directory(arg) && std::filesystem::exists(weights)) {
    auto file = models::safetensors::File::open(weights.string());
    int64_t stored = 0;
    std::map<std::string, int64_t> by_dtype;
    for (const auto& t : file.tensors()) {
      stored += t.numel();
      by_dtype[models::safetensors::dtype_name(t.dtype)] += t.numel();
    }
    out << "model.safetensors: " << file.tensors().size() << " tensors, " << with_commas(stored) << " values (";
    bool first = true;
    for (const auto& [d, n] : by_dtype) out << (first ? "" : ", ") << d << " " << with_commas(n), first = false;
    out << ")\n";
  }
  return out.str();
}

std::string model_init(const std::string& config_arg, uint64_t seed, const std::string& out_dir,
                       const std::string& dtype, const std::string& architecture, int64_t labels) {
  const models::BertConfig c = resolve_model_config(config_arg);
  if (dtype != "F32" && dtype != "F16" && dtype != "BF16")
    throw joule::UsageError("--dtype: unsupported dtype '" + dtype + "'; valid: F32, F16, BF16");
  const auto d = models::safetensors::dtype_from_name(dtype, "--dtype");
  // Built beside --out and swapped in whole: an interrupted init leaves no half model (what --out may replace is the
  // command line's to say: check_replacing).
  const std::string dir = std::filesystem::path(out_dir).lexically_normal().string();
  joule::StagedDirectory staged(out_dir);
  int64_t parameters = models::parameter_counts(c).total();
  std::string what = "BertForPreTraining";
  if (architecture.empty() || architecture == "BertForPreTraining") {
    models::BertForPreTraining model(c, seed);
    staged.fill([&](const std::string& dir) { models::save_model_dir(model, dir, d); });
  } else {  // an inference class (models/encoder_model.h), in F32
    if (dtype != "F32")
      throw joule::UsageError("--dtype " + dtype + ": an inference model directory is written in F32");
    const models::Architecture& a = models::architecture_named(architecture);
    const int64_t n = labels > 0 ? labels : c.labels.empty() ? 2 : static_cast<int64_t>(c.labels.size());
    models::EncoderModel model(c, a, n, seed);
    staged.fill([&](const std::string& dir) { models::save_encoder_model(model, dir); });
    parameters = 0;
    for (const auto& [name, t] : model.hf_named_parameters()) parameters += t.numel();
    what = a.name;
  }
  staged.commit();
  return "wrote " + (std::filesystem::path(dir) / "config.json").string() + " and " +
         (std::filesystem::path(dir) / "model.safetensors").string() + " (" + what + ", " + with_commas(parameters) +
         " parameters, " + dtype + ", seed " + std::to_string(seed) + ")";
}

std::string model_forward(const std::string& dir, const std::string& architecture, int64_t labels,
                          const std::string& inputs, const std::string& out, models::PrecisionSetting precision) {
  namespace st = models::safetensors;
  models::LoadedEncoderModel loaded = models::load_encoder_model(dir, architecture, labels);
  const models::PrecisionChoice choice = models::infer::use_precision(loaded.model, precision).choice;
  const st::File file = st::File::open(inputs);
  auto input = [&](const char* name, bool required) -> torch::Tensor {
    const st::TensorInfo* t = file.find(name);
    if (!t) {
      if (required) throw joule::UsageError(inputs + " has no tensor '" + name + "'");
      return {};
    }
    if (t->dtype != st::DType::I64 && t->dtype != st::DType::I32)
      throw joule::UsageError(inputs + ": tensor '" + name + "' is " + st::dtype_name(t->dtype) +
                              "; ids are I64 or I32");
    const auto type = t->dtype == st::DType::I64 ? torch::kInt64 : torch::kInt32;
    return torch::from_blob(const_cast<uint8_t*>(file.data(*t)), t->shape, torch::TensorOptions().dtype(type))
        .to(torch::kInt64);
  };
  models::EncoderInput in{input("input_ids", true),
                          input("token_type_ids", false),
                          input("attention_mask", true),
                          input("bbox", loaded.model.config().model_type == "layoutlm"),
                          {},
                          {}};
  // The inputs' shapes and values are the file's to get right: every refusal names it and what the model takes.
  const std::string takes = "give tensors the model in " + dir +
                            " takes: [batch, length] ids below its config.json's vocab_size and type_vocab_size, "
                            "length up to max_position_embeddings (bbox: [batch, length, 4])";
  if (in.input_ids.dim() != 2 || !in.attention_mask.sizes().equals(in.input_ids.sizes()) ||
      (in.token_type_ids.defined() && !in.token_type_ids.sizes().equals(in.input_ids.sizes())))
    throw joule::UsageError(inputs + ": input_ids, attention_mask and token_type_ids must all be [batch, length]",
                            takes);
  if (in.bbox.defined() && (in.bbox.dim() != 3 || in.bbox.size(0) != in.input_ids.size(0) ||
                            in.bbox.size(1) != in.input_ids.size(1) || in.bbox.size(2) != 4))
    throw joule::UsageError(inputs + ": bbox must be [batch, length, 4]", takes);
  if (const int64_t limit = loaded.model.config().max_position_embeddings; in.input_ids.size(1) > limit)
    throw joule::UsageError(inputs + ": a length of " + std::to_string(in.input_ids.size(1)) +
                                " positions; the model in " + dir + " takes at most " + std::to_string(limit) +
                                " (max_position_embeddings)",
                            takes);
  models::EncoderOutput o;
  try {
    o = loaded.model.forward(in);
  } catch (const joule::Error& e) {
    throw joule::UsageError(inputs + ": " + e.what(), takes);
  }
  std::vector<std::pair<std::string, torch::Tensor>> results = {{"hidden", o.hidden}};
  if (o.pooled.defined()) results.emplace_back("pooled", o.pooled);
  if (o.logits.defined()) results.emplace_back("logits", o.logits);
  std::vector<st::TensorToWrite> tensors;
  for (auto& [name, t] : results) {
    t = t.to(torch::kFloat).contiguous();
    tensors.push_back({name, st::DType::F32, t.sizes().vec(), t.data_ptr()});
  }
  st::write(out, tensors);
  std::string lines;
  for (const std::string& note : loaded.loading_notes) lines += "note: " + note + "\n";
  return lines + loaded.model.architecture().name + " (" + choice.reason + "): wrote " + out + "\n";
}

std::string version_report(std::string* blas_warning, bool with_gemm_path) {
  const launch::BlasInfo blas = launch::detect_blas();
  std::ostringstream out;
  out << "joule " << JOULE_VERSION << "\n"
      << "  LibTorch " << launch::torch_version() << "\n"
      << "  MPI      " << launch::mpi_library_version() << "\n"
      << "  HDF5     " << data::hdf5_version().substr(5) << "\n"
      << "  BLAS     " << blas.description << " (" << blas.library << ")\n"
      << (with_gemm_path ? "  GEMM     " + launch::choose_gemm_path(launch::Fp32GemmSetting::automatic).line() + "\n"
                         : std::string())
      << "  cores    " << launch::physical_cores() << " available to this process\n"
      << "  memory   "
      << (launch::caching_cpu_allocator_active()
              ? "caching CPU allocator for tensors of 1 MiB or more (JOULE_CPU_CACHING=0 turns it off)"
              : "LibTorch's default CPU allocator (JOULE_CPU_CACHING=0)")
      << "\n";
  if (blas_warning) {
    blas_warning->clear();
    if (blas.is_reference || blas.description == "unrecognized BLAS")
      *blas_warning = "WARNING: LibTorch's matmuls run on " + blas.description + " (" + blas.library +
                      "), about 20x slower than OpenBLAS.\n"
                      "         Install OpenBLAS and select it: apt-get install libopenblas0-pthread && "
                      "update-alternatives --auto libblas.so.3-x86_64-linux-gnu\n";
  }
  return out.str();
}

}  // namespace joule::tools
