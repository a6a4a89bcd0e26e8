#pragma once
// SQuAD v1.1 reader: the official JSON layout
//
//   {"version": "1.1", "data": [{"title": ..., "paragraphs": [{"context": ...,
//     "qas": [{"id": ..., "question": ..., "answers": [{"text": ..., "answer_start": 12}]}]}]}]}
//
// read through json_fields, so a malformed file fails with sparselm::error naming the file, the
// path of the object and the field, e.g.
//   "dev.json: data[3].paragraphs[0].qas[2].answers[0]: field 'answer_start' must be an integer, got "x"".
// Unknown fields are errors (a SQuAD 2.0 file fails on 'is_impossible'); question ids must be
// unique.
//
// answer_start counts characters (Unicode code points) of the context, as Python does; the
// reader converts it to a byte offset into the UTF-8 context (squad_answer::start_byte).
//
// Skipped, counted and reported (squad_skips), not errors:
//   - an answer whose text is not found at answer_start in the context (or starts beyond it);
//   - a question whose answers were all skipped that way, or whose text is empty (or all white
//     space), or which has no answers;
//   - a paragraph whose context is empty (with all its questions).
//
//   sparselm::data::squad_dataset d = sparselm::data::read_squad("data/squad/dev-v1.1.json");
//   d.question_count(); d.skipped.total(); d.graded();   // graded() feeds squad_evaluate

#include <cstddef>
#include <filesystem>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "sparselm/core/error.hpp"
#include "sparselm/core/json.hpp"
#include "sparselm/data/squad_eval.hpp"
#include "sparselm/data/text.hpp"

namespace sparselm::data {

struct squad_answer {
  std::string text;
  std::size_t start_char = 0;  // code points into the context (the file's answer_start)
  std::size_t start_byte = 0;  // bytes into the UTF-8 context
};

struct squad_question {
  std::string id;
  std::string question;
  std::vector<squad_answer> answers;  // at least one
};

struct squad_paragraph {
  std::string context;
  std::vector<squad_question> questions;
};

struct squad_article {
  std::string title;
  std::vector<squad_paragraph> paragraphs;
};

struct squad_skips {
  std::size_t answers_not_found = 0;   // text not at answer_start
  std::size_t questions_without_answers = 0;  // none given, or all of them skipped
  std::size_t empty_questions = 0;
  std::size_t empty_contexts = 0;      // paragraphs
  std::size_t questions_in_empty_contexts = 0;
  std::vector<std::string> messages;   // one line each, naming the path (the first 100)

  std::size_t total() const noexcept {
    return answers_not_found + questions_without_answers + empty_questions + empty_contexts;
  }
};

struct squad_dataset {
  std::vector<squad_article> articles;
  squad_skips skipped;

