"""The kernel core's build manifest (csrc/sources.txt, read by csrc/manifest.py for
CMakeLists.txt and tests/native/build.sh) is complete and consistent, and a kernel file needs
no line anywhere but its tier's list. No compiling."""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from collections import Counter

import pytest

from conftest import REPO

_spec = importlib.util.spec_from_file_location("if_manifest", REPO / "csrc" / "manifest.py")
manifest = importlib.util.module_from_spec(_spec)
sys.modules["if_manifest"] = manifest  # dataclasses look their module up
_spec.loader.exec_module(manifest)


def core_files() -> set[str]:
    csrc = REPO / "csrc"
    found = [*csrc.glob("*.c"), *(csrc / "cpu").glob("*.c"), *(csrc / "kernels").rglob("*.c")]
    return {p.relative_to(REPO).as_posix() for p in found}


def test_every_core_file_has_exactly_one_group_and_every_listed_file_exists():
    m = manifest.read()
    counts = Counter(path for _, path in m.sources)
    assert not [p for p, c in counts.items() if c > 1], "a file in two groups"
    assert sorted(core_files() - counts.keys()) == [], "core .c files the builds would miss"
    assert [p for p in counts if not (REPO / p).is_file()] == [], "listed files that don't exist"
    assert sorted(counts.keys() - core_files()) == [], "listed files outside the core"


def test_every_group_has_flags_and_isa_files_are_in_their_family():
    m = manifest.read()
    used = {g for g, _ in m.sources}
    assert used == m.groups.keys(), "groups defined but unused"
    for g, grp in m.groups.items():
        # an ISA group carries its ISA flags; the flag-less groups are `portable` and `x86`
        assert bool(grp.flags) == (g not in ("portable", "x86")), g
        # Arm: gcc/clang's -march spelling for CMake, zig cc's -mcpu spelling for build.sh
        assert grp.arch != "arm" or grp.zigflags, g
    for g, path in m.sources:
        if m.groups[g].arch == "any":
            assert "_scalar" in path or "/kernels/" not in path, path  # no ISA code everywhere
        else:
            assert "_scalar" not in path, path


def test_every_kernel_file_is_found_by_its_name_with_its_descriptor():
    """Each csrc/kernels/<op>/NAME.c named <type>_<op>_<mr>x<nr>_<isa> is compiled in its ISA's
    group and its if_k_NAME is declared, of its op family's type, under its architecture's
    guard; the descriptor it defines has that name and type."""
    m = manifest.read()
    names = {p.rsplit("/", 1)[1][:-2]: (g, ctype) for g, p, ctype in m.kernels}
    assert {"q8_gemv_1x8_avx2", "q8_gemm_4x32_avx512_vnni", "q8_gemm_2x4_i8mm",
            "f32_attn_16x64_scalar", "q8_quantize_1x1_neon"} <= names.keys()
    assert names["q8_gemm_4x32_avx512_vnni"] == ("avx512", "if_q8_gemm_kernel")
    assert names["q8_gemv_1x8_avx_vnni"][0] == "avx_vnni"
    assert names["f32_attn_16x64_scalar"] == ("portable", "if_attn_kernel")
    header = manifest.header(m)
    x86 = header[header.index("#if defined(IF_X86_TIERS)"):header.index("#endif")]
    assert "extern const if_q8_gemm_kernel if_k_q8_gemm_4x16_avx2;" in x86
    assert "if_k_q8_gemm_4x4_neon" not in x86 and "if_k_q8_gemm_4x4_neon;" in header
    for _g, path, ctype in m.kernels:  # the file defines it (or includes the file that does)
        text = (REPO / path).read_text()
        stem = path.rsplit("/", 1)[1][:-2]
        assert re.search(rf"\bif_k_{stem}\b", text) or "#include" in text, path
        assert ctype in text or "#include" in text, path


def test_a_new_kernel_is_one_file(tmp_path):
    """A kernel file dropped into csrc/kernels/ is built in its ISA's group and declared, with
    no manifest line; a misnamed file or one listed in the wrong group is an error naming it."""
    kernels = tmp_path / "csrc" / "kernels" / "q8_gemv"
    kernels.mkdir(parents=True)
    src = manifest.MANIFEST.read_text()
    (tmp_path / "sources.txt").write_text(src)
    (kernels / "q8_gemv_1x16_avx2.c").write_text("/* a new kernel */\n")
    m = manifest.read(tmp_path / "sources.txt", tmp_path / "csrc" / "kernels")
    assert [(g, ctype) for g, p, ctype in m.kernels if p.endswith("q8_gemv_1x16_avx2.c")] == [
        ("avx2", "if_q8_gemv_kernel")]
    assert "extern const if_q8_gemv_kernel if_k_q8_gemv_1x16_avx2;" in manifest.header(m)
    (kernels / "gemv_fast.c").write_text("")
    with pytest.raises(manifest.ManifestError, match="gemv_fast.c: not a kernel name"):
        manifest.read(tmp_path / "sources.txt", tmp_path / "csrc" / "kernels")
    (kernels / "gemv_fast.c").unlink()
    (kernels / "q8_gemv_1x4_avx3.c").write_text("")  # an ISA the manifest does not know
    with pytest.raises(manifest.ManifestError, match="q8_gemv_1x4_avx3.c: not a kernel name"):
        manifest.read(tmp_path / "sources.txt", tmp_path / "csrc" / "kernels")


def test_bad_manifest_lines_are_errors_naming_the_line(tmp_path):
    (tmp_path / "csrc" / "kernels").mkdir(parents=True)
    for bad, why in [("flags avx9 mips -mavx9", "flags GROUP any|x86|arm"),
                     ("isa avx9 nogroup", "isa SUFFIX GROUP"),
                     ("nogroup csrc/forward.c", "group 'nogroup' has no flags line"),
                     ("portable csrc/missing.c", "csrc/missing.c does not exist")]:
        (tmp_path / "sources.txt").write_text("flags portable any\n" + bad + "\n")
        with pytest.raises(manifest.ManifestError, match=f"sources.txt:2: .*{re.escape(why)}"):
            manifest.read(tmp_path / "sources.txt", tmp_path / "csrc" / "kernels")
    r = subprocess.run([sys.executable, str(REPO / "csrc" / "manifest.py"), "--bogus"],
                       capture_output=True, text=True)
    assert r.returncode == 2 and "bad option '--bogus'" in r.stderr


def test_the_builds_take_the_core_sources_and_flags_from_the_manifest():
    # the file names and ISA flags live only in sources.txt, not again in the two builds' code
    def code(path: str) -> str:
        lines = (REPO / path).read_text().splitlines()
        return "\n".join(ln for ln in lines if not ln.lstrip().startswith("#"))

    cmake, build_sh = code("CMakeLists.txt"), code("tests/native/build.sh")
    assert "csrc/manifest.py" in cmake and "CMAKE_CONFIGURE_DEPENDS" in cmake
    assert "CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/csrc/kernels/*.c" in cmake
    assert "csrc/manifest.py" in build_sh
    for path in core_files():
        name = path.rsplit("/", 1)[1]
        assert name not in cmake and name not in build_sh, name
    m = manifest.read()
    for flags in [*(g.flags for g in m.groups.values()),
                  *(g.zigflags for g in m.groups.values() if g.zigflags)]:
        if flags:
            assert " ".join(flags) not in build_sh, flags
            assert " ".join(flags) not in cmake, flags
    # and kernels.h declares no descriptor by hand
    assert not re.search(r"extern const if_\w+_kernel",
                         (REPO / "csrc" / "kernels" / "kernels.h").read_text())
