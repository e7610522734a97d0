#include "tools/serve/oip.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>

#include "launch/util/json_field.h"
#include "launch/util/utf8.h"

namespace joule::serve {
namespace {

using nlohmann::json;

struct Tensor {
  std::string name, datatype;
  std::vector<int64_t> shape;
  std::vector<const json*> data;  // flattened, row-major
};

// `data` flattened in row-major order; nested no deeper than a tensor's 3 dimensions (a body of "[[[[..." must not
// recurse a frame a bracket).
void flatten(const json& j, std::vector<const json*>& out, const std::string& input, int depth = 0) {
  if (!j.is_array()) return out.push_back(&j);
  if (depth == 3) throw BadRequest(input + ": \"data\" is nested deeper than 3 dimensions");
  for (const json& x : j) flatten(x, out, input, depth + 1);
}

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t k = 0; k < shape.size(); ++k) s += (k ? ", " : "") + std::to_string(shape[k]);
  return s + "]";
}

Tensor read_tensor(const json& j, size_t index) {
  const std::string where = "inputs[" + std::to_string(index) + "]";
  if (!j.is_object()) throw BadRequest(where + " must be an object {\"name\", \"shape\", \"datatype\", \"data\"}");
  for (const char* key : {"name", "shape", "datatype", "data"})
    if (!j.contains(key)) throw BadRequest(where + " has no \"" + key + "\"");
  Tensor t;
  if (!j.at("name").is_string()) throw BadRequest(where + ": \"name\" must be a string");
  t.name = j.at("name").get<std::string>();
  const std::string input = "input '" + t.name + "'";
  if (!j.at("datatype").is_string()) throw BadRequest(input + ": \"datatype\" must be a string");
  t.datatype = j.at("datatype").get<std::string>();
  const json& shape = j.at("shape");
  if (!shape.is_array() || shape.empty() || shape.size() > 3)
    throw BadRequest(input + ": \"shape\" must be a list of 1 to 3 sizes, found " + shape.dump());
  int64_t elements = 1;
  for (const json& d : shape) {
    if (!d.is_number_integer() || d.get<int64_t>() < 0 || d.get<int64_t>() > (int64_t{1} << 24))
      throw BadRequest(input + ": \"shape\" sizes must be integers in [0, 16777216], found " + shape.dump());
    t.shape.push_back(d.get<int64_t>());
    elements *= t.shape.back();
    if (elements > (int64_t{1} << 24)) throw BadRequest(input + ": shape " + shape.dump() + " is too large");
  }
  if (!j.at("data").is_array()) throw BadRequest(input + ": \"data\" must be a list");
  flatten(j.at("data"), t.data, input);
  if (static_cast<int64_t>(t.data.size()) != elements)
    throw BadRequest(input + ": shape " + shape_text(t.shape) + " holds " + std::to_string(elements) +
                     " elements, \"data\" has " + std::to_string(t.data.size()));
  return t;
}

// The tensor's shape as [rows, columns...] with a leading 1 optional: `dims` sizes after dropping it.
std::vector<int64_t> dims_of(const Tensor& t, size_t dims, const std::string& expected) {
  std::vector<int64_t> s = t.shape;
  if (s.size() == dims + 1 && s[0] == 1) s.erase(s.begin());
  if (s.size() != dims)
    throw BadRequest("input '" + t.name + "' must have shape " + expected + ", found " + shape_text(t.shape));
  return s;
}

void expect_datatype(const Tensor& t, const std::vector<std::string>& types) {
  if (std::find(types.begin(), types.end(), t.datatype) != types.end()) return;
  std::string list;
  for (const std::string& x : types) list += (list.empty() ? "" : " or ") + x;
  throw BadRequest("input '" + t.name + "' must be " + list + ", found datatype '" + t.datatype + "'");
}

const json& string_at(const Tensor& t, size_t k) {
  if (!t.data[k]->is_string())
    throw BadRequest("input '" + t.name + "' element " + std::to_string(k) + " must be a string, found " +
                     t.data[k]->dump().substr(0, 60));
  return *t.data[k];
}

double number_at(const Tensor& t, size_t k) {
  const json& v = *t.data[k];
  if (!v.is_number() || !std::isfinite(v.get<double>()))
    throw BadRequest("input '" + t.name + "' element " + std::to_string(k) + " must be a finite number, found " +
                     v.dump().substr(0, 60));
  if (t.datatype.rfind("INT", 0) == 0 && !v.is_number_integer())
    throw BadRequest("input '" + t.name + "' is " + t.datatype + ", element " + std::to_string(k) +
                     " is not an integer: " + v.dump());
  return v.get<double>();
}

