#include "models/model_dir.h"
#include "launch/util/file_io.h"
#include "launch/util/hash.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <numeric>
#include <set>

namespace joule::models {
namespace {

namespace st = safetensors;

torch::ScalarType to_torch(st::DType d) {
  switch (d) {
    case st::DType::F32:
      return torch::kFloat32;
    case st::DType::F16:
      return torch::kFloat16;
    case st::DType::BF16:
      return torch::kBFloat16;
    case st::DType::F64:
      return torch::kFloat64;
    case st::DType::I64:
      return torch::kInt64;
    case st::DType::I32:
      return torch::kInt32;
  }
  return torch::kFloat32;
}

// A CPU tensor viewing the mapped bytes (valid while `file` lives).
torch::Tensor view_of(const st::File& file, const st::TensorInfo& t) {
  return torch::from_blob(const_cast<uint8_t*>(file.data(t)), t.shape, torch::TensorOptions().dtype(to_torch(t.dtype)));
}

std::string shape_str(torch::IntArrayRef s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

}  // namespace

void write_weights(const std::vector<std::pair<std::string, torch::Tensor>>& named, const std::string& path,
                   st::DType dtype) {
  std::vector<torch::Tensor> keep_alive;
  std::vector<st::TensorToWrite> tensors;
  for (const auto& [name, p] : named) {
    torch::Tensor t = p.detach().to(torch::kCPU, to_torch(dtype)).contiguous();
    keep_alive.push_back(t);
    tensors.push_back({name, dtype, t.sizes().vec(), t.data_ptr()});
  }
  st::write(path, tensors);
}

void save_model_dir(const BertForPreTraining& model, const std::string& dir, st::DType dtype) {
  if (dtype != st::DType::F32 && dtype != st::DType::F16 && dtype != st::DType::BF16)
    throw joule::UsageError(std::string("model weights are saved as F32, F16 or BF16, not ") + st::dtype_name(dtype));
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) throw_write_error(dir, "creating the model directory", ec.value());
  write_weights(model->hf_named_parameters(), dir + "/model.safetensors", dtype);
  BertConfig config = model->config();  // what the directory holds, whatever config the model was built from
  config.architectures = {"BertForPreTraining"};
  config.labels.clear();
  write_file_atomically(dir + "/config.json", config.to_json_text());
}

WeightLoad load_matching(const std::vector<std::pair<std::string, torch::Tensor>>& params, const std::string& path,
                         const WeightMatch& match) {
  st::File file = st::File::open(path);
  auto fail = [&](const std::string& what) { throw st::FormatError(path + ": " + what); };
  WeightLoad out;
  std::vector<std::string> wanted;  // per parameter, the tensor it reads
  for (const auto& [name, p] : params) wanted.push_back(match.file_name ? match.file_name(name) : name);
  const std::set<std::string> read(wanted.begin(), wanted.end());
  for (const st::TensorInfo& t : file.tensors()) {
    if (read.count(t.name)) continue;
    if (!match.may_skip || !match.may_skip(t.name))
      throw st::FormatError(path + ": tensor '" + t.name + "' is not a parameter of " + match.model + " (" +
                                std::to_string(params.size()) + " parameters): a model of another architecture",
                            "give a " + match.model + " directory (config.json's \"architectures\" names it)");
    out.skipped.push_back(t.name);
  }
  std::vector<std::pair<torch::Tensor, const st::TensorInfo*>> copies;
  std::vector<size_t> by_name(params.size());  // checked in the order of the names: the first wrong one is named
  std::iota(by_name.begin(), by_name.end(), 0);
  std::sort(by_name.begin(), by_name.end(), [&](size_t a, size_t b) { return wanted[a] < wanted[b]; });
  for (size_t k : by_name) {
    const std::string& name = wanted[k];
    const torch::Tensor& p = params[k].second;
    const st::TensorInfo* t = file.find(name);
    if (!t) {
      if (match.may_keep && match.may_keep(params[k].first)) {
        out.kept.push_back(params[k].first);
        continue;
      }
      fail("missing tensor '" + name + "'");
    }
    if (t->shape != p.sizes().vec())
      fail("tensor '" + name + "' has shape " + shape_str(t->shape) + " but the model (config.json) expects " +
           shape_str(p.sizes()));
    if (t->dtype == st::DType::I64 || t->dtype == st::DType::I32)
      fail("tensor '" + name + "' is " + st::dtype_name(t->dtype) + "; weights must be floating point");
    copies.emplace_back(p, t);
  }
  torch::NoGradGuard no_grad;
  for (auto& [p, t] : copies) {
    p.copy_(view_of(file, *t));
    // A weight that is NaN or Inf makes every output NaN (a score of null, a loss of null): refused here, by name.
    if (!torch::isfinite(p).all().item<bool>())
      throw st::FormatError(path + ": tensor '" + t->name + "' holds " +
                                std::to_string((~torch::isfinite(p)).sum().item<int64_t>()) + " NaN or Inf value(s)",
                            "the weights are damaged (a run that diverged, or a broken copy): use an earlier "
                            "checkpoint's export, or the model's original files");
  }
  return out;
}

void load_weights(BertForPreTraining& model, const std::string& path) {
  const auto named = model->hf_named_parameters();
  WeightMatch match;
  match.model = "BertForPreTraining";
  match.may_skip = [](const std::string& t) {
    return t == "bert.embeddings.position_ids" || t == "cls.predictions.decoder.weight" ||
           t == "cls.predictions.decoder.bias";
  };
  load_matching(named, path, match);
  // Redundant tied copies, when a file carries them, must agree with what they are tied to.
  std::map<std::string, torch::Tensor> params(named.begin(), named.end());
  st::File file = st::File::open(path);
  auto fail = [&](const std::string& what) { throw st::FormatError(path + ": " + what); };
  const std::pair<const char*, const char*> tied[] = {
      {"cls.predictions.decoder.weight", "bert.embeddings.word_embeddings.weight"},
      {"cls.predictions.decoder.bias", "cls.predictions.bias"}};
  for (const auto& [copy, source] : tied) {
    const st::TensorInfo* t = file.find(copy);
    if (!t) continue;
    if (t->shape != params[source].sizes().vec() ||
        !view_of(file, *t).to(params[source].device(), params[source].dtype()).equal(params[source]))
      fail(std::string("tensor '") + copy + "' differs from '" + source + "', to which BertForPreTraining ties it");
  }
}

std::string model_vocab_checksum(const std::string& dir, const BertConfig& config) {
  if (!config.vocab_fnv1a64.empty()) return config.vocab_fnv1a64;
  const std::string vocab = dir + "/vocab.txt";
  std::error_code ec;
  return std::filesystem::is_regular_file(vocab, ec) ? joule::hex64(joule::fnv1a64_file(vocab)) : "";
}

BertForPreTraining load_model_dir(const std::string& dir) {
  BertConfig config = BertConfig::from_json_file(dir + "/config.json");
  BertForPreTraining model(config);
  load_weights(model, dir + "/model.safetensors");
  return model;
}

}  // namespace joule::models
