// Writes a HuggingFace-layout copy of a checkpoint: config.json + model.safetensors as
// transformers' save_pretrained writes them for BertForPreTraining (model_type "bert") or
// GPT2LMHeadModel ("gpt2"), so `from_pretrained(out)` reads it.
//
//   export_hf --checkpoint runs/bert/phase1 --out runs/bert/hf
//   export_hf --checkpoint runs/gpt-mini --out runs/gpt-mini-hf
//
// The checkpoint is one of ours (a checkpoint directory, or a run directory standing for its
// newest checkpoint) or an HF directory itself. Block-sparse weights are written dense. The
// mapping is io/huggingface.hpp's; this program only picks the model type and reports.

#include <CLI/CLI.hpp>

#include <cstdio>
#include <filesystem>
#include <string>

#include "cli.hpp"
#include "sparselm/core/program.hpp"
#include "sparselm/io/huggingface.hpp"
#include "sparselm/io/pretrained.hpp"
#include "sparselm/models/bert.hpp"
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
        "F32) of a BERT or GPT-2 checkpoint."};
    fs::path checkpoint, out;
    app.add_option("--checkpoint", checkpoint, "Checkpoint or run directory (its newest checkpoint)")->required();
    app.add_option("--out", out, "Directory to write")->required();
    if (auto status = examples::parse(app, argc, argv)) return *status;
    const fs::path from = io::resolve_checkpoint(checkpoint);
    const std::string ctx = (from / io::config_file).string();
    json j = io::read_model_config(from);
    const std::string type = j.value("model_type", std::string("gpt2"));
    if (type == "bert") {
      std::size_t block = 0;
      double sparsity = 0.9;
      if (j.contains("sparselm")) {  // a block-sparse BERT (io::model_config_json)
        json_fields r(j["sparselm"], ctx + " sparselm");
        block = r.require<std::size_t>("block_size");
        sparsity = r.require<double>("sparsity");
        r.finish();
        j.erase("sparselm");
      }
      const auto cfg = bert_config::from_json(j, ctx);
      // Each block-sparse weight gets the file's block count (any allocation, uniform or not).
      const auto sp = io::read_checkpoint_sparsity(from);
      SPARSELM_CHECK(sp.block == block, ctx, ": the config's block size is ", block,
                     " (sparselm.block_size; 0: dense) but the checkpoint's block-sparse weights have blocks of ",
                     sp.block, " (0: none)");
      return registry::with_sparsity(
          block,
          [&]<class S>() {
            sparse_plan plan{sparsity};
            if constexpr (S::is_sparse) plan = sp.plan();
            bert<float, S> model(cfg, plan);
            return export_model(model, from, out, io::hf_bert_map());
          },
          ctx + ": sparselm.block_size");
    }
    SPARSELM_CHECK(type == "gpt2", ctx, ": field 'model_type' is '", type,
                   "'; HuggingFace export is for 'bert' and 'gpt2' checkpoints");
    return registry::with_model(j, ctx, [&]<class Model, class Family>(const auto& spec) {
      Model model = Family::template make<Model>(spec);
      return export_model(model, from, out, io::hf_gpt2_map());
    });
  });
}