std::vector<std::string> input_names(const ModelShape& m) {
  return m.layout ? std::vector<std::string>{"words", "boxes", "page"} : std::vector<std::string>{"text", "text_pair"};
}

std::vector<std::string> output_names(const ModelShape& m) {
  if (!m.token_head) return {"label", "score", "truncated"};
  if (m.layout) return {"labels", "scores", "truncated"};
  return {"tokens", "labels", "scores", "truncated"};
}

std::string names_text(const std::vector<std::string>& names) {
  std::string s;
  for (const std::string& n : names) s += (s.empty() ? "'" : ", '") + n + "'";
  return s;
}

const std::vector<std::string> kNumberTypes = {"INT64", "INT32", "FP32", "FP64"};

std::vector<json> text_examples(const std::map<std::string, Tensor>& inputs, const ModelShape& m) {
  if (!inputs.count("text")) throw BadRequest("no input 'text' (BYTES, shape [N]): " + m.architecture + " reads text");
  const Tensor& text = inputs.at("text");
  expect_datatype(text, {"BYTES"});
  const std::vector<int64_t> s = text.shape;
  if (!(s.size() == 1 || (s.size() == 2 && s[1] == 1)))
    throw BadRequest("input 'text' must have shape [N] or [N, 1], found " + shape_text(s));
  const int64_t n = s[0];
  if (n < 1) throw BadRequest("input 'text' holds no example");
  if (n > m.max_batch)
    throw BadRequest("input 'text' holds " + std::to_string(n) + " examples; this server takes at most " +
                     std::to_string(m.max_batch) + " a request (--max-batch)");
  const Tensor* pair = inputs.count("text_pair") ? &inputs.at("text_pair") : nullptr;
  if (pair) {
    expect_datatype(*pair, {"BYTES"});
    if (pair->data.size() != text.data.size())
      throw BadRequest("input 'text_pair' must have the shape of 'text' " + shape_text(s) + ", found " +
                       shape_text(pair->shape));
  }
  std::vector<json> out;
  for (size_t k = 0; k < text.data.size(); ++k) {
    json e = {{"text", string_at(text, k)}};
    if (pair) e["text_pair"] = string_at(*pair, k);
    out.push_back(std::move(e));
  }
  return out;
}

std::vector<json> layout_example(const std::map<std::string, Tensor>& inputs, const ModelShape& m) {
  for (const char* key : {"words", "boxes"})
    if (!inputs.count(key))
      throw BadRequest(std::string("no input '") + key + "': " + m.architecture +
                       " reads one document a request as 'words' (BYTES [W]) and 'boxes' ([W, 4])");
  const Tensor& words = inputs.at("words");
  expect_datatype(words, {"BYTES"});
  const int64_t w = dims_of(words, 1, "[W] or [1, W]")[0];
  if (w < 1) throw BadRequest("input 'words' holds no word");
  const Tensor& boxes = inputs.at("boxes");
  expect_datatype(boxes, kNumberTypes);
  const std::vector<int64_t> b = dims_of(boxes, 2, "[W, 4] or [1, W, 4] (W = " + std::to_string(w) + " words)");
  if (b[0] != w || b[1] != 4)
    throw BadRequest("input 'boxes' must have shape [" + std::to_string(w) + ", 4] (one box a word), found " +
                     shape_text(boxes.shape));
  json e = {{"words", json::array()}, {"boxes", json::array()}};
  for (size_t k = 0; k < words.data.size(); ++k) e["words"].push_back(string_at(words, k));
  for (int64_t k = 0; k < w; ++k) {
    json box = json::array();
    for (size_t c = 0; c < 4; ++c) box.push_back(number_at(boxes, static_cast<size_t>(k) * 4 + c));
    e["boxes"].push_back(std::move(box));
  }
  if (inputs.count("page")) {
    const Tensor& page = inputs.at("page");
    expect_datatype(page, kNumberTypes);
    if (dims_of(page, 1, "[2] or [1, 2]")[0] != 2)
      throw BadRequest("input 'page' must be [width, height], found shape " + shape_text(page.shape));
    e["page"] = {number_at(page, 0), number_at(page, 1)};
  }
  return {e};
}

template <typename T>
T little_endian(const char* p) {
  T v;
  std::memcpy(&v, p, sizeof v);  // x86-64 is little-endian, as the extension's data
  return v;
}

