#!/usr/bin/env python3
"""ctest layering.includes: no header of the library includes a header of a folder above its own.

The folder order is read from docs/design/architecture.md, from its one line of the form

    Include order: core < parallel < sparse < ... < layers = policies < ...

where `a < b` means b's headers may include a's, and `a = b` puts two folders on one level (they
may not include each other). A header under include/sparselm/<folder>/ (any depth) may include
headers of its own folder and of folders of lower levels only. A folder missing from the order is
an error too, so a new folder has to be placed. Top-level headers (the umbrella sparselm.hpp,
version.hpp) may include anything.

    check_layering.py <repo root>           check the tree; exit 1 naming every back edge
    check_layering.py --self-test           check that a back edge and an unplaced folder are caught
"""

import pathlib
import re
import sys
import tempfile

INCLUDE = re.compile(r'^\s*#\s*include\s*[<"]sparselm/([A-Za-z0-9_]+)/([^">]+)[">]')
ORDER = re.compile(r'^Include order:\s*(.+?)\s*$')


def read_order(doc: pathlib.Path) -> dict:
    """Folder -> level, from the doc's 'Include order:' line."""
    lines = [m.group(1) for m in (ORDER.match(l) for l in doc.read_text(encoding="utf-8").splitlines()) if m]
    if len(lines) != 1:
        raise SystemExit(f"{doc}: expected one line 'Include order: a < b = c < ...', found {len(lines)}")
    level = {}
    for i, group in enumerate(lines[0].strip("`").split("<")):
        for name in group.split("="):
            name = name.strip().strip("`")
            if not re.fullmatch(r"[a-z_]+", name) or name in level:
                raise SystemExit(f"{doc}: bad or repeated folder '{name}' in the include order")
            level[name] = i
    return level


def check(root: pathlib.Path) -> list:
    level = read_order(root / "docs" / "design" / "architecture.md")
    inc = root / "include" / "sparselm"
    problems = []
    for folder in sorted(p for p in inc.iterdir() if p.is_dir()):
        if folder.name not in level:
            problems.append(f"include/sparselm/{folder.name}/: folder not placed in the include order "
                            "(docs/design/architecture.md, 'Include order:')")
            continue
        for header in sorted(folder.rglob("*.hpp")):
            for n, line in enumerate(header.read_text(encoding="utf-8").splitlines(), 1):
                m = INCLUDE.match(line)
                if not m or m.group(1) == folder.name:
                    continue
                target = m.group(1)
                rel = header.relative_to(root)
                if target not in level:
                    problems.append(f"{rel}:{n}: includes sparselm/{target}/{m.group(2)}, a folder not in the include order")
                elif level[target] >= level[folder.name]:
                    how = "the same level as" if level[target] == level[folder.name] else "above"
                    problems.append(f"{rel}:{n}: {folder.name}/ includes sparselm/{target}/{m.group(2)}, "
                                    f"but {target}/ is {how} {folder.name}/ in the include order")
    return problems


def self_test() -> int:
    with tempfile.TemporaryDirectory() as d:
        root = pathlib.Path(d)
        (root / "docs" / "design").mkdir(parents=True)
        (root / "docs" / "design" / "architecture.md").write_text("x\nInclude order: core < layers = policies < models\n")
        for f, text in {"core/a.hpp": '#include "sparselm/core/b.hpp"\n',
                        "layers/l.hpp": '#include "sparselm/core/a.hpp"\n',
                        "models/m.hpp": '#include "sparselm/layers/l.hpp"\n#include "sparselm/policies/p.hpp"\n',
                        "policies/p.hpp": "#include <vector>\n"}.items():
            (root / "include" / "sparselm" / f).parent.mkdir(parents=True, exist_ok=True)
            (root / "include" / "sparselm" / f).write_text(text)
        ok = check(root)
        assert ok == [], ok
        (root / "include" / "sparselm" / "policies" / "p.hpp").write_text('#include "sparselm/layers/l.hpp"\n')
        (root / "include" / "sparselm" / "core" / "detail").mkdir()
        (root / "include" / "sparselm" / "core" / "detail" / "d.hpp").write_text('  #  include <sparselm/models/m.hpp>\n')
        (root / "include" / "sparselm" / "extra").mkdir()
        bad = check(root)
        assert len(bad) == 3, bad
        assert "core/detail/d.hpp:1: core/ includes sparselm/models/m.hpp, but models/ is above core/" in bad[0], bad
        assert "include/sparselm/extra/: folder not placed" in bad[1], bad
        assert "policies/p.hpp:1: policies/ includes sparselm/layers/l.hpp, but layers/ is the same level as" in bad[2], bad
    print("layering self-test: ok")
    return 0


def main() -> int:
    if sys.argv[1:] == ["--self-test"]:
        return self_test()
    if len(sys.argv) != 2:
        print(__doc__)
        return 2
    problems = check(pathlib.Path(sys.argv[1]))
    for p in problems:
        print(p)
    if problems:
        print(f"layering: {len(problems)} include(s) against the folder order")
        return 1
    print("layering: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
