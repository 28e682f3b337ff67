#include "stages/engram_config.h"

#include <string>

#include "stages/stage_error.h"

namespace shardq {

namespace {

const nlohmann::ordered_json& key(const nlohmann::ordered_json& text_config, const char* name) {
  const auto it = text_config.find(name);
  if (it == text_config.end()) throw StageError(std::string("config.json text_config: missing key ") + name);
  return *it;
}

uint64_t unsigned_value(const nlohmann::ordered_json& value, const std::string& what) {
  if (!value.is_number_unsigned()) {
    throw StageError("config.json text_config: " + what + " must be a non-negative integer, got " + value.dump());
  }
  return value.get<uint64_t>();
}

int small_value(const nlohmann::ordered_json& value, const std::string& what) {
  const uint64_t number = unsigned_value(value, what);
  if (number > 1u << 20) throw StageError("config.json text_config: " + what + " = " + value.dump() + " is too large");
  return int(number);
}

} // namespace

EngramConfig engram_config_from_json(const nlohmann::ordered_json& text_config) {
  if (!text_config.is_object()) throw StageError("config.json: text_config is not an object");
  EngramConfig config;
  const auto& layer_ids = key(text_config, "engram_layer_ids");
  if (!layer_ids.is_array()) throw StageError("config.json text_config: engram_layer_ids is not an array");
  for (const auto& id : layer_ids) config.layer_ids.push_back(small_value(id, "engram_layer_ids entry"));
  if (const auto it = text_config.find("engram_num_embeddings"); it != text_config.end()) {
    if (!it->is_array()) throw StageError("config.json text_config: engram_num_embeddings is not an array");
    for (const auto& rows : *it) config.num_embeddings.push_back(unsigned_value(rows, "engram_num_embeddings entry"));
  }
  config.max_ngram_size = small_value(key(text_config, "engram_max_ngram_size"), "engram_max_ngram_size");
  config.vocab_size = unsigned_value(key(text_config, "engram_vocab_size"), "engram_vocab_size");
  config.n_heads = small_value(key(text_config, "engram_n_heads"), "engram_n_heads");
  config.head_dim = small_value(key(text_config, "engram_head_dim"), "engram_head_dim");
  return config;
}

void engram_config_to_json(const EngramConfig& config, nlohmann::ordered_json& text_config) {
  text_config["engram_layer_ids"] = config.layer_ids;
  text_config["engram_num_embeddings"] = config.num_embeddings;
  text_config["engram_max_ngram_size"] = config.max_ngram_size;
  text_config["engram_vocab_size"] = config.vocab_size;
  text_config["engram_n_heads"] = config.n_heads;
  text_config["engram_head_dim"] = config.head_dim;
}

} // namespace shardq
