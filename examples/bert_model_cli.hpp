#pragma once
// The BERT model of a training program's run (bert_pretrain, bert_classify, bert_squad): the run
// config's "model" (a file of HuggingFace config.json keys, resolved against the run config's
// directory, or an object), else the --init-from checkpoint's config, else configs/bert-tiny.json;
// the run's "dropout" sets both of BERT's dropout rates. Size limits are checked before anything
// is allocated.

#include <filesystem>
#include <span>
#include <string>

#include <nlohmann/json.hpp>

#include "sparselm/core/checked.hpp"
#include "sparselm/core/json.hpp"
#include "sparselm/io/checkpoint.hpp"
#include "sparselm/io/pretrained.hpp"
#include "sparselm/models/bert.hpp"
#include "sparselm/train/run_settings.hpp"

namespace examples {

inline std::span<const sparselm::option_entry> bert_model_options() {
  static const sparselm::option_entry table[] = {
      {"model", "--model", sparselm::option_kind::input,
       "BERT model config (HF config.json keys; absent: the --init-from checkpoint's, else configs/bert-tiny.json)", "",
       "", "model"},
  };
  return table;
}

// The model config and where it came from (for errors).
struct bert_model_source {
  sparselm::bert_config config;
  std::string from;
};

inline bert_model_source read_bert_model(const sparselm::run_settings& s, const std::filesystem::path& base) {
  nlohmann::json j;
  std::string from;
  if (s.task.contains("model")) {
    const nlohmann::json& m = s.task["model"];
    if (m.is_string()) {
      std::filesystem::path p = m.get<std::string>();
      if (p.is_relative() && !base.empty()) p = base / p;
      from = p.string();
      j = sparselm::read_json_file(from);
    } else {
      SPARSELM_CHECK(m.is_object(), s.context, ": field 'model' must be a file name or an object");
      from = s.context + " model";
      j = m;
    }
  } else {
    from = s.init_from.empty()
               ? std::string(SPARSELM_SOURCE_DIR) + "/configs/bert-tiny.json"
               : (sparselm::io::resolve_checkpoint(s.init_from) / sparselm::io::config_file).string();
    j = sparselm::read_json_file(from);
  }
  SPARSELM_CHECK(j.is_object(), from, ": expected a JSON object (a BERT config), got ", j.type_name());
  sparselm::check_model_limits(j, from);
  if (s.dropout) j["hidden_dropout_prob"] = j["attention_probs_dropout_prob"] = *s.dropout;
  return {sparselm::bert_config::from_json(j, from), from};
}

}  // namespace examples
