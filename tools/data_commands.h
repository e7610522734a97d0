// `joule data synth|vocab|create|inspect|tokenize`, as functions main() only calls.
#pragma once

#include <iosfwd>
#include <string>

namespace joule::tools {

// Counts, the length histogram, the masking rate, and `samples` sequences decoded back to text.
std::string data_inspect(const std::string& spec, int samples, const std::string& vocab_path);

// One line of space-separated WordPiece tokens per input line.
void data_tokenize(std::istream& in, std::ostream& out, const std::string& vocab_path, bool lower_case);

}  // namespace joule::tools