  std::size_t question_count() const noexcept {
    std::size_t n = 0;
    for (const auto& a : articles)
      for (const auto& p : a.paragraphs) n += p.questions.size();
    return n;
  }
  std::size_t paragraph_count() const noexcept {
    std::size_t n = 0;
    for (const auto& a : articles) n += a.paragraphs.size();
    return n;
  }
  // Every kept question with its ground-truth texts, for squad_evaluate.
  std::vector<squad_graded_question> graded() const {
    std::vector<squad_graded_question> out;
    for (const auto& a : articles)
      for (const auto& p : a.paragraphs)
        for (const auto& q : p.questions) {
          squad_graded_question g{q.id, {}};
          for (const auto& ans : q.answers) g.answers.push_back(ans.text);
          out.push_back(std::move(g));
        }
    return out;
  }
};

namespace detail {

// Byte offset of each code point of a UTF-8 text, plus text.size() at the end.
inline std::vector<std::size_t> code_point_offsets(std::string_view text) {
  std::vector<std::size_t> off;
  const auto* b = reinterpret_cast<const unsigned char*>(text.data());
  std::size_t i = 0;
  while (i < text.size()) {
    off.push_back(i);
    i += read_utf8(b + i, b + text.size()).length;
  }
  off.push_back(text.size());
  return off;
}

inline bool blank(std::string_view s) {
  const auto* b = reinterpret_cast<const unsigned char*>(s.data());
  for (std::size_t i = 0; i < s.size();) {
    const utf8_char c = read_utf8(b + i, b + s.size());
    if (c.invalid || c.cls != char_class::whitespace) return false;
    i += c.length;
  }
  return true;
}

inline const json& squad_array(json_fields& f, const std::string& key, json& holder) {
  f.require(key);
  holder = f.get<json>(key, json());
  SPARSELM_CHECK(holder.is_array(), f.context(), ": field '", key, "' must be an array, got ", holder.dump());
  return holder;
}

inline void squad_skip(squad_skips& s, std::string line) {
  if (s.messages.size() < 100) s.messages.push_back(std::move(line));
}

}  // namespace detail

// Parses a SQuAD v1.1 document already read as JSON; `source` names it in errors.
inline squad_dataset parse_squad(const json& doc, const std::string& source) {
  squad_dataset d;
  json_fields top(doc, source);
  top.ignore({"version"});
  json data_holder;
  const json& data = detail::squad_array(top, "data", data_holder);
  top.finish();
  std::map<std::string, std::string> ids;  // id -> path
  for (std::size_t ai = 0; ai < data.size(); ++ai) {
    const std::string apath = "data[" + std::to_string(ai) + "]";
    json_fields af(data[ai], source + ": " + apath);
    squad_article article;
    af.read("title", article.title);
    json par_holder;
    const json& pars = detail::squad_array(af, "paragraphs", par_holder);
    af.finish();
    for (std::size_t pi = 0; pi < pars.size(); ++pi) {
      const std::string ppath = apath + ".paragraphs[" + std::to_string(pi) + "]";
      json_fields pf(pars[pi], source + ": " + ppath);
      squad_paragraph par;
      par.context = pf.require<std::string>("context");
      json qas_holder;
      const json& qas = detail::squad_array(pf, "qas", qas_holder);
      pf.finish();
      const bool empty_context = detail::blank(par.context);
      if (empty_context) {
        ++d.skipped.empty_contexts;
        d.skipped.questions_in_empty_contexts += qas.size();
        detail::squad_skip(d.skipped, ppath + ": empty context (paragraph and its " + std::to_string(qas.size()) +
                                          " questions skipped)");
      }
      const std::vector<std::size_t> offsets = detail::code_point_offsets(par.context);
      const std::size_t n_chars = offsets.size() - 1;
      for (std::size_t qi = 0; qi < qas.size(); ++qi) {
        const std::string qpath = ppath + ".qas[" + std::to_string(qi) + "]";
        json_fields qf(qas[qi], source + ": " + qpath);
        squad_question q;
        q.id = qf.require<std::string>("id");
        q.question = qf.require<std::string>("question");
        json ans_holder;
        const json& answers = detail::squad_array(qf, "answers", ans_holder);
        qf.finish();
        SPARSELM_CHECK(!q.id.empty(), source, ": ", qpath, ": field 'id' is empty");
        auto [it, fresh] = ids.emplace(q.id, qpath);
        SPARSELM_CHECK(fresh, source, ": ", qpath, ": duplicate question id \"", q.id, "\" (first at ", it->second, ")");
        for (std::size_t k = 0; k < answers.size(); ++k) {
          const std::string kpath = qpath + ".answers[" + std::to_string(k) + "]";
          json_fields kf(answers[k], source + ": " + kpath);
          squad_answer a;
          a.text = kf.require<std::string>("text");
          a.start_char = kf.require<std::size_t>("answer_start");
          kf.finish();
          if (empty_context) continue;
          bool found = a.start_char < n_chars && !a.text.empty();
          if (found) {
            a.start_byte = offsets[a.start_char];
            found = std::string_view(par.context).substr(a.start_byte, a.text.size()) == a.text;
          }
          if (!found) {
            ++d.skipped.answers_not_found;
            detail::squad_skip(d.skipped, kpath + ".answer_start: text \"" + a.text + "\" not found at character " +
                                              std::to_string(a.start_char) + " of the context (answer skipped)");
            continue;
          }
          q.answers.push_back(std::move(a));
        }
        if (empty_context) continue;
        if (detail::blank(q.question)) {
          ++d.skipped.empty_questions;
          detail::squad_skip(d.skipped, qpath + ".question: empty (question skipped)");
          continue;
        }
        if (q.answers.empty()) {
          ++d.skipped.questions_without_answers;
          detail::squad_skip(d.skipped, qpath + ": no answer found in the context (question skipped)");
          continue;
        }
        par.questions.push_back(std::move(q));
      }
      if (!empty_context) article.paragraphs.push_back(std::move(par));
    }
    d.articles.push_back(std::move(article));
  }
  return d;
}

inline squad_dataset read_squad(const std::filesystem::path& path) {
  return parse_squad(read_json_file(path.string(), "SQuAD file", max_dataset_json_bytes), path.string());
}

// Predictions file of the official evaluation: one JSON object {"question id": "answer text"}.
inline std::map<std::string, std::string> read_squad_predictions(const std::filesystem::path& path) {
  const json j = read_json_file(path.string(), "predictions file", max_dataset_json_bytes);
  SPARSELM_CHECK(j.is_object(), path.string(), ": predictions must be a JSON object {\"id\": \"text\"}, got ",
                 j.type_name());
  std::map<std::string, std::string> out;
  for (auto it = j.begin(); it != j.end(); ++it) {
    SPARSELM_CHECK(it->is_string(), path.string(), ": prediction for '", it.key(), "' must be a string, got ",
                   it->dump());
    out.emplace(it.key(), it->get<std::string>());
  }
  return out;
}

}  // namespace sparselm::data