// One input's binary data as the "data" list its datatype gives.
json binary_data(const std::string& name, const std::string& datatype, const char* p, size_t size) {
  const std::string input = "input '" + name + "'";
  json data = json::array();
  auto fixed = [&](size_t width, auto read) {
    if (size % width != 0)
      throw BadRequest(input + ": " + std::to_string(size) + " binary bytes are no whole number of " + datatype +
                       " elements");
    for (size_t at = 0; at < size; at += width) data.push_back(read(p + at));
  };
  if (datatype == "BYTES") {
    for (size_t at = 0; at < size;) {
      if (size - at < 4)
        throw BadRequest(input + ": a BYTES element's 4-byte length is cut off at byte " + std::to_string(at));
      const uint32_t n = little_endian<uint32_t>(p + at);
      at += 4;
      if (n > size - at)
        throw BadRequest(input + ": a BYTES element of " + std::to_string(n) + " bytes runs past the " +
                         std::to_string(size) + " binary bytes");
      std::string text(p + at, n);
      if (const std::string problem = joule::utf8_problem(text); !problem.empty())
        throw BadRequest(input + " element " + std::to_string(data.size()) + ": " + problem);
      data.push_back(std::move(text));
      at += n;
    }
  } else if (datatype == "INT64") {
    fixed(8, [](const char* q) { return json(little_endian<int64_t>(q)); });
  } else if (datatype == "INT32") {
    fixed(4, [](const char* q) { return json(little_endian<int32_t>(q)); });
  } else if (datatype == "FP64") {
    fixed(8, [](const char* q) { return json(little_endian<double>(q)); });
  } else if (datatype == "FP32") {
    fixed(4, [](const char* q) { return json(static_cast<double>(little_endian<float>(q))); });
  } else if (datatype == "BOOL") {
    fixed(1, [](const char* q) { return json(*q != 0); });
  } else {
    throw BadRequest(input + ": binary data of datatype '" + datatype +
                     "' is not read here (BYTES, INT64, INT32, "
                     "FP64, FP32, BOOL)");
  }
  return data;
}

}  // namespace

json parse_request(const std::string& body, const std::string& header_length) {
  size_t json_bytes = body.size();
  if (!header_length.empty()) {
    if (header_length.find_first_not_of("0123456789") != std::string::npos || header_length.size() > 12 ||
        std::stoull(header_length) > body.size())
      throw BadRequest("Inference-Header-Content-Length '" + header_length + "' is not a byte count within the " +
                       std::to_string(body.size()) + "-byte body");
    json_bytes = std::stoull(header_length);
  }
  json request;
  try {
    request = json::parse(body.begin(), body.begin() + static_cast<std::ptrdiff_t>(json_bytes));
  } catch (const json::exception& e) {
    throw BadRequest(std::string(header_length.empty() ? "the request body" : "the request's JSON header") +
                     " is not JSON: " + joule::json_error_words(e));
  }
  size_t at = json_bytes;
  if (request.is_object() && request.contains("inputs") && request.at("inputs").is_array())
    for (json& input : request.at("inputs")) {
      if (!input.is_object() || !input.contains("parameters") || !input.at("parameters").is_object() ||
          !input.at("parameters").contains("binary_data_size"))
        continue;
      const json& size = input.at("parameters").at("binary_data_size");
      const std::string name =
          input.contains("name") && input.at("name").is_string() ? input.at("name").get<std::string>() : "?";
      if (header_length.empty())
        throw BadRequest("input '" + name +
                         "' gives binary_data_size but the request has no "
                         "Inference-Header-Content-Length header");
      if (!size.is_number_unsigned() || size.get<uint64_t>() > body.size() - at)
        throw BadRequest("input '" + name + "': binary_data_size " + size.dump() + " runs past the body's " +
                         std::to_string(body.size() - at) + " binary bytes left");
      const std::string datatype =
          input.contains("datatype") && input.at("datatype").is_string() ? input.at("datatype").get<std::string>() : "";
      input["data"] = binary_data(name, datatype, body.data() + at, size.get<size_t>());
      at += size.get<size_t>();
    }
  if (at != body.size())
    throw BadRequest(std::to_string(body.size() - at) +
                     " bytes of the body follow the JSON and no input's "
                     "binary_data_size accounts for them");
  return request;
}

std::vector<json> request_examples(const json& body, const ModelShape& m) {
  if (!body.is_object()) throw BadRequest("the request body must be a JSON object {\"inputs\": [...]}");
  if (!body.contains("inputs") || !body.at("inputs").is_array() || body.at("inputs").empty())
    throw BadRequest(
        "the request has no \"inputs\" list (Open Inference Protocol v2: {\"inputs\": [{\"name\", "
        "\"shape\", \"datatype\", \"data\"}]})");
  if (body.contains("id") && !body.at("id").is_string()) throw BadRequest("the request's \"id\" must be a string");
  std::map<std::string, Tensor> inputs;
  const std::vector<std::string> known = input_names(m);
  for (size_t k = 0; k < body.at("inputs").size(); ++k) {
    Tensor t = read_tensor(body.at("inputs")[k], k);
    if (std::find(known.begin(), known.end(), t.name) == known.end())
      throw BadRequest("input '" + t.name + "' is not one of " + m.name + "'s: " + names_text(known));
    const std::string name = t.name;
    if (!inputs.emplace(name, std::move(t)).second) throw BadRequest("input '" + name + "' is given twice");
  }
  return m.layout ? layout_example(inputs, m) : text_examples(inputs, m);
}

