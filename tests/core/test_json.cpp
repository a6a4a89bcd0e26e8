#include <doctest/doctest.h>

#include <sys/stat.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>

#include "sparselm/core/json.hpp"

// Each test file is its own namespace: the area's files are compiled as one unity translation unit
// (tests/CMakeLists.txt), and their helpers must not meet.
namespace SPARSELM_UNITY_ID {

using namespace sparselm;

namespace {
// The message of the sparselm::error that f throws ("" when it does not throw).
template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const sparselm::error& e) {
    return e.what();
  }
  return "";
}
}  // namespace

TEST_CASE("json_fields: reads, defaults and checks name the context and the field") {
  json j = json::parse(R"({"n": 3, "x": 0.5, "flag": true, "name": "adamw", "whole": 1e4})");
  json_fields f(j, "cfg.json");
  CHECK(f.get("n", std::size_t(7)) == 3);
  CHECK(f.get("absent", std::size_t(7)) == 7);
  float x = 0;
  CHECK(f.read("x", x, in_range(0.0, 1.0)));
  CHECK(x == 0.5f);
  CHECK(f.get("flag", false));
  CHECK(f.get("name", std::string()) == "adamw");
  CHECK(f.get("whole", 0) == 10000);  // a whole-valued float is an integer
  f.finish();

  json bad = json::parse(R"({"n": 0, "x": 1.5, "neg": -2, "frac": 2.5, "s": 3, "b": 1})");
  json_fields g(bad, "cfg.json");
  CHECK(error_of([&] { g.get("n", std::size_t(1), at_least(1)); }) == "cfg.json: field 'n' must be >= 1, got 0");
  CHECK(error_of([&] { g.get("x", 0.0, in_range(0.0, 1.0)); }) == "cfg.json: field 'x' must be in [0, 1), got 1.5");
  CHECK(error_of([&] { g.get("neg", std::size_t(1)); }) == "cfg.json: field 'neg' must not be negative, got -2");
  CHECK(error_of([&] { g.get("frac", 1); }) == "cfg.json: field 'frac' must be an integer, got 2.5");
  CHECK(error_of([&] { g.get("s", std::string()); }) == "cfg.json: field 's' must be a string, got 3");
  CHECK(error_of([&] { g.get("b", false); }) == "cfg.json: field 'b' must be true or false, got 1");
  CHECK(error_of([&] { g.require("missing"); }) == "cfg.json: missing required field 'missing'");
}

TEST_CASE("json_fields: sizes that do not fit the target type are errors, not wrapped values") {
  json j = json::parse(R"({"huge": 1e30, "big": 18446744073709551615, "i": 4294967296, "neg": -1e300})");
  json_fields f(j, "cfg");
  CHECK(error_of([&] { f.get("huge", std::size_t(1)); }).find("field 'huge' is out of range") != std::string::npos);
  CHECK(f.get("big", std::uint64_t(0)) == 18446744073709551615ull);
  CHECK(error_of([&] { f.get("big", std::int64_t(0)); }).find("field 'big' is out of range") != std::string::npos);
  CHECK(error_of([&] { f.get("i", 0); }).find("field 'i' is out of range") != std::string::npos);
  CHECK(error_of([&] { f.get("neg", 0); }).find("field 'neg' is out of range") != std::string::npos);
  CHECK(f.get("huge", 0.0f) == 1e30f);
  CHECK(error_of([&] { f.get("neg", 0.0f); }).find("field 'neg' is out of range, got -1e+300") != std::string::npos);
}

TEST_CASE("json_fields: null is refused unless the key is declared nullable") {
  json j = json::parse(R"({"n_inner": null, "lr": null})");
  json_fields f(j, "cfg");
  CHECK(error_of([&] { f.get("lr", 0.1); }) ==
        "cfg: field 'lr' is null (give it a value, or remove it to use the default)");
  f.nullable({"n_inner"});
  CHECK_FALSE(f.has("n_inner"));
  CHECK(f.get("n_inner", std::size_t(5)) == 5);
}

