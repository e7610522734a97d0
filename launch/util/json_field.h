// Checked reads of the JSON files joule writes and reads back (checkpoint manifests, the ledger, summary.json): a
// missing key or a value of another type is an error of the caller's kind naming the file and the key, never
// nlohmann's bare exception or a silent default. Header only, no LibTorch.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "launch/util/error.h"

namespace joule {

// A JSON file joule wrote is damaged or from another joule version.
class JsonFileError : public Error {
 public:
  explicit JsonFileError(
      const std::string& message,
      std::string hint = "the file is damaged or was written by another joule version: rerun the command that wrote it")
      : Error(message, std::move(hint)) {}
};

// Why `text` (which nlohmann::json refused with `e`) is not a JSON document, in words, to follow "FILE: ": "an empty
// file", or "not valid JSON (line L, column C: what was found)"; never the library's "[json.exception...]" tag.
inline std::string json_syntax_problem(const std::string& text, const std::exception& e) {
  if (text.find_first_not_of(" \t\r\n") == std::string::npos) return "an empty file";
  std::string what = e.what();
  if (const size_t at = what.find(" at line "); at != std::string::npos) what = what.substr(at + 4);
  for (const char* noise : {"syntax error while parsing value - ", "syntax error while parsing object - ",
                            "syntax error while parsing array - ", "syntax error while parsing object key - ",
                            "syntax error while parsing object separator - "})
    if (const size_t at = what.find(noise); at != std::string::npos) what.erase(at, std::string(noise).size());
  if (what.rfind("[json.exception", 0) == 0) what = what.substr(what.find(']') + 2);
  return "not valid JSON (" + what + ")";
}

// j[key] as T. `where`: the file (and the object inside it) for the message.
template <typename T, typename E = JsonFileError>
T json_field(const nlohmann::json& j, const std::string& key, const std::string& where) {
  if (!j.is_object()) throw E(where + ": expected a JSON object, found " + std::string(j.type_name()));
  const auto it = j.find(key);
  if (it == j.end()) throw E(where + ": missing key '" + key + "'");
  try {
    return it->get<T>();
  } catch (const nlohmann::json::exception&) {
    throw E(where + ": key '" + key + "' holds " + it->dump() + " (" + it->type_name() +
            "), not the type joule writes");
  }
}

// The same for a key that older files may lack: `fallback` when absent (or null), an error when of another type.
template <typename T, typename E = JsonFileError>
T json_field_or(const nlohmann::json& j, const std::string& key, T fallback, const std::string& where) {
  if (!j.is_object()) throw E(where + ": expected a JSON object, found " + std::string(j.type_name()));
  const auto it = j.find(key);
  if (it == j.end() || it->is_null()) return fallback;
  return json_field<T, E>(j, key, where);
}

}  // namespace joule
