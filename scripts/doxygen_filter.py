#!/usr/bin/python3
"""Doxygen input filter (docs/Doxyfile, FILTER_PATTERNS). The headers document in plain `//`
comments; this lets Doxygen read them: a header's opening comment becomes its @file description,
and a full-line `//` comment documents what follows it (as `///` would; Doxygen ignores those in
function bodies). Trailing comments stay plain. Lines are kept one for one, so a warning names the
header's own line. The comments' text is prose, not markup: backslashes, `<`, `>`, `&` and `#` are
escaped, so regular expressions, `<dir>` placeholders and `a->b` read as written; Doxygen commands
are written with `@` (`@param x ...`, `@tparam`, `@return`, `@throws`) and are checked."""
import re
import sys

COMMENT = re.compile(r"^(\s*)//(?!/)(.*)$")


def prose(text):
    text = (text.replace("\\", "\\\\").replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
            .replace("#", "\\#"))
    # `::x` after a non-identifier (`Opt<bf16>::step`, `::x`) is an explicit link request to Doxygen
    return re.sub(r"(^|[^A-Za-z0-9_])::", r"\1\\::", text)


def main():
    with open(sys.argv[1], encoding="utf-8") as f:
        lines = f.read().split("\n")
    out, opening, filed = [], True, False
    for line in lines:
        m = COMMENT.match(line)
        if m:
            ind, text = m.groups()
            text = prose(text)
            if opening and not filed:
                out.append(f"{ind}/** @file */ ///{text}")
                filed = True
            else:
                out.append(f"{ind}///{text}")
            continue
        if opening and line.strip() and not line.strip().startswith("#pragma"):
            opening = False
        out.append(line)
    sys.stdout.write("\n".join(out))


if __name__ == "__main__":
    main()
