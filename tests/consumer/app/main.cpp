// Uses the umbrella header the way a downstream project would: the README's example (a GPT with
// block-sparse projections, a few AdamW steps, a checkpoint written and read back).
#include <sparselm/sparselm.hpp>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <vector>

int main() {
  using json = nlohmann::json;
  sparselm::gpt_config cfg = sparselm::gpt_config::from_json(
      json{{"vocab_size", 64}, {"n_positions", 16}, {"n_layer", 2}, {"n_head", 2}, {"n_embd", 32}});
  sparselm::gpt<float, sparselm::block_sparse<16>> model(cfg, {.sparsity = 0.5});
  model.init(1234);
  sparselm::trainer t(model, {}, sparselm::optim::adamw<>(json{{"weight_decay", 0.1}}),
                      sparselm::optim::make_schedule({{"type", "constant"}, {"lr", 3e-3}}));
  std::vector<std::int32_t> ids(4 * 8), targets(4 * 8);
  for (std::size_t i = 0; i < ids.size(); ++i) ids[i] = std::int32_t(i % 7), targets[i] = std::int32_t((i + 1) % 7);
  std::vector<sparselm::token_batch> micro{{ids, targets, {}, 4, 8}};
  double first = 0, last = 0;
  for (int s = 0; s < 5; ++s) {
    auto m = t.train_step(micro);  // loss, lr, grad norm, tokens/s
    (s == 0 ? first : last) = m.loss.mean_loss();
  }
  const auto dir = std::filesystem::temp_directory_path() / "sparselm-consumer-ckpt";
  sparselm::io::save_model(dir, model);  // config.json + model.safetensors (+ block patterns)
  sparselm::gpt<float, sparselm::block_sparse<16>> again(
      sparselm::gpt_config::from_json(sparselm::io::read_model_config(dir)), {.sparsity = 0.5});
  again.init(1);
  sparselm::io::load_model(dir, again);
  std::filesystem::remove_all(dir);
  if (std::memcmp(again.params().all().data(), model.params().all().data(), model.params().all().size() * 4) != 0)
    return 1;
  if (!(last < first)) return 2;
  std::printf("consumer ok (sparselm %s): loss %.3f -> %.3f, %zu parameters\n", sparselm::version, first, last,
              model.num_parameters());
  return 0;
}
