"""Without a GPU: compare the machine code of every kernel in two `cuobjdump -sass` listings,
kernel by kernel, to check that a change leaves the kernels it does not target byte for byte as
they were (ptxas reschedules a kernel for changes that look unrelated: a helper returning
either of two loads moved 222 of 300 norm kernels, `cuda-kernels-notes-H100.md` round 21).

Build each listing with `benchmarks/cpu/sass.sh` (it leaves `$OUT_DIR/SOURCE.sass`); for an
older revision, from a worktree of it (`git worktree add /tmp/old REV`). Then:

    python benchmarks/cpu/sass_compare.py /tmp/old-sass/norm.sass /tmp/new-sass/norm.sass

Kernels are matched by mangled name, with the anonymous namespace's per-build hash removed;
`--rename REGEX REPLACEMENT` (repeatable) rewrites the new listing's names first, e.g. to drop a
template argument the change appended with its default. Exit status 1 if any matched kernel
differs or a kernel of the old listing is missing from the new.
"""

import argparse
import re
import sys
from pathlib import Path

FUNCTION = re.compile(r"Function : (\S+)")
INSTRUCTION = re.compile(r"\s*/\*[0-9a-f]{4}\*/\s*(.*?)\s*;")
ANONYMOUS = re.compile(r"_GLOBAL__N__[0-9a-f]+_")


def kernels(path: Path, renames: list[tuple[str, str]]) -> dict[str, list[str]]:
    """Each kernel's instructions (addresses and encodings dropped), by normalized name."""
    found: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in path.read_text().splitlines():
        function = FUNCTION.search(line)
        if function:
            name = ANONYMOUS.sub("_GLOBAL__N__", function.group(1))
            for pattern, replacement in renames:
                name = re.sub(pattern, replacement, name)
            current = found.setdefault(name, [])
            continue
        instruction = INSTRUCTION.match(line)
        if current is not None and instruction:
            current.append(instruction.group(1))
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("old", type=Path, help="cuobjdump -sass listing before the change")
    parser.add_argument("new", type=Path, help="the listing after it")
    parser.add_argument(
        "--rename",
        nargs=2,
        action="append",
        default=[],
        metavar=("REGEX", "REPLACEMENT"),
        help="rewrite the new listing's kernel names (repeatable)",
    )
    parser.add_argument("--show", type=int, default=20, help="differing kernels to list")
    args = parser.parse_args(argv)
    old = kernels(args.old, [])
    new = kernels(args.new, [tuple(r) for r in args.rename])
    matched = [name for name in old if name in new]
    differ = [name for name in matched if old[name] != new[name]]
    missing = [name for name in old if name not in new]
    added = [name for name in new if name not in old]
    print(
        f"old {len(old)} kernels, new {len(new)}: {len(matched) - len(differ)} the same, "
        f"{len(differ)} differ, {len(missing)} missing from the new, {len(added)} only in it"
    )
    for name in differ[: args.show]:
        print(f"  differs ({len(old[name])} -> {len(new[name])} instructions): {name}")
    for name in missing[: args.show]:
        print(f"  missing: {name}")
    return 1 if differ or missing else 0


if __name__ == "__main__":
    sys.exit(main())