std::vector<std::string> requested_outputs(const json& body, const ModelShape& m) {
  const std::vector<std::string> all = output_names(m);
  if (!body.contains("outputs")) return all;
  const json& outputs = body.at("outputs");
  if (!outputs.is_array()) throw BadRequest("\"outputs\" must be a list of {\"name\": ...}");
  std::vector<std::string> names;
  for (const json& o : outputs) {
    if (!o.is_object() || !o.contains("name") || !o.at("name").is_string())
      throw BadRequest("each of \"outputs\" must be {\"name\": ...}, found " + o.dump().substr(0, 60));
    const std::string name = o.at("name").get<std::string>();
    if (std::find(all.begin(), all.end(), name) == all.end())
      throw BadRequest("output '" + name + "' is not one of " + m.name + "'s: " + names_text(all));
    names.push_back(name);
  }
  return names;
}

json response(const json& body, const ModelShape& m, const std::vector<json>& results) {
  const std::vector<std::string> names = requested_outputs(body, m);
  const auto n = static_cast<int64_t>(results.size());
  // A token classifier's rows are padded to the longest: "" and 0.
  int64_t width = 0;
  if (m.token_head)
    for (const json& r : results) width = std::max<int64_t>(width, static_cast<int64_t>(r.at("labels").size()));
  auto row_tensor = [&](const std::string& key, const char* datatype, const json& pad) {
    json data = json::array();
    for (const json& r : results)
      for (int64_t k = 0; k < width; ++k) {
        const json* v = k < static_cast<int64_t>(r.at(key).size()) ? &r.at(key)[static_cast<size_t>(k)] : nullptr;
        data.push_back(v && !v->is_null() ? *v : pad);
      }
    return json{{"name", key}, {"datatype", datatype}, {"shape", {n, width}}, {"data", std::move(data)}};
  };
  json outputs = json::array();
  for (const std::string& name : names) {
    if (name == "truncated") {
      json data = json::array();
      for (const json& r : results) data.push_back(r.contains("truncated") && r.at("truncated").get<bool>());
      outputs.push_back({{"name", name}, {"datatype", "BOOL"}, {"shape", {n}}, {"data", data}});
    } else if (name == "label" || name == "score") {
      json data = json::array();
      for (const json& r : results)
        data.push_back(r.at(name).is_null() ? (name == "label" ? json("") : json(0)) : r.at(name));
      outputs.push_back({{"name", name},
                         {"datatype", name == "label" ? "BYTES" : "FP32"},
                         {"shape", {n}},
                         {"data", std::move(data)}});
    } else {
      outputs.push_back(row_tensor(name, name == "scores" ? "FP32" : "BYTES", name == "scores" ? json(0) : json("")));
    }
  }
  json out = {{"model_name", m.name}, {"model_version", "1"}, {"outputs", std::move(outputs)}};
  if (body.contains("id")) out["id"] = body.at("id");
  return out;
}

json model_metadata(const ModelShape& m) {
  json inputs = json::array(), outputs = json::array();
  if (m.layout) {
    inputs.push_back({{"name", "words"}, {"datatype", "BYTES"}, {"shape", {-1}}});
    inputs.push_back({{"name", "boxes"}, {"datatype", "INT64"}, {"shape", {-1, 4}}});
    inputs.push_back({{"name", "page"}, {"datatype", "FP32"}, {"shape", {2}}, {"optional", true}});
  } else {
    inputs.push_back({{"name", "text"}, {"datatype", "BYTES"}, {"shape", {-1}}});
    inputs.push_back({{"name", "text_pair"}, {"datatype", "BYTES"}, {"shape", {-1}}, {"optional", true}});
  }
  for (const std::string& name : output_names(m)) {
    const char* type = name == "truncated" ? "BOOL" : (name == "score" || name == "scores") ? "FP32" : "BYTES";
    outputs.push_back(
        {{"name", name}, {"datatype", type}, {"shape", m.token_head && name != "truncated" ? json{-1, -1} : json{-1}}});
  }
  return {{"name", m.name},
          {"versions", {"1"}},
          {"platform", "joule"},
          {"architecture", m.architecture},
          {"max_batch_size", m.max_batch},
          {"inputs", std::move(inputs)},
          {"outputs", std::move(outputs)}};
}

json server_metadata(const std::string& version) {
  return {{"name", "joule"}, {"version", version}, {"extensions", json::array()}};
}

}  // namespace joule::serve
