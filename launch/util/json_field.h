// Checked reads of the JSON files joule writes and reads back (checkpoint manifests, the ledger, summary.json): a
// missing key or a value of another type is an error of the caller's kind naming the file and the key, never
// nlohmann's bare exception or a silent default. Header only, no LibTorch.
#pragma once

#include <cmath>
#include <cstdint>
#include <string>
#include <type_traits>
#include <variant>
#include <vector>

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

// One key of a JSON document and the member of T that holds it. A document's field table, written once, both writes it
// (write_json_fields) and reads it back (read_json_fields): each key is spelled in one place.
enum class JsonPresence {
  required,      // always written; a file without it is refused, naming the file and the key
  optional,      // always written; older files may lack it (the member keeps its default)
  omit_default,  // written only when it differs from T{}'s; absent reads as that default
};
template <typename T>
struct JsonField {
  const char* key;
  std::variant<int64_t T::*, uint64_t T::*, int T::*, double T::*, std::string T::*, bool T::*, nlohmann::json T::*>
      member;
  JsonPresence presence = JsonPresence::required;
};

// An nlohmann exception's words without its id ("[json.exception.out_of_range.403] "): the caller puts the file, line
// and key before them.
inline std::string json_error_words(const std::exception& e) {
  std::string what = e.what();
  if (what.rfind("[json.exception.", 0) == 0) what.erase(0, what.find("] ") + 2);
  return what;
}

template <typename T>
void write_json_fields(const T& object, const std::vector<JsonField<T>>& fields, nlohmann::json& j) {
  static const T defaults{};
  for (const JsonField<T>& f : fields)
    std::visit(
        [&](auto member) {
          if (f.presence == JsonPresence::omit_default && object.*member == defaults.*member) return;
          using Value = std::decay_t<decltype(object.*member)>;
          if constexpr (std::is_same_v<Value, double>)  // JSON writes NaN and Inf as null, which a reader refuses
            if (f.presence == JsonPresence::required && !std::isfinite(object.*member))
              throw InternalError(std::string("'") + f.key + "' is " + std::to_string(object.*member) +
                                  ": a figure that every reader needs as a number is not finite");
          j[f.key] = object.*member;
        },
        f.member);
}

// Reads every field of `fields` from `j` into `object`; `where` names the file (and the object inside it) in errors,
// thrown as E (the caller's kind: a checkpoint's CheckpointError, say).
template <typename T, typename E = JsonFileError>
void read_json_fields(const nlohmann::json& j, const std::vector<JsonField<T>>& fields, T& object,
                      const std::string& where) {
  for (const JsonField<T>& f : fields)
    std::visit(
        [&](auto member) {
          using Value = std::decay_t<decltype(object.*member)>;
          object.*member = f.presence == JsonPresence::required
                               ? json_field<Value, E>(j, f.key, where)
                               : json_field_or<Value, E>(j, f.key, object.*member, where);
        },
        f.member);
}

}  // namespace joule
