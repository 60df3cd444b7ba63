"""csrc/sources.txt, the one list of the kernel core's sources and ISA flags (read by
CMakeLists.txt and tests/native/build.sh), is complete and consistent. No compiling."""

from __future__ import annotations

from collections import Counter

from conftest import REPO

MANIFEST = REPO / "csrc" / "sources.txt"
ARCHS = {"any", "x86", "arm"}


def parse() -> tuple[dict[str, tuple[str, list[str]]], dict[str, list[str]], list[tuple[str, str]]]:
    """(group -> (arch, flags), group -> zig flags, [(group, path)]) in file order."""
    groups: dict[str, tuple[str, list[str]]] = {}
    zig: dict[str, list[str]] = {}
    sources: list[tuple[str, str]] = []
    for n, line in enumerate(MANIFEST.read_text().splitlines(), 1):
        f = line.split()
        if not f or f[0].startswith("#"):
            continue
        if f[0] == "flags":
            assert len(f) >= 3 and f[2] in ARCHS, f"line {n}: flags GROUP any|x86|arm [FLAG...]"
            assert f[1] not in groups, f"line {n}: group {f[1]} defined twice"
            groups[f[1]] = (f[2], f[3:])
        elif f[0] == "zigflags":
            assert len(f) >= 3 and f[1] in groups, f"line {n}: zigflags for undefined {f[1]}"
            zig[f[1]] = f[2:]
        else:
            assert len(f) == 2, f"line {n}: GROUP PATH"
            # CMake and build.sh need the flags line first
            assert f[0] in groups, f"line {n}: group {f[0]} has no flags line before it"
            sources.append((f[0], f[1]))
    return groups, zig, sources


def core_files() -> set[str]:
    csrc = REPO / "csrc"
    found = [*csrc.glob("*.c"), *(csrc / "cpu").glob("*.c"), *(csrc / "kernels").rglob("*.c")]
    return {p.relative_to(REPO).as_posix() for p in found}


def test_every_core_file_is_listed_exactly_once_and_every_listed_file_exists():
    _, _, sources = parse()
    counts = Counter(path for _, path in sources)
    assert not [p for p, c in counts.items() if c > 1], "listed more than once"
    assert sorted(core_files() - counts.keys()) == [], "core .c files missing from sources.txt"
    assert [p for p in counts if not (REPO / p).is_file()] == [], "listed files that don't exist"
    assert sorted(counts.keys() - core_files()) == [], "listed files outside the core"


def test_every_group_has_flags_and_isa_files_are_in_their_family():
    groups, zig, sources = parse()
    used = {g for g, _ in sources}
    assert used == groups.keys(), "groups defined but unused, or used without a flags line"
    for g, (arch, flags) in groups.items():
        # an ISA group carries its ISA flags; the flag-less groups are `portable` and `x86`
        assert bool(flags) == (g not in ("portable", "x86")), g
        # Arm: gcc/clang's -march spelling for CMake, zig cc's -mcpu spelling for build.sh
        assert arch != "arm" or g in zig, g
    for g, path in sources:
        arch = groups[g][0]
        if arch == "any":
            assert "_scalar" in path or "/kernels/" not in path, path  # no ISA code everywhere
        else:
            assert "_scalar" not in path, path


def test_the_builds_take_the_core_sources_and_flags_from_the_manifest():
    # the file names and ISA flags live only in sources.txt, not again in the two builds' code
    def code(path: str) -> str:
        lines = (REPO / path).read_text().splitlines()
        return "\n".join(ln for ln in lines if not ln.lstrip().startswith("#"))

    cmake, build_sh = code("CMakeLists.txt"), code("tests/native/build.sh")
    assert "csrc/sources.txt" in cmake and "CMAKE_CONFIGURE_DEPENDS" in cmake
    assert "csrc/sources.txt" in build_sh
    for path in core_files():
        name = path.rsplit("/", 1)[1]
        assert name not in cmake and name not in build_sh, name
    groups, zig, _ = parse()
    for flags in [*(f for _, f in groups.values()), *zig.values()]:
        if flags:
            assert " ".join(flags) not in build_sh, flags
            assert " ".join(flags) not in cmake, flags
