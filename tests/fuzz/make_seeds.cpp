// Writes the seed corpora of the fuzz targets into <dir>/<target>/ (run by run_fuzz.sh --seeds;
// the output is committed under tests/fuzz/corpus/): real files of each format, small.
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "sparselm/data/text.hpp"
#include "sparselm/data/token_file.hpp"
#include "sparselm/io/checkpoint.hpp"
#include "sparselm/sparse/pattern_io.hpp"
#include "tiny_model.hpp"

namespace fs = std::filesystem;

static void put(const fs::path& p, const std::string& bytes) {
  fs::create_directories(p.parent_path());
  std::ofstream(p, std::ios::binary) << bytes;
}
static std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}

int main(int argc, char** argv) {
  const fs::path out = argc > 1 ? argv[1] : "corpus";
  const fs::path tmp = fs::temp_directory_path() / "sparselm-make-seeds";
  fs::create_directories(tmp);
  fuzz::tiny_job job;
  sparselm::io::save_model(tmp / "model", *job.model);
  put(out / "safetensors" / "tiny_model.safetensors", slurp(tmp / "model" / sparselm::io::model_file));
  sparselm::io::save_training_state(tmp / "state.safetensors", *job.trainer, {{"sampler", {{"position", 3}}}});
  put(out / "training_state" / "tiny_state.safetensors", slurp(tmp / "state.safetensors"));
  put(out / "safetensors" / "tiny_state.safetensors", slurp(tmp / "state.safetensors"));

  sparselm::data::write_token_file(tmp / "a.tok", std::vector<std::int32_t>{1, 2, 3, 4}, 16);
  put(out / "token_header" / "stream.tok", slurp(tmp / "a.tok"));
  sparselm::data::write_token_file(tmp / "b.tok", std::vector<std::int32_t>(12, 70000), 70001, 4, 3);
  put(out / "token_header" / "sequences_u32.tok", slurp(tmp / "b.tok"));

  for (const char* c : {"gpt-mini-train.json", "s1-tiny-train.json", "gpt-mini.json"})
    if (fs::exists(fs::path(SPARSELM_SOURCE_DIR) / "configs" / c))
      put(out / "run_config" / c, slurp(fs::path(SPARSELM_SOURCE_DIR) / "configs" / c));
  put(out / "run_config" / "flags.json",
      R"({"steps": 10, "batch_size": 2, "seq_len": 8, "trainer": {"clip": "none", "on_nonfinite": "skip"},)"
      R"( "model": {"n_layer": 1, "n_embd": 8, "n_head": 1, "n_inner": null}})");

  // encoder.json (the 256 byte tokens + merges) NUL vocab.bpe
  std::string enc = "{", alphabet;
  int id = 0;
  for (int b = 0; b < 256; ++b) {
    const bool direct = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174);
    static int shift = 0;
    const char32_t cp = direct ? char32_t(b) : char32_t(256 + shift++);
    std::string u;
    sparselm::data::append_utf8(u, cp);
    nlohmann::json key = u;
    enc += (id ? "," : "") + key.dump() + ":" + std::to_string(id);
    ++id;
  }
  enc += R"(,"ab":256,"abc":257,"bc":258})";
  put(out / "gpt2_files" / "tiny", enc + std::string(1, '\0') + "#version: 0.2\na b\nab c\nb c\n");
  put(out / "gpt2_encoder" / "text", "Hello world, it's 2024!\n\t  <|endoftext|> caf\xc3\xa9 \xf0\x9f\x98\x80 12345");
  put(out / "gpt2_encoder" / "bytes", std::string("\xff\xfe\x00\x80 abc  \r\n", 12));

  std::string pat = {char(3), char(3), char(4), char(1)};
  for (std::int32_t v : {0, 0, 0, 1, 1, 0, 2, 2}) pat.append(reinterpret_cast<const char*>(&v), 4);
  put(out / "pattern" / "grid3x3", pat);
  // (a small file: the 30 KB dev set as a seed makes every execution ~100x slower)
  put(out / "squad" / "small",
      R"({"version": "1.1", "data": [{"title": "t", "paragraphs": [{"context": "Call me Ishmael. Some years ago, )"
      R"(never mind how long precisely, I went to sea.", "qas": [{"id": "q1", "question": "Who calls?", "answers": )"
      R"([{"text": "Ishmael", "answer_start": 8}]}, {"id": "q2", "question": "Where to?", "answers": [{"text": )"
      R"("sea", "answer_start": 74}]}]}]}]})");
  put(out / "email_text" / "html_qp",
      "From x\nSubject: Win =\n big\nContent-Transfer-Encoding: quoted-printable\n\n<html><style>p{}</style>"
      "<b>Free =3D money</b>&nbsp;&amp; caf\xe9 =\nnow</html>\n");
  put(out / "email_text" / "plain", "Subject: lunch\n\nSee you at noon.\n");
  fs::remove_all(tmp);
  return 0;
}
