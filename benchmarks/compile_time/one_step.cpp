// A tiny downstream translation unit that trains a GPT one step: what benchmarks/compile_time.sh compiles.
#include <sparselm/sparselm.hpp>
#include <cstdio>

int main(int argc, char** argv) {
  using sparselm::json;
  const char* config = argc > 1 ? argv[1] : "configs/gpt-mini.json";
  auto cfg = sparselm::gpt_config::from_json(sparselm::read_json_file(config));
  sparselm::gpt<float> model(cfg);
  model.init(1234);
  sparselm::trainer t(model, {}, sparselm::optim::adamw<>(json{{"weight_decay", 0.1}}),
                      sparselm::optim::make_schedule({{"type", "constant"}, {"lr", 4e-3}}));
  const std::size_t batch = 2, seq = 16;
  std::vector<std::int32_t> ids(batch * seq, 1), targets(batch * seq, 2);
  std::vector<sparselm::token_batch> micro{{ids, targets, {}, batch, seq}};
  std::printf("loss %.3f\n", t.train_step(micro).loss.mean_loss());
}
