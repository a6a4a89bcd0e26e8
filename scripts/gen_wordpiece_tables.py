#!/usr/bin/env python3
"""Generates include/sparselm/data/wordpiece_tables.hpp: the Unicode data of BERT's uncased basic
tokenizer, as a sorted range table of character classes and a folding table.

    python3 scripts/gen_wordpiece_tables.py > include/sparselm/data/wordpiece_tables.hpp

Classes (one per code point, the first that applies):
  control  removed by text cleaning: U+0000, U+FFFD and General_Category C* (Cc Cf Cs Co Cn)
           except tab, newline and carriage return
  space    becomes a word boundary: space, tab, newline, carriage return, Zs, and the line and
           paragraph separators U+2028/U+2029 (which Python's str.split also splits on)
  cjk      a CJK ideograph (the blocks BERT lists): a word of its own
  punct    ASCII 33-47, 58-64, 91-96, 123-126, and General_Category P*: a word of its own
  drop     removed by lower-casing + NFD + dropping Mn marks (the combining marks themselves),
           all of canonical combining class > 0
  drop_starter  the same, but with a canonical combining class 0 somewhere in its decomposition:
           it ends a run of combining marks that NFD's canonical ordering sorts
  other    everything else
Folding: the code points whose lower-case NFD form without Mn marks differs from themselves, and
is not empty (Hangul syllables are decomposed in code), map to that form (1-3 code points),
written as "cp>a.b.c;" entries in hex.
Final sigma: Python's str.lower() turns U+03A3 into final U+03C2 when a cased character precedes
it and none follows it, skipping case-ignorable characters both ways. The two properties are read
off str.lower() itself (see sigma_class), so the table is exactly the Python's.
Canonical ordering: the code points that survive folding with a non-zero canonical combining
class (a few Mc marks) are listed with their class; NFD sorts runs of them.
The Unicode version is that of the Python running the script (unicodedata.unidata_version) and is
recorded in the header.
"""
import sys
import unicodedata

CONTROL, SPACE, CJK, PUNCT, DROP, DROP_STARTER, OTHER = "control", "space", "cjk", "punct", "drop", "drop_starter", None
CASED, IGNORABLE = "cased", "case_ignorable"
CJK_RANGES = [(0x4E00, 0x9FFF), (0x3400, 0x4DBF), (0x20000, 0x2A6DF), (0x2A700, 0x2B73F), (0x2B740, 0x2B81F),
              (0x2B820, 0x2CEAF), (0xF900, 0xFAFF), (0x2F800, 0x2FA1F)]


def hangul(cp):
    return 0xAC00 <= cp <= 0xD7A3


def fold(cp):
    ch = chr(cp)
    return "".join(d for d in unicodedata.normalize("NFD", ch.lower()) if unicodedata.category(d) != "Mn")


def char_class(cp):
    ch = chr(cp)
    cat = unicodedata.category(ch)
    if ch in "\t\n\r " or cat == "Zs" or cp in (0x2028, 0x2029):
        return SPACE
    if cp == 0 or cp == 0xFFFD or cat.startswith("C"):
        return CONTROL
    if any(a <= cp <= b for a, b in CJK_RANGES):
        return CJK
    if 33 <= cp <= 47 or 58 <= cp <= 64 or 91 <= cp <= 96 or 123 <= cp <= 126 or cat.startswith("P"):
        return PUNCT
    if not hangul(cp) and fold(cp) == "":  # surrogates were caught as C* above
        nfd = unicodedata.normalize("NFD", ch.lower())
        return DROP_STARTER if any(unicodedata.combining(d) == 0 for d in nfd) else DROP
    return OTHER


def sigma_class(cp):
    """CASED, IGNORABLE or OTHER for Python's final-sigma rule, measured with str.lower():
    "AΣcA" gives ς exactly when c is neither case-ignorable nor cased, "cΣ" exactly when c is
    cased and not case-ignorable; a case-ignorable character is skipped, so whether it is also
    cased never matters."""
    if 0xD800 <= cp <= 0xDFFF:
        return OTHER
    ch = chr(cp)
    neither = ("A\u03a3" + ch + "A").lower()[1] == "\u03c2"
    cased = (ch + "\u03a3").lower()[-1] == "\u03c2"
    return CASED if cased else OTHER if neither else IGNORABLE


