#pragma once
// Text files -> token files with the GPT-2 tokenizer, in the two layouts of docs/design/data.md.
//
// gpt mode (S2): documents joined into one stream with <|endoftext|> between them. A document is
//   a whole input file (document_split::file) or one non-empty line (document_split::line).
//   Validation is either separate inputs, or the last `validation_fraction` of the token stream
//   (moved forward to the next document start when one lies inside that part).
// wikitext mode (S1): each input file is split into articles (wikitext_articles below), each
//   article is encoded on its own, articles shorter than seq_len tokens are discarded and longer
//   ones cropped to seq_len; the file holds fixed-length sequences (header sequence_length).
//
// Directories given as inputs contribute their *.txt and *.raw files, recursively, in path order.
// Encoding runs on all OpenMP threads (one tokenizer copy each); the result does not depend on
// the thread count. Encoded tokens are held in memory until written (4 bytes per token).

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "sparselm/core/error.hpp"
#include "sparselm/core/threads.hpp"
#include "sparselm/data/gpt2_bpe.hpp"
#include "sparselm/data/text.hpp"
#include "sparselm/data/token_file.hpp"

namespace sparselm::data {

// ---------------------------------------------------------------------------------------------
// WikiText articles
// ---------------------------------------------------------------------------------------------

// Splits WikiText-style text into articles, as the S1 dataset encoder does. A line is *empty*
// when its stripped form (White_Space stripped) is empty or starts with '='. Non-empty lines
// are appended, with their line break, to the current article; two or more consecutive empty
// lines (a heading with the blank lines around it) end the article. A single blank line (between
// paragraphs) does not. So an article is the text between headings, without the headings.
inline std::vector<std::string> wikitext_articles(std::string_view text) {
  std::vector<std::string> out;
  std::string cur;
  bool was_empty = false;
  std::size_t pos = 0;
  while (pos < text.size()) {
    std::size_t nl = text.find('\n', pos);
    const std::size_t next = nl == std::string_view::npos ? text.size() : nl + 1;
    std::string_view line = text.substr(pos, next - pos);
    pos = next;
    const auto* p = reinterpret_cast<const unsigned char*>(line.data());
    const auto* end = p + line.size();
    while (p < end) {
      utf8_char c = read_utf8(p, end);
      if (c.cls != char_class::whitespace) break;
      p += c.length;
    }
    const bool empty = p == end || *p == '=';
    if (empty && was_empty && !cur.empty()) {
      out.push_back(std::move(cur));
      cur.clear();
    } else if (!empty) {
      cur += line;
    }
    was_empty = empty;
  }
  if (!cur.empty()) out.push_back(std::move(cur));
  return out;
}

// ---------------------------------------------------------------------------------------------
// Parallel encoding
// ---------------------------------------------------------------------------------------------

// Offsets at which `text` can be cut without changing its GPT-2 encoding: just before an ASCII
// white-space byte that is followed by a printable ASCII byte. Such a byte is the last character
// of a white-space run followed by non-space, and the rule always starts a piece there: the run
// before it ends a piece whether the text goes on or not (`\s+(?!\S)` keeps all but the last
// character of a run followed by non-space, and all of a run at the end), and the piece from it
// on is the same. Cuts are at least `min_chunk` bytes apart; the result starts with 0 and ends
// with text.size().
inline std::vector<std::size_t> gpt2_safe_cuts(std::string_view text, std::size_t min_chunk) {
  std::vector<std::size_t> cuts{0};
  auto ascii_space = [](unsigned char c) { return c == ' ' || (c >= 9 && c <= 13); };
  auto printable = [](unsigned char c) { return c > 0x20 && c < 0x7F; };
  std::size_t p = std::max<std::size_t>(min_chunk, 1);
  while (p + 1 < text.size()) {
    if (ascii_space(static_cast<unsigned char>(text[p])) && printable(static_cast<unsigned char>(text[p + 1]))) {
      cuts.push_back(p);
      p += std::max<std::size_t>(min_chunk, 1);
    } else {
      ++p;
    }
  }
  cuts.push_back(text.size());
  return cuts;
}

// Encodes each text with `tok`, on all threads; out[i] = tok.encode(texts[i]). Long texts are
// cut at gpt2_safe_cuts so that one large document also uses every thread.
inline std::vector<std::vector<std::int32_t>> encode_texts(const gpt2_bpe& tok, const std::vector<std::string_view>& texts,
                                                           specials sp = specials::as_text) {
  struct job {
    std::size_t text, begin, end;
  };
  constexpr std::size_t chunk = std::size_t(1) << 16;
  std::vector<job> jobs;
  for (std::size_t i = 0; i < texts.size(); ++i) {
    if (texts[i].size() <= 2 * chunk || sp == specials::allow) {
      jobs.push_back({i, 0, texts[i].size()});
      continue;
    }
    auto cuts = gpt2_safe_cuts(texts[i], chunk);
    for (std::size_t c = 0; c + 1 < cuts.size(); ++c) jobs.push_back({i, cuts[c], cuts[c + 1]});
  }
  std::vector<std::vector<std::int32_t>> parts(jobs.size());
  parallel_chunks(jobs.size(), [&](int, std::size_t b, std::size_t e) {
    gpt2_bpe local = tok;
    for (std::size_t j = b; j < e; ++j)
      local.encode(texts[jobs[j].text].substr(jobs[j].begin, jobs[j].end - jobs[j].begin), parts[j], sp);
  });
  std::vector<std::vector<std::int32_t>> out(texts.size());
  for (std::size_t j = 0; j < jobs.size(); ++j) {
    auto& dst = out[jobs[j].text];
    if (dst.empty()) dst = std::move(parts[j]);
    else dst.insert(dst.end(), parts[j].begin(), parts[j].end());
  }
  return out;
}

// ---------------------------------------------------------------------------------------------
// Dataset encoder
// ---------------------------------------------------------------------------------------------

enum class dataset_mode { gpt, wikitext };
enum class document_split { file, line };

struct encode_dataset_options {
  dataset_mode mode = dataset_mode::gpt;
  std::vector<std::filesystem::path> inputs;             // files or directories
  std::vector<std::filesystem::path> validation_inputs;  // optional separate validation text
  std::filesystem::path output;                          // training token file
  std::filesystem::path validation_output;               // needed when there is validation data
  double validation_fraction = 0.0;                      // gpt mode: held-out tail of the stream
  document_split documents = document_split::file;       // gpt mode: what one document is
  std::size_t seq_len = 0;                               // wikitext mode: sequence length
};

struct encoded_split {
  std::filesystem::path path;
  token_file_info info{};
  std::uint64_t input_bytes = 0;
  std::uint64_t documents = 0;  // documents (gpt) or articles (wikitext) read
  std::uint64_t discarded = 0;  // wikitext: articles shorter than seq_len
};

struct encode_dataset_result {
  encoded_split train;
  std::optional<encoded_split> validation;
  double seconds = 0;
};

// Regular files named by `paths`; directories contribute their *.txt / *.raw files, recursively,
// sorted by path. Errors name a missing path or an empty directory.
inline std::vector<std::filesystem::path> collect_text_files(const std::vector<std::filesystem::path>& paths) {
  namespace fs = std::filesystem;
  std::vector<fs::path> out;
  for (const auto& p : paths) {
    std::error_code ec;
    auto st = fs::status(p, ec);
    SPARSELM_CHECK(!ec && fs::exists(st), p.string(), ": ", ec ? ec.message() : std::string("no such file or directory"));
    if (fs::is_directory(st)) {
      std::vector<fs::path> found;
      try {
        for (const auto& e : fs::recursive_directory_iterator(p)) {
          if (!e.is_regular_file()) continue;
          const auto ext = e.path().extension();
          if (ext == ".txt" || ext == ".raw") found.push_back(e.path());
        }
      } catch (const fs::filesystem_error& e) {  // a symlink loop, a name too long, no permission
        fail(p.string(), ": cannot list '", e.path1().string(), "': ", e.code().message());
      }
      SPARSELM_CHECK(!found.empty(), p.string(), ": directory has no *.txt or *.raw files");
      std::sort(found.begin(), found.end());
      out.insert(out.end(), found.begin(), found.end());
    } else {
      out.push_back(p);
    }
  }
  return out;
}

namespace detail {

// The same file, also when spelled differently (relative, through symlinks, hard links).
inline bool same_file(const std::filesystem::path& a, const std::filesystem::path& b) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (fs::exists(a, ec) && fs::exists(b, ec)) return fs::equivalent(a, b, ec);
  auto norm = [&](const fs::path& p) { return fs::weakly_canonical(fs::absolute(p, ec), ec).lexically_normal(); };
  return norm(a) == norm(b);
}

// Refuses an output that is one of the inputs (it would be overwritten before or while being read)
// and two outputs that are one file (the second split would replace the first).
inline void check_outputs(const encode_dataset_options& o, const std::vector<std::filesystem::path>& inputs) {
  SPARSELM_CHECK(o.validation_output.empty() || !same_file(o.output, o.validation_output), "encode_dataset: output '",
                 o.output.string(), "' and validation output '", o.validation_output.string(), "' are the same file");
  std::vector<std::filesystem::path> all = inputs;
  if (!o.validation_inputs.empty()) {
    auto v = collect_text_files(o.validation_inputs);
    all.insert(all.end(), v.begin(), v.end());
  }
  for (const auto* out : {&o.output, &o.validation_output}) {
    if (out->empty()) continue;
    for (const auto& in : all)
      SPARSELM_CHECK(!same_file(*out, in), "encode_dataset: output '", out->string(), "' is also an input ('",
                     in.string(), "')");
  }
}

struct gpt_stream {
  std::vector<std::int32_t> ids;
  std::vector<std::size_t> doc_starts;  // token offset of each document
  std::uint64_t bytes = 0;
};

inline gpt_stream encode_gpt_stream(const gpt2_bpe& tok, const std::vector<std::filesystem::path>& files,
                                    document_split split) {
  gpt_stream s;
  std::vector<std::string> contents;
  contents.reserve(files.size());
  for (const auto& f : files) {
    contents.push_back(read_file_bytes(f));
    s.bytes += contents.back().size();
  }
  std::vector<std::string_view> docs;
  for (const auto& c : contents) {
    if (split == document_split::file) {
      if (!c.empty()) docs.emplace_back(c);
      continue;
    }
    std::string_view v(c);
    std::size_t pos = 0;
    while (pos < v.size()) {
      std::size_t nl = v.find('\n', pos);
      if (nl == std::string_view::npos) nl = v.size();
      std::string_view line = v.substr(pos, nl - pos);
      if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
      if (line.find_first_not_of(" \t\r\f\v") != std::string_view::npos) docs.push_back(line);
      pos = nl + 1;
    }
  }
  auto enc = encode_texts(tok, docs);
  const std::int32_t eot = tok.endoftext_id();
  SPARSELM_CHECK(eot >= 0 || docs.size() <= 1, "encode_dataset: the vocabulary has no <|endoftext|> to join documents");
  for (std::size_t d = 0; d < enc.size(); ++d) {
    if (d > 0) s.ids.push_back(eot);
    s.doc_starts.push_back(s.ids.size());
    s.ids.insert(s.ids.end(), enc[d].begin(), enc[d].end());
  }
  return s;
}

// The input files, for a message: "'a.txt'", "'a.txt', 'b.txt', 'c.txt' and 5 more".
inline std::string describe_inputs(const std::vector<std::filesystem::path>& files) {
  std::string s;
  for (std::size_t i = 0; i < files.size() && i < 3; ++i) s += (i ? ", '" : "'") + files[i].string() + "'";
  if (files.size() > 3) s += " and " + std::to_string(files.size() - 3) + " more";
  return s.empty() ? "no files" : s;
}

inline encoded_split write_split(const std::filesystem::path& path, std::span<const std::int32_t> ids,
                                 std::uint64_t vocab, std::uint64_t seq_len, std::uint64_t docs, std::uint64_t bytes,
                                 const std::string& what) {
  SPARSELM_CHECK(!ids.empty(), path.string(), ": empty dataset: ", what, " produced no tokens");
  encoded_split e;
  e.path = path;
  e.info = write_token_file(path, ids, vocab, seq_len, docs);
  e.documents = docs;
  e.input_bytes = bytes;
  return e;
}

inline encoded_split encode_wikitext_split(const gpt2_bpe& tok, const std::vector<std::filesystem::path>& files,
                                           const std::filesystem::path& out, std::size_t seq_len) {
  std::vector<std::string> articles;
  std::uint64_t bytes = 0;
  for (const auto& f : files) {
    std::string text = read_file_bytes(f);
    bytes += text.size();
    auto a = wikitext_articles(text);
    articles.insert(articles.end(), std::make_move_iterator(a.begin()), std::make_move_iterator(a.end()));
  }
  std::vector<std::string_view> views(articles.begin(), articles.end());
  auto enc = encode_texts(tok, views);
  std::vector<std::int32_t> ids;
  std::uint64_t kept = 0;
  for (auto& e : enc) {
    if (e.size() < seq_len) continue;
    ids.insert(ids.end(), e.begin(), e.begin() + std::ptrdiff_t(seq_len));
    ++kept;
  }
  SPARSELM_CHECK(kept > 0, out.string(), ": empty dataset: all ", articles.size(), " articles are shorter than seq_len ",
                 seq_len, " tokens");
  encoded_split s = write_split(out, ids, tok.vocab_size(), seq_len, kept, bytes, "wikitext encoding");
  s.documents = articles.size();
  s.discarded = articles.size() - kept;
  return s;
}

}  // namespace detail

