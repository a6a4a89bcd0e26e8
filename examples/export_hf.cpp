// Writes a HuggingFace-layout copy of a checkpoint: config.json + model.safetensors as
// transformers' save_pretrained writes them for BertForPreTraining (model_type "bert"),
// GPT2LMHeadModel ("gpt2") or LlamaForCausalLM ("llama"), so `from_pretrained(out)` reads it.
//
//   export_hf --checkpoint runs/bert/phase1 --out runs/bert/hf
//   export_hf --checkpoint runs/gpt-mini --out runs/gpt-mini-hf
//
// The checkpoint is one of ours (a checkpoint directory, or a run directory standing for its
// newest checkpoint) or an HF directory itself. Block-sparse weights are written dense. The model
// type, its sparsity and each weight's block count come from train/registry.hpp (with_checkpoint),
// the mapping from io/huggingface.hpp; this program only picks the map and reports.

#include <CLI/CLI.hpp>

#include <cstdio>
#include <filesystem>
#include <string>
#include <type_traits>

#include "cli.hpp"
#include "sparselm/core/program.hpp"
#include "sparselm/io/huggingface.hpp"
#include "sparselm/io/output_rule.hpp"
#include "sparselm/io/run_dir.hpp"
#include "sparselm/io/pretrained.hpp"
#include "sparselm/train/registry.hpp"

using namespace sparselm;
namespace fs = std::filesystem;

namespace {

template <class Model>
int export_model(Model& model, const fs::path& from, const fs::path& out, const io::hf_name_map& map) {
  if constexpr (Model::sparsity::is_sparse) model.init(0);  // sizes the block patterns that loading restores
  const auto r = io::load_pretrained(from, model, map);
  std::fprintf(stderr, "export_hf: read %s\n", r.summary().c_str());
  io::save_hf(out, model, map);
  std::printf("%s\n", json{{"checkpoint", from.string()},
                           {"out", out.string()},
                           {"model_type", map.name},
                           {"tensors", model.layout()->count()},
                           {"parameters", model.num_parameters()}}
                          .dump()
                          .c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return run_program("export_hf", [&]() -> int {
    CLI::App app{
        "Write a HuggingFace-layout copy (config.json + model.safetensors, HF tensor names, Linear (out, in),\n"
        "F32) of a BERT, GPT-2 or LLaMA checkpoint."};
    fs::path checkpoint, out;
    bool overwrite = false;
    examples::reads(
        app.add_option("--checkpoint", checkpoint, "Checkpoint or run directory (its newest checkpoint)")->required());
    examples::writes(app.add_option("--out", out, "Directory to write")->required());
    app.add_flag("--overwrite", overwrite, "Write into an existing --out that holds other files (they stay)");
    if (auto status = examples::parse(app, argc, argv)) return *status;
    const fs::path from = io::resolve_checkpoint(checkpoint);
    // the one output rule (io/output_rule.hpp): never into the checkpoint or its run, nor over
    // another directory without --overwrite
    io::check_output(out, {{checkpoint, "--checkpoint"}, {from, "checkpoint"}}, "--out");
    io::check_output_dir(out, "--out", overwrite, {});
    io::run_lock lock(out);  // one writer per directory
    using families = registry::type_list<registry::gpt_family, registry::llama_family, registry::bert_family>;
    return registry::with_checkpoint<registry::all_activations, families>(
        from, [&]<class Model, class Family>(const auto& spec) {
          Model model = Family::template make<Model>(spec);
          return export_model(model, from, out, Family::hf_map(spec.config));
        });
  });
}
