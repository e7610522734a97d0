#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "models/bert.h"
#include "models/model_dir.h"
#include "models/safetensors.h"
#include "test_util.h"

namespace st = joule::models::safetensors;
using joule::test::TempDir;

namespace {

// Builds a file by hand: header text (unpadded) + data bytes.
std::string make_file(const std::string& header, const std::string& data, int64_t declared_len = -1) {
  uint64_t len = declared_len >= 0 ? static_cast<uint64_t>(declared_len) : header.size();
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((len >> (8 * i)) & 0xff);
  return out + header + data;
}

// The error message of opening `bytes` as a file, or "" when it opens.
std::string open_error(const TempDir& dir, const std::string& bytes) {
  const std::string path = dir.file("bad.safetensors");
  joule::test::write_file(path, bytes);
  try {
    st::File::open(path);
  } catch (const st::FormatError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST(Safetensors, RoundTripIsBitExactForEveryFloatDtype) {
  TempDir dir;
  std::mt19937 rng(7);
  std::vector<uint32_t> f32(37 * 5);
  std::vector<uint16_t> f16(64), bf16(3 * 7 * 2);
  for (auto& v : f32) v = rng();  // arbitrary bit patterns, NaN payloads included
  for (auto& v : f16) v = static_cast<uint16_t>(rng());
  for (auto& v : bf16) v = static_cast<uint16_t>(rng());
  std::vector<st::TensorToWrite> in = {{"a.weight", st::DType::F32, {37, 5}, f32.data()},
                                       {"b", st::DType::F16, {64}, f16.data()},
                                       {"c.bias", st::DType::BF16, {3, 7, 2}, bf16.data()},
                                       {"empty", st::DType::F32, {0, 4}, nullptr}};
  const std::string path = dir.file("x.safetensors");
  st::write(path, in, {{"format", "pt"}, {"note", "joule"}});

  st::File f = st::File::open(path);
  ASSERT_EQ(f.tensors().size(), 4u);
  EXPECT_EQ(f.header().metadata.at("format"), "pt");
  EXPECT_EQ(f.header().metadata.at("note"), "joule");
  EXPECT_EQ(f.header().data_start % 8, 0u);  // header padded to 8 bytes
  const st::TensorInfo* a = f.find("a.weight");
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(a->dtype, st::DType::F32);
  EXPECT_EQ(a->shape, (std::vector<int64_t>{37, 5}));
  EXPECT_EQ(std::memcmp(f.data(*a), f32.data(), f32.size() * 4), 0);
  EXPECT_EQ(std::memcmp(f.data(*f.find("b")), f16.data(), f16.size() * 2), 0);
  EXPECT_EQ(f.find("c.bias")->dtype, st::DType::BF16);
  EXPECT_EQ(std::memcmp(f.data(*f.find("c.bias")), bf16.data(), bf16.size() * 2), 0);
  EXPECT_EQ(f.find("empty")->bytes(), 0u);
  EXPECT_EQ(f.find("missing"), nullptr);

  // Writing the same tensors again gives the same bytes.
  const std::string again = dir.file("y.safetensors");
  st::write(again, in, {{"format", "pt"}, {"note", "joule"}});
  EXPECT_EQ(joule::test::read_file(path), joule::test::read_file(again));
}

TEST(Safetensors, MalformedFilesAreRejectedNamingFileAndProblem) {
  TempDir dir;
  const std::string ok_header = R"({"t":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  const std::string eight(8, '\1');
  ASSERT_EQ(open_error(dir, make_file(ok_header, eight)), "");

  struct Case {
    const char* what;
    std::string bytes;
    const char* expect;
  } cases[] = {
      {"empty file", "", "truncated"},
      {"shorter than the length field", std::string(5, '\0'), "truncated"},
      {"header length past the end", make_file(ok_header, eight, 5000), "runs past the end of the file"},
      {"truncated data", make_file(ok_header, std::string(4, '\1')), "out of range"},
      {"header too large", make_file(ok_header, eight, (1ll << 40)), "exceeds"},
      {"not JSON", make_file("{nonsense", ""), "not valid JSON"},
      {"not an object", make_file("[1, 2, 3]  ", ""), "does not start with '{'"},
      {"unknown dtype", make_file(R"({"t":{"dtype":"F8","shape":[2],"data_offsets":[0,2]}})", "ab"),
       "unsupported dtype 'F8'"},
      {"shape/byte-count mismatch", make_file(R"({"t":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", eight),
       "needs 12 bytes but data_offsets span 8"},
      {"offsets out of range", make_file(R"({"t":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}})", eight),
       "out of range"},
      {"overlapping tensors",
       make_file(
           R"({"t":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"u":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
           eight),
       "overlaps"},
      {"gap between tensors", make_file(R"({"t":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", eight),
       "belong to no tensor"},
      {"trailing bytes", make_file(ok_header, eight + "xxxx"), "trailing bytes"},
      {"duplicate names",
       make_file(
           R"({"t":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"t":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
           eight),
       "duplicate tensor name 't'"},
      {"reversed offsets", make_file(R"({"t":{"dtype":"F32","shape":[0],"data_offsets":[8,0]}})", eight), "reversed"},
      {"negative shape", make_file(R"({"t":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", eight),
       "non-negative"},
      {"shape overflow",
       make_file(R"({"t":{"dtype":"F32","shape":[4294967296,4294967296,16],"data_offsets":[0,8]}})", eight),
       "overflows"},
      {"entry missing fields", make_file(R"({"t":{"dtype":"F32"}})", ""), "dtype, shape and data_offsets"},
      {"metadata not strings", make_file(R"({"__metadata__":{"a":1}})", ""), "__metadata__"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    const std::string e = open_error(dir, c.bytes);
    EXPECT_NE(e.find("bad.safetensors"), std::string::npos) << e;
    EXPECT_NE(e.find(c.expect), std::string::npos) << e;
  }
  EXPECT_NE(open_error(dir, "").find("bad.safetensors"), std::string::npos);
  try {
    st::File::open(dir.file("does-not-exist.safetensors"));
    FAIL();
  } catch (const st::FormatError& e) {
    EXPECT_NE(std::string(e.what()).find("does-not-exist.safetensors: cannot open"), std::string::npos);
  }
}

TEST(Safetensors, WriterRefusesDuplicateNames) {
  TempDir dir;
  float x = 1;
  EXPECT_THROW(st::write(dir.file("d.safetensors"), {{"a", st::DType::F32, {1}, &x}, {"a", st::DType::F32, {1}, &x}}),
               st::FormatError);
}

namespace {

joule::models::BertConfig small_config() { return joule::test::small_bert(97, 32, 4, 64, 40); }

}  // namespace

TEST(ModelDir, SaveAndLoadIsBitExactWithHuggingFaceNames) {
  TempDir dir;
  joule::models::BertForPreTraining model(small_config(), 3);
  joule::models::save_model_dir(model, dir.path());

  st::File f = st::File::open(dir.file("model.safetensors"));
  EXPECT_NE(f.find("bert.embeddings.word_embeddings.weight"), nullptr);
  EXPECT_NE(f.find("bert.encoder.layer.1.attention.self.query.weight"), nullptr);
  EXPECT_NE(f.find("bert.encoder.layer.0.attention.output.LayerNorm.bias"), nullptr);
  EXPECT_NE(f.find("cls.predictions.transform.dense.weight"), nullptr);
  EXPECT_NE(f.find("cls.predictions.bias"), nullptr);
  EXPECT_NE(f.find("cls.seq_relationship.weight"), nullptr);
  EXPECT_EQ(f.find("cls.predictions.decoder.weight"), nullptr);  // tied: stored once, as HF does
  EXPECT_EQ(f.header().metadata.at("format"), "pt");

  joule::models::BertForPreTraining loaded = joule::models::load_model_dir(dir.path());
  auto a = model->hf_named_parameters(), b = loaded->hf_named_parameters();
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].first, b[i].first);
    EXPECT_TRUE(torch::equal(a[i].second, b[i].second)) << a[i].first;
  }
}

TEST(ModelDir, HalfPrecisionSavesLoadWithinRounding) {
  for (auto dtype : {st::DType::F16, st::DType::BF16}) {
    TempDir dir;
    joule::models::BertForPreTraining model(small_config(), 4);
    joule::models::save_model_dir(model, dir.path(), dtype);
    EXPECT_EQ(st::File::open(dir.file("model.safetensors")).find("bert.pooler.dense.weight")->dtype, dtype);
    auto loaded = joule::models::load_model_dir(dir.path());
    auto a = model->hf_named_parameters(), b = loaded->hf_named_parameters();
    for (size_t i = 0; i < a.size(); ++i)
      EXPECT_TRUE(torch::allclose(a[i].second, b[i].second, 1e-2, 1e-4)) << a[i].first;
  }
}

TEST(ModelDir, WrongShapesMissingAndForeignTensorsAreErrors) {
  TempDir dir;
  joule::models::BertForPreTraining model(small_config(), 5);
  joule::models::save_model_dir(model, dir.path());
  const std::string path = dir.file("model.safetensors");

  auto load_error = [&](joule::models::BertConfig c) {
    joule::models::BertForPreTraining other(c);
    try {
      joule::models::load_weights(other, path);
    } catch (const st::FormatError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  auto wider = small_config();
  wider.intermediate_size = 48;
  std::string e = load_error(wider);
  EXPECT_NE(e.find("model.safetensors"), std::string::npos) << e;
  EXPECT_NE(
      e.find("bert.encoder.layer.0.intermediate.dense.bias' has shape [64] but the model (config.json) expects [48]"),
      std::string::npos)
      << e;

  auto deeper = small_config();
  deeper.num_hidden_layers = 3;
  e = load_error(deeper);
  EXPECT_NE(e.find("missing tensor 'bert.encoder.layer.2."), std::string::npos) << e;

  auto shallower = small_config();
  shallower.num_hidden_layers = 1;
  e = load_error(shallower);
  EXPECT_NE(e.find("'bert.encoder.layer.1."), std::string::npos) << e;
  EXPECT_NE(e.find("is not a parameter"), std::string::npos) << e;
}

TEST(ModelDir, AcceptsRedundantTiedCopiesOnlyWhenTheyAgree) {
  TempDir dir;
  joule::models::BertForPreTraining model(small_config(), 6);
  std::vector<torch::Tensor> keep;
  std::vector<st::TensorToWrite> tensors;
  for (const auto& [name, p] : model->hf_named_parameters()) {
    keep.push_back(p.detach().contiguous());
    tensors.push_back({name, st::DType::F32, p.sizes().vec(), keep.back().data_ptr()});
  }
  torch::Tensor decoder = model->hf_named_parameters()[0].second.detach().clone();  // word embeddings
  ASSERT_EQ(model->hf_named_parameters()[0].first, "bert.embeddings.word_embeddings.weight");
  tensors.push_back({"cls.predictions.decoder.weight", st::DType::F32, decoder.sizes().vec(), decoder.data_ptr()});
  st::write(dir.file("tied.safetensors"), tensors);
  joule::models::BertForPreTraining other(small_config(), 99);
  EXPECT_NO_THROW(joule::models::load_weights(other, dir.file("tied.safetensors")));

  decoder[1][1] += 1.0f;
  st::write(dir.file("untied.safetensors"), tensors);
  try {
    joule::models::load_weights(other, dir.file("untied.safetensors"));
    FAIL() << "a decoder that differs from the embeddings must be refused";
  } catch (const st::FormatError& e) {
    EXPECT_NE(std::string(e.what()).find("differs from 'bert.embeddings.word_embeddings.weight'"), std::string::npos);
  }
}