def add_range(ranges, cp, c):
    if ranges and ranges[-1][2] == c and ranges[-1][1] == cp - 1:
        ranges[-1][1] = cp
    else:
        ranges.append([cp, cp, c])


def write_table(w, comment, declaration, items, per_line):
    w(f"// {comment}\n")
    w(f"inline constexpr {declaration}[{len(items)}] = {{\n")
    for i in range(0, len(items), per_line):
        w("    " + ", ".join(items[i:i + per_line]) + ",\n")
    w("};\n\n")


def main():
    ranges, sigma, folds, reorder = [], [], [], set()
    for cp in range(0x110000):
        c = char_class(cp)
        if c is not OTHER:
            add_range(ranges, cp, c)
        sc = sigma_class(cp)
        if sc is not OTHER:
            add_range(sigma, cp, sc)
        if 0xD800 <= cp <= 0xDFFF or hangul(cp) or c in (CONTROL, DROP, DROP_STARTER):
            continue
        f = fold(cp)
        if f != chr(cp):
            folds.append((cp, [ord(x) for x in f]))
        kept_marks = [d for d in f if unicodedata.combining(d)]
        if kept_marks:
            # the C++ side sorts the kept marks only; that is NFD's order when no dropped
            # starter (class 0) hides inside a decomposition that keeps a mark
            nfd = unicodedata.normalize("NFD", chr(cp).lower())
            assert not any(unicodedata.category(d) == "Mn" and unicodedata.combining(d) == 0 for d in nfd), hex(cp)
            reorder.update(ord(d) for d in kept_marks)
    w = sys.stdout.write
    w("#pragma once\n")
    w(f"// GENERATED by scripts/gen_wordpiece_tables.py from Python's unicodedata (Unicode {unicodedata.unidata_version}).\n")
    w("// Do not edit by hand; rerun the script. The Unicode data of BERT's uncased basic tokenizer\n")
    w("// (data/wordpiece.hpp): character classes, lower-case + accent-stripping folds, the final-sigma\n")
    w("// context classes and the combining classes that canonical ordering needs.\n\n")
    w("#include <cstdint>\n\nnamespace sparselm::data::detail {\n\n")
    w(f'inline constexpr const char* wordpiece_tables_version = "{unicodedata.unidata_version}";\n\n')
    w("enum class wp_class : std::uint8_t { other = 0, control, space, cjk, punct, drop, drop_starter };\n")
    w("enum class wp_sigma : std::uint8_t { other = 0, cased, case_ignorable };\n\n")
    w("struct wp_range {\n  char32_t first, last;\n  wp_class cls;\n};\n")
    w("struct wp_sigma_range {\n  char32_t first, last;\n  wp_sigma cls;\n};\n")
    w("struct wp_combining {\n  char32_t cp;\n  std::uint8_t ccc;\n};\n\n")
    write_table(w, "Sorted, disjoint, inclusive ranges; code points in none of them are wp_class::other.",
                "wp_range wp_class_ranges", [f"{{0x{a:X}, 0x{b:X}, wp_class::{c}}}" for a, b, c in ranges], 6)
    write_table(w, "Python's Cased and Case_Ignorable properties (case-ignorable wins), for the final sigma.",
                "wp_sigma_range wp_sigma_ranges", [f"{{0x{a:X}, 0x{b:X}, wp_sigma::{c}}}" for a, b, c in sigma], 8)
    write_table(w, "The code points left by folding that have a non-zero canonical combining class, with it.",
                "wp_combining wp_combining_classes",
                [f"{{0x{cp:X}, {unicodedata.combining(chr(cp))}}}" for cp in sorted(reorder)], 8)
    w(f"// {len(folds)} folds, sorted by code point: \"cp>a.b.c;\" in hex.\n")
    w("inline constexpr const char* wp_folds =\n")
    entries = [f"{cp:X}>" + ".".join(f"{x:X}" for x in out) + ";" for cp, out in folds]
    line = ""
    for e in entries:
        if len(line) + len(e) > 190:
            w(f'    "{line}"\n')
            line = ""
        line += e
    w(f'    "{line}";\n\n')
    w("}  // namespace sparselm::data::detail\n")


if __name__ == "__main__":
    main()