TEST_CASE("json_fields: unknown fields are named with the known ones; type tags and enums") {
  json j = json::parse(R"({"type": "sgd", "momentum": 0.9, "betas": [0.9, 0.99], "nesterov": false})");
  json_fields f(j, "sgd config");
  f.type_tag("sgd");
  f.get("momentum", 0.0);
  f.ignore({"nesterov"});
  CHECK(error_of([&] { f.finish(); }) == "sgd config: unknown field 'betas' (known: momentum, nesterov, type)");
  json_fields g(j, "adam config");
  CHECK(error_of([&] { g.type_tag("adam"); }) == "adam config: field 'type' must be \"adam\", got \"sgd\"");

  enum class colour { red, blue };
  auto parse = [](const std::string& s, const std::string& label) {
    if (s == "red") return colour::red;
    if (s == "blue") return colour::blue;
    fail(label, ": unknown colour '", s, "'");
  };
  json c = json::parse(R"({"a": "blue", "b": "green"})");
  json_fields h(c, "paint");
  colour v = colour::red;
  CHECK(h.read_enum("a", v, parse));
  CHECK(v == colour::blue);
  CHECK(error_of([&] { h.read_enum("b", v, parse); }) == "paint: field 'b': unknown colour 'green'");
  CHECK_FALSE(h.read_enum("absent", v, parse));
}

TEST_CASE("read_json_file: missing, non-regular, invalid and deeply nested files are named errors") {
  namespace fs = std::filesystem;
  const fs::path dir = fs::path(SPARSELM_TEST_TMPDIR) / "json";
  fs::create_directories(dir);

  CHECK(error_of([&] { read_json_file((dir / "absent.json").string()); }).find("cannot open config file") !=
        std::string::npos);
  CHECK(error_of([&] { read_json_file(dir.string()); }).find("is not a regular file") != std::string::npos);
  const fs::path fifo = dir / "fifo.json";
  fs::remove(fifo);
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  CHECK(error_of([&] { read_json_file(fifo.string()); }).find("is not a regular file") != std::string::npos);

  const fs::path broken = dir / "broken.json";
  std::ofstream(broken) << "{\"a\": ";
  CHECK(error_of([&] { read_json_file(broken.string()); }).find("is not valid JSON") != std::string::npos);

  const fs::path deep = dir / "deep.json";
  std::ofstream(deep) << std::string(100000, '[') << std::string(100000, ']');
  CHECK(error_of([&] { read_json_file(deep.string()); }).find("nested 100000 levels deep (the limit is 256)") !=
        std::string::npos);
  // brackets inside strings do not count
  const fs::path strings = dir / "strings.json";
  std::ofstream(strings) << "{\"a\": \"" << std::string(1000, '[') << "\\\"\"}";
  CHECK(read_json_file(strings.string())["a"].get<std::string>().size() == 1001);
}

TEST_CASE("apply_override sets nested keys and names a path through a non-object") {
  json j = json::parse(R"({"optimizer": {"lr": 1}, "steps": 3})");
  apply_override(j, "optimizer.lr=0.5");
  apply_override(j, "data.train=a.tok");
  CHECK(j["optimizer"]["lr"].get<double>() == 0.5);
  CHECK(j["data"]["train"].get<std::string>() == "a.tok");
  CHECK(error_of([&] { apply_override(j, "steps.x=1"); }) == "override 'steps.x=1': 'steps' is not an object");
  CHECK(error_of([&] { apply_override(j, "novalue"); }) == "override 'novalue': expected key.path=value");
}

TEST_CASE("a key named twice in one object is an error naming the key, its path and the source") {
  // nlohmann keeps the last of two equal keys: {"steps": 2, "steps": 99999} trained 99,999 steps
  CHECK(error_of([] { parse_json(R"({"steps": 2, "steps": 99999})", "run.json"); }) ==
        "run.json: duplicate key 'steps' (each key may appear once in an object)");
  CHECK(error_of([] { parse_json(R"({"optimizer": {"type": "sgd", "lr": 1, "type": "adamw"}})", "run.json"); }) ==
        "run.json: duplicate key 'optimizer.type' (each key may appear once in an object)");
  // the same key in sibling objects, or in objects of an array, is fine
  CHECK(parse_json(R"({"a": {"x": 1}, "b": {"x": 2}, "c": [{"x": 1}, {"x": 2}]})", "ok.json")["b"]["x"] == 2);
  json j = json::object();
  CHECK(error_of([&] { apply_override(j, R"(model={"n_layer": 1, "n_layer": 2})"); }) ==
        R"(--set model={"n_layer": 1, "n_layer": 2}: duplicate key 'n_layer' (each key may appear once in an object))");
  apply_override(j, "steps=1e999");  // beyond double range: not JSON, the text itself (its reader refuses it)
  CHECK(j["steps"] == "1e999");
}

}  // namespace SPARSELM_UNITY_ID
