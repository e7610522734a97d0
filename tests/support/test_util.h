// Small helpers shared by the unit tests.
#pragma once

#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "launch/util/hash.h"
#include "models/bert_config.h"

namespace joule::test {

// A fresh directory under the system temp dir, removed with its contents on destruction.
class TempDir {
 public:
  TempDir() {
    std::string pattern = (std::filesystem::temp_directory_path() / "joule-test-XXXXXX").string();
    path_ = mkdtemp(pattern.data()) ? pattern : throw std::runtime_error("mkdtemp failed");
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }
  std::string file(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

inline std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The lines of a profile file (configs/hardware) that set a number without a '# source:' or '# assumption:'
// comment, as "FILE:LINE: text"; every figure a profile gives must say where it comes from.
inline std::vector<std::string> unsourced_numbers(const std::string& file) {
  const std::regex numeric(R"(^\s*[A-Za-z_0-9]+\s*=\s*[-0-9.{])");
  std::vector<std::string> out;
  std::ifstream in(file);
  int line_no = 0;
  for (std::string line; std::getline(in, line);) {
    ++line_no;
    if (std::regex_search(line, numeric) && line.find("# source:") == std::string::npos &&
        line.find("# assumption:") == std::string::npos)
      out.push_back(file + ":" + std::to_string(line_no) + ": " + line);
  }
  return out;
}

inline void write_file(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << bytes;
}

// A checkpoint directory in the trainer's layout, for tests of what reads one: each of `files` (name -> bytes) written
// and listed in manifest.json with its size and checksum, then COMPLETE. The files every manifest must list
// (model.safetensors, optimizer.safetensors, trainer_state.json) are added, empty, where `files` lacks them.
inline std::string write_checkpoint_dir(const std::string& ck, std::map<std::string, std::string> files) {
  std::filesystem::create_directories(ck);
  for (const char* core : {"model.safetensors", "optimizer.safetensors", "trainer_state.json"}) files.emplace(core, "");
  std::string listed;
  for (const auto& [name, bytes] : files) {
    write_file(ck + "/" + name, bytes);
    listed += std::string(listed.empty() ? "" : ", ") + "\"" + name +
              "\": {\"bytes\": " + std::to_string(bytes.size()) + ", \"fnv1a64\": \"" +
              joule::hex64(joule::fnv1a64_file(ck + "/" + name)) + "\"}";
  }
  write_file(ck + "/manifest.json",
             R"({"format": "joule-checkpoint", "format_version": 1, "files": {)" + listed + "}}");
  write_file(ck + "/COMPLETE", "");
  return ck;
}

struct CommandResult {
  int exit_code = -1;
  std::string output;  // stdout and stderr together
};

// Runs a shell command, capturing stdout+stderr.
inline CommandResult run_command(const std::string& command) {
  CommandResult r;
  FILE* pipe = popen((command + " 2>&1").c_str(), "r");
  if (!pipe) return r;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, pipe)) > 0) r.output.append(buf, n);
  int status = pclose(pipe);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

// A small BERT for tests: `layers` layers of `hidden` units in `heads` heads.
inline models::BertConfig small_bert(int64_t vocab, int64_t hidden, int64_t heads, int64_t intermediate,
                                     int64_t positions, double dropout = 0.1, int64_t layers = 2) {
  models::BertConfig c;
  c.vocab_size = vocab;
  c.hidden_size = hidden;
  c.num_hidden_layers = layers;
  c.num_attention_heads = heads;
  c.intermediate_size = intermediate;
  c.max_position_embeddings = positions;
  c.hidden_dropout_prob = dropout;
  c.attention_probs_dropout_prob = dropout;
  return c;
}

}  // namespace joule::test
