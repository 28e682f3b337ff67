// Reads the Engram keys of config.json's text_config into the stages' EngramConfig.
#pragma once

#include <nlohmann/json.hpp>

#include "stages/engram_layout.h"

namespace shardq {

// Throws StageError naming the missing or mistyped key. engram_num_embeddings is
// optional here (a writer computes it); EngramLayout::check refuses a table without it.
EngramConfig engram_config_from_json(const nlohmann::ordered_json& text_config);

// The inverse, for writers: the engram_* keys (with num_embeddings as given).
void engram_config_to_json(const EngramConfig& config, nlohmann::ordered_json& text_config);

} // namespace shardq
