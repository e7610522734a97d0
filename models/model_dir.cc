#include "models/model_dir.h"
#include "launch/util/file_io.h"

#include <filesystem>
#include <fstream>
#include <map>

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

void save_model_dir(const BertForPreTraining& model, const std::string& dir, st::DType dtype) {
  if (dtype != st::DType::F32 && dtype != st::DType::F16 && dtype != st::DType::BF16)
    throw joule::UsageError(std::string("model weights are saved as F32, F16 or BF16, not ") + st::dtype_name(dtype));
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) throw_write_error(dir, "creating the model directory", ec.value());
  std::vector<torch::Tensor> keep_alive;
  std::vector<st::TensorToWrite> tensors;
  for (const auto& [name, p] : model->hf_named_parameters()) {
    torch::Tensor t = p.detach().to(torch::kCPU, to_torch(dtype)).contiguous();
    keep_alive.push_back(t);
    tensors.push_back({name, dtype, t.sizes().vec(), t.data_ptr()});
  }
  st::write(dir + "/model.safetensors", tensors);
  write_file_atomically(dir + "/config.json", model->config().to_json_text());
}

void load_weights(BertForPreTraining& model, const std::string& path) {
  st::File file = st::File::open(path);
  std::map<std::string, torch::Tensor> params;
  for (const auto& [name, p] : model->hf_named_parameters()) params.emplace(name, p);

  auto fail = [&](const std::string& what) { throw st::FormatError(path + ": " + what); };
  std::map<std::string, const st::TensorInfo*> found;
  for (const st::TensorInfo& t : file.tensors()) {
    if (params.count(t.name)) {
      found[t.name] = &t;
    } else if (t.name != "bert.embeddings.position_ids" && t.name != "cls.predictions.decoder.weight" &&
               t.name != "cls.predictions.decoder.bias") {
      fail("tensor '" + t.name + "' is not a parameter of BertForPreTraining (" + std::to_string(params.size()) +
           " parameters; is this a model of another architecture?)");
    }
  }
  for (const auto& [name, p] : params) {
    auto it = found.find(name);
    if (it == found.end()) fail("missing tensor '" + name + "'");
    if (it->second->shape != p.sizes().vec())
      fail("tensor '" + name + "' has shape " + shape_str(it->second->shape) + " but the model (config.json) expects " +
           shape_str(p.sizes()));
    if (it->second->dtype == st::DType::I64 || it->second->dtype == st::DType::I32)
      fail("tensor '" + name + "' is " + st::dtype_name(it->second->dtype) + "; weights must be floating point");
  }
  torch::NoGradGuard no_grad;
  for (auto& [name, p] : params) p.copy_(view_of(file, *found[name]));

  // Redundant tied copies, when a file carries them, must agree with what they are tied to.
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

BertForPreTraining load_model_dir(const std::string& dir) {
  BertConfig config = BertConfig::from_json_file(dir + "/config.json");
  BertForPreTraining model(config);
  load_weights(model, dir + "/model.safetensors");
  return model;
}

}  // namespace joule::models
