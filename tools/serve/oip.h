// The Open Inference Protocol v2 (KServe's and Triton's REST API) as `joule serve` speaks it, without HTTP: a request
// body's input tensors turned into the example objects Classifier::read takes (models/infer/infer.h describes them),
// and the results turned into output tensors.
//
// Inputs (each {"name", "shape", "datatype", "data"}; data flat or nested in row-major order):
//   text models      "text" BYTES [N] or [N, 1]; "text_pair" BYTES, the same shape (optional): N examples
//   LayoutLM models  "words" BYTES [W] or [1, W]; "boxes" INT64/INT32/FP32/FP64 [W, 4] or [1, W, 4]; "page"
//                    [2] or [1, 2] (optional, the page's width and height in pixels): one document
// Outputs (all unless the request names some in "outputs"):
//   a sequence classifier  "label" BYTES [N], "score" FP32 [N], "truncated" BOOL [N]
//   a token classifier     "labels" BYTES [N, T], "scores" FP32 [N, T] (text models also "tokens" BYTES [N, T]), T
//                          the longest example's tokens (LayoutLM: words), shorter rows padded with "" and 0; a
//                          LayoutLM word that tokenizes to nothing has label "" and score 0; "truncated" BOOL [N]
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "launch/util/error.h"

namespace joule::serve {

// A request the protocol's rules refuse: the server answers 400 with {"error": what()}.
class BadRequest : public joule::Error {
 public:
  explicit BadRequest(const std::string& message) : joule::Error(message, "") {}
};

// What the model takes and gives, for the requests and the metadata.
struct ModelShape {
  std::string name;          // the model's name in the URLs
  std::string architecture;  // HuggingFace's class
  bool layout = false;       // LayoutLM: words and boxes
  bool token_head = false;   // per token (word) outputs
  int64_t max_batch = 8;     // examples a request holds at most
};

// A request body as JSON: the body itself, or with the binary tensor data extension (`header_length`: the
// Inference-Header-Content-Length header, "" when absent) the JSON header followed by each input whose parameters give
// "binary_data_size" in that order (little-endian, row-major; a BYTES element is a 4-byte length and its bytes), put
// back into that input's "data". BadRequest naming the input or the header otherwise. Outputs are always JSON.
nlohmann::json parse_request(const std::string& body, const std::string& header_length);

// The examples of a request (parse_request's JSON), as Classifier::read's objects, in order; BadRequest naming
// the input and what is wrong.
std::vector<nlohmann::json> request_examples(const nlohmann::json& body, const ModelShape& model);

// The outputs the request asks for (its "outputs" names; all when absent), BadRequest for a name the model lacks.
std::vector<std::string> requested_outputs(const nlohmann::json& body, const ModelShape& model);

// The response body for the examples' result objects (Classifier::classify's).
nlohmann::json response(const nlohmann::json& body, const ModelShape& model,
                        const std::vector<nlohmann::json>& results);

// GET /v2/models/{name}: name, versions, platform, inputs and outputs with datatypes and shapes (-1: any size).
nlohmann::json model_metadata(const ModelShape& model);

// GET /v2: the server's name, version and the protocol extensions it implements.
nlohmann::json server_metadata(const std::string& version);

}  // namespace joule::serve