// Encodes text into token file(s) as described at the top of this header.
inline encode_dataset_result encode_dataset(const gpt2_bpe& tok, const encode_dataset_options& o) {
  const auto t0 = std::chrono::steady_clock::now();
  SPARSELM_CHECK(!o.inputs.empty(), "encode_dataset: no input files given");
  SPARSELM_CHECK(!o.output.empty(), "encode_dataset: no output path given");
  SPARSELM_CHECK(o.validation_fraction >= 0.0 && o.validation_fraction < 1.0,
                 "encode_dataset: validation fraction must be in [0, 1), got ", o.validation_fraction);
  SPARSELM_CHECK(o.validation_fraction == 0.0 || o.validation_inputs.empty(),
                 "encode_dataset: give either a validation fraction or validation inputs, not both");
  const bool want_valid = o.validation_fraction > 0.0 || !o.validation_inputs.empty();
  SPARSELM_CHECK(!want_valid || !o.validation_output.empty(),
                 "encode_dataset: validation data requested but no validation output path given");
  SPARSELM_CHECK(want_valid || o.validation_output.empty(),
                 "encode_dataset: a validation output path needs validation inputs or a validation fraction");
  const auto files = collect_text_files(o.inputs);
  detail::check_outputs(o, files);
  encode_dataset_result r;
  if (o.mode == dataset_mode::wikitext) {
    SPARSELM_CHECK(o.seq_len > 0, "encode_dataset: wikitext mode needs seq_len > 0");
    SPARSELM_CHECK(o.validation_fraction == 0.0,
                   "encode_dataset: wikitext mode takes validation inputs, not a validation fraction");
    r.train = detail::encode_wikitext_split(tok, files, o.output, o.seq_len);
    if (!o.validation_inputs.empty())
      r.validation =
          detail::encode_wikitext_split(tok, collect_text_files(o.validation_inputs), o.validation_output, o.seq_len);
  } else {
    const std::uint64_t V = tok.vocab_size();
    auto train = detail::encode_gpt_stream(tok, files, o.documents);
    if (o.validation_fraction > 0.0) {
      const std::size_t n = train.ids.size();
      std::size_t n_val = std::size_t(std::llround(o.validation_fraction * double(n)));
      SPARSELM_CHECK(n_val > 0 && n_val < n, "encode_dataset: validation fraction ", o.validation_fraction, " of ", n,
                     " tokens leaves an empty train or validation part");
      std::size_t cut = n - n_val;
      // Start validation at a document boundary when one lies inside the held-out part.
      auto it = std::lower_bound(train.doc_starts.begin(), train.doc_starts.end(), cut);
      if (it != train.doc_starts.end() && *it < n) cut = *it;
      const std::uint64_t docs_train = std::uint64_t(std::lower_bound(train.doc_starts.begin(), train.doc_starts.end(), cut) -
                                                     train.doc_starts.begin());
      const std::uint64_t docs_total = train.doc_starts.size();
      std::span<const std::int32_t> all(train.ids);
      // The <|endoftext|> just before a document start ends the training part.
      r.train = detail::write_split(o.output, all.first(cut), V, 0, docs_train, train.bytes, "the training split");
      r.validation = detail::write_split(o.validation_output, all.subspan(cut), V, 0, docs_total - docs_train, 0,
                                         "the validation split");
    } else {
      r.train = detail::write_split(o.output, train.ids, V, 0, train.doc_starts.size(), train.bytes,
                                    "the input (" + detail::describe_inputs(files) + ")");
      if (!o.validation_inputs.empty()) {
        const auto vfiles = collect_text_files(o.validation_inputs);
        auto valid = detail::encode_gpt_stream(tok, vfiles, o.documents);
        r.validation = detail::write_split(o.validation_output, valid.ids, V, 0, valid.doc_starts.size(), valid.bytes,
                                           "the validation input (" + detail::describe_inputs(vfiles) + ")");
      }
    }
  }
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

}  // namespace sparselm::data
