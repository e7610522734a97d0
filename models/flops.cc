#include "models/flops.h"

namespace joule::models {
namespace {

// A forward GEMM [m x k] . [k x n] and its two backward GEMMs (input and weight gradients).
void add_trained(std::vector<GemmShape>& out, const std::string& what, int64_t batch, int64_t m, int64_t n, int64_t k,
                 int64_t count) {
  out.push_back({what + ".fwd", batch, m, n, k, count});
  out.push_back({what + ".dgrad", batch, m, k, n, count});
  out.push_back({what + ".wgrad", batch, n, k, m, count});
}

}  // namespace

std::vector<GemmShape> training_gemms(const BertConfig& c, int64_t sequences, int64_t seq_len, int64_t predictions) {
  const int64_t tokens = sequences * seq_len, h = c.hidden_size, layers = c.num_hidden_layers;
  const int64_t heads = c.num_attention_heads, dh = c.head_dim();
  std::vector<GemmShape> g;
  add_trained(g, "layer.qkv_out", 1, tokens, h, h, 4 * layers);  // query, key, value, attention output
  add_trained(g, "layer.ffn_up", 1, tokens, c.intermediate_size, h, layers);
  add_trained(g, "layer.ffn_down", 1, tokens, h, c.intermediate_size, layers);
  add_trained(g, "attention.scores", sequences * heads, seq_len, seq_len, dh, layers);   // q . k^T
  add_trained(g, "attention.context", sequences * heads, seq_len, dh, seq_len, layers);  // p . v
  add_trained(g, "pooler", 1, sequences, h, h, 1);
  add_trained(g, "mlm.transform", 1, predictions, h, h, 1);
  add_trained(g, "mlm.decoder", 1, predictions, c.vocab_size, h, 1);
  add_trained(g, "nsp", 1, sequences, 2, h, 1);
  return g;
}

std::vector<GemmShape> inference_gemms(const BertConfig& c, int64_t sequences, int64_t seq_len, int64_t labels,
                                       bool per_token, bool first_position_last_layer) {
  first_position_last_layer = first_position_last_layer && !per_token;  // a token head reads every position
  std::vector<GemmShape> g;
  for (const GemmShape& s : training_gemms(c, sequences, seq_len, 0)) {
    const bool forward = s.what.size() > 4 && s.what.compare(s.what.size() - 4, 4, ".fwd") == 0;
    if (forward && (s.what.rfind("layer.", 0) == 0 || s.what.rfind("attention.", 0) == 0)) {
      g.push_back(s);
      if (!first_position_last_layer) continue;
      // The last layer: its key and value projections on every position, the rest on the first position only.
      GemmShape& all = g.back();
      GemmShape last = all;
      if (all.what == "layer.qkv_out.fwd") {
        all.count -= 2;  // the last layer's query and attention output
        last.what = "last_layer.query_out.fwd", last.m = sequences, last.count = 2;
      } else {
        all.count -= 1;
        last.what = "last_layer." + all.what.substr(all.what.find('.') + 1);
        last.m = all.what.rfind("attention.", 0) == 0 ? 1 : sequences, last.count = 1;
      }
      g.push_back(last);
    }
    if (forward && s.what == "pooler.fwd" && !per_token) g.push_back(s);
  }
  if (labels > 0)
    g.push_back({"classifier.fwd", 1, per_token ? sequences * seq_len : sequences, labels, c.hidden_size, 1});
  return g;
}

double total_flops(const std::vector<GemmShape>& gemms) {
  double f = 0;
  for (const GemmShape& s : gemms) f += s.flops();
  return f;
}

double training_flops_per_sequence(const BertConfig& config, int64_t seq_len, int64_t predictions) {
  return total_flops(training_gemms(config, 1, seq_len, predictions));
}

}  // namespace joule::models
