#pragma once
// The keys every HuggingFace `PretrainedConfig` may write into config.json besides a model's own
// (generation defaults, labels, token ids, bookkeeping), for the configs that read HF files
// (bert_config, gpt_config). Keys that do not change the model we build are accepted and unused;
// keys whose value would change it in a way the library does not implement are refused, naming
// the key and the value:
//
//   json_fields r(j, "bert-base/config.json");
//   ... the model's own keys ...
//   read_hf_common(r);   // "bert-base/config.json: field 'is_decoder' must be false (...), got true"
//   r.finish();

#include <string>

#include "sparselm/core/json.hpp"

namespace sparselm {

namespace detail {
// A check for json_fields: the value must equal `want`; `why` says what we do not implement.
template <class T>
auto must_be(T want, std::string why) {
  return [want, why](const T& v) {
    if (v == want) return std::string();
    auto show = [](const T& x) {
      if constexpr (std::is_same_v<T, bool>) return std::string(x ? "true" : "false");
      else return std::string("'").append(x).append("'");  // (GCC 12 -O3 warns falsely on "'" + std::string(x))
    };
    return "must be " + show(want) + " (" + why + "), got " + show(v);
  };
}
}  // namespace detail

// Accepts the generic PretrainedConfig keys (see the header comment) and checks the ones that
// would change the model: a decoder or encoder-decoder setup, cross-attention, an untied output
// layer (unless the model reads tie_word_embeddings itself: untied_allowed), pruned heads.
inline void read_hf_common(json_fields& r, bool untied_allowed = false) {
  r.ignore({"_name_or_path", "_commit_hash", "_attn_implementation_autoset", "architectures", "model_type",
            "transformers_version", "torch_dtype", "dtype", "use_cache", "return_dict", "output_hidden_states",
            "output_attentions", "torchscript", "use_bfloat16", "tf_legacy_loss", "finetuning_task", "id2label",
            "label2id", "num_labels", "problem_type", "tokenizer_class", "prefix", "bos_token_id", "pad_token_id",
            "eos_token_id", "sep_token_id", "decoder_start_token_id", "task_specific_params", "gradient_checkpointing",
            "chunk_size_feed_forward", "max_length", "min_length", "do_sample", "early_stopping", "num_beams",
            "num_beam_groups", "diversity_penalty", "temperature", "top_k", "top_p", "typical_p",
            "repetition_penalty", "length_penalty", "no_repeat_ngram_size", "encoder_no_repeat_ngram_size",
            "bad_words_ids", "num_return_sequences", "output_scores", "return_dict_in_generate",
            "forced_bos_token_id", "forced_eos_token_id", "remove_invalid_values", "exponential_decay_length_penalty",
            "suppress_tokens", "begin_suppress_tokens", "cross_attention_hidden_size", "tie_encoder_decoder",
            "output_past"});
  r.nullable({"classifier_dropout"});
  r.ignore({"classifier_dropout"});  // read by fine-tuning heads from the JSON when they need it
  r.get("is_encoder_decoder", false, detail::must_be(false, "encoder-decoder models are not implemented"));
  r.get("add_cross_attention", false, detail::must_be(false, "cross-attention is not implemented"));
  if (!untied_allowed)
    r.get("tie_word_embeddings", true, detail::must_be(true, "the output layer is always tied to the word embedding"));
  const json pruned = r.get("pruned_heads", json::object());
  SPARSELM_CHECK(pruned.is_object() && pruned.empty(), r.context(),
                 ": field 'pruned_heads' must be empty (pruned attention heads are not implemented), got ",
                 pruned.dump());
}

}  // namespace sparselm
