#!/usr/bin/env python3
"""manifest.py - the kernel core's build manifest, read in one place for every build.

csrc/sources.txt defines the ISA flag groups, the op families and the files that are not
kernels; every kernel file under csrc/kernels/ is found by its name,
<type>_<op>_<mr>x<nr>_<isa>.c: its ISA suffix picks the flag group it is compiled with, its
<type>_<op> the descriptor type of the if_k_<name> it defines. So adding a kernel is writing
its file, plus one line in a tier's list (csrc/cpu/dispatch.c); nothing else names it.

  manifest.py --cmake FILE     the groups and sources as CMake set() commands (CMakeLists.txt)
  manifest.py --shell          the same as bash assignments (tests/native/build.sh evals them)
  manifest.py --header FILE    extern declarations of every kernel's descriptor (kernels.h
                               includes it as "if_kernel_decls.h")

A bad line or a kernel file whose name breaks the rule is an error naming it (exit 2).
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MANIFEST = ROOT / "csrc" / "sources.txt"
KERNELS = ROOT / "csrc" / "kernels"
ARCHS = ("any", "x86", "arm")
_TILE = re.compile(r"^[0-9a-z]+x[0-9a-z]+$")


class ManifestError(ValueError):
    pass


@dataclass
class Group:
    arch: str
    flags: list[str]
    zigflags: list[str] | None = None


@dataclass
class Manifest:
    groups: dict[str, Group] = field(default_factory=dict)
    isas: dict[str, str] = field(default_factory=dict)  # kernel name suffix -> group
    ops: dict[str, str] = field(default_factory=dict)  # <type>_<op> -> descriptor C type
    listed: list[tuple[str, str]] = field(default_factory=list)  # (group, path), file order
    kernels: list[tuple[str, str, str]] = field(default_factory=list)  # (group, path, ctype)

    @property
    def sources(self) -> list[tuple[str, str]]:
        """Every core source as (group, path): the listed ones, then the kernels found."""
        listed = {p for _, p in self.listed}
        return self.listed + [(g, p) for g, p, _ in self.kernels if p not in listed]


def kernel_parts(stem: str, m: Manifest) -> tuple[str, str, str] | None:
    """(type_op, tile, isa) of a kernel file's stem, or None when it is not a kernel name."""
    for op in sorted(m.ops, key=len, reverse=True):
        if stem.startswith(op + "_"):
            tile, _, isa = stem[len(op) + 1:].partition("_")
            if _TILE.match(tile) and isa in m.isas:
                return op, tile, isa
            return None
    return None


def read(manifest: Path = MANIFEST, kernels: Path = KERNELS) -> Manifest:
    m = Manifest()
    for n, line in enumerate(manifest.read_text().splitlines(), 1):
        f = line.split()
        if not f or f[0].startswith("#"):
            continue
        where = f"{manifest.name}:{n}"
        kind = f[0]
        if kind == "flags":
            if len(f) < 3 or f[2] not in ARCHS or not re.match(r"^[a-z0-9_]+$", f[1]):
                raise ManifestError(f"{where}: expected 'flags GROUP any|x86|arm [FLAG...]'")
            if f[1] in m.groups:
                raise ManifestError(f"{where}: group {f[1]} defined twice")
            m.groups[f[1]] = Group(f[2], f[3:])
        elif kind == "zigflags":
            if len(f) < 3 or f[1] not in m.groups:
                raise ManifestError(f"{where}: zigflags for an undefined group")
            m.groups[f[1]].zigflags = f[2:]
        elif kind == "isa":
            if len(f) != 3 or f[2] not in m.groups:
                raise ManifestError(f"{where}: expected 'isa SUFFIX GROUP' (a defined group)")
            m.isas[f[1]] = f[2]
        elif kind == "op":
            if len(f) != 3 or not re.match(r"^[a-z0-9]+_[a-z0-9]+$", f[1]):
                raise ManifestError(f"{where}: expected 'op TYPE_OP CTYPE'")
            m.ops[f[1]] = f[2]
        else:
            if len(f) != 2:
                raise ManifestError(f"{where}: expected 'GROUP PATH'")
            if kind not in m.groups:
                raise ManifestError(f"{where}: group '{kind}' has no flags line before it")
            if not (ROOT / f[1]).is_file():
                raise ManifestError(f"{where}: {f[1]} does not exist")
            m.listed.append((kind, f[1]))
    listed = {p: g for g, p in m.listed}
    for path in sorted(kernels.rglob("*.c")):
        rel = path.relative_to(kernels.parent.parent).as_posix()  # <root>/csrc/kernels
        parts = kernel_parts(path.stem, m)
        if parts is None:
            if rel not in listed:
                raise ManifestError(
                    f"{rel}: not a kernel name (<type>_<op>_<mr>x<nr>_<isa>.c with an op and an "
                    f"ISA of {manifest.name}) and not listed there with its group")
            continue
        op, _, isa = parts
        group = m.isas[isa]
        if rel in listed and listed[rel] != group:
            raise ManifestError(f"{rel}: listed in group {listed[rel]}, but its ISA suffix "
                                f"'{isa}' is group {group}")
        m.kernels.append((group, rel, m.ops[op]))
    return m


def cmake(m: Manifest) -> str:
    out = [f"set(IF_GROUPS {' '.join(m.groups)})"]
    for name, g in m.groups.items():
        out.append(f"set(IF_ARCH_{name} {g.arch})")
        out.append(f'set(IF_FLAGS_{name} "{" ".join(g.flags)}")')
        srcs = [p for grp, p in m.sources if grp == name]
        out.append(f"set(IF_SOURCES_{name} {' '.join(srcs)})")
    return "\n".join(out) + "\n"


def shell(m: Manifest) -> str:
    out = []
    for name, g in m.groups.items():
        out.append(f"GROUP_ARCH_{name}='{g.arch}'")
        out.append(f"GROUP_FLAGS_{name}='{' '.join(g.flags)}'")
        if g.zigflags is not None:
            out.append(f"GROUP_ZIGFLAGS_{name}='{' '.join(g.zigflags)}'")
    out.append("SOURCES=(" + " ".join(f"'{g} {p}'" for g, p in m.sources) + ")")
    return "\n".join(out) + "\n"


def header(m: Manifest) -> str:
    lines = ["/* if_kernel_decls.h - generated by csrc/manifest.py from the kernel files' names:",
             " * the descriptor of every kernel under csrc/kernels/. Do not edit. */",
             "#ifndef IF_KERNEL_DECLS_H", "#define IF_KERNEL_DECLS_H"]
    for arch, guard in (("any", None), ("x86", "IF_X86_TIERS"), ("arm", "IF_ARM_TIERS")):
        decls = [f"extern const {ctype} if_k_{Path(p).stem};"
                 for g, p, ctype in m.kernels if m.groups[g].arch == arch]
        if not decls:
            continue
        if guard:
            lines.append(f"#if defined({guard})")
        lines += decls
        if guard:
            lines.append("#endif")
    lines.append("#endif")
    return "\n".join(lines) + "\n"


def _write(path: str, text: str) -> None:
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    if not p.is_file() or p.read_text() != text:  # unchanged: no rebuild of its includers
        p.write_text(text)


def main(argv: list[str]) -> int:
    try:
        m = read()
    except ManifestError as e:
        print(f"csrc/manifest.py: {e}", file=sys.stderr)
        return 2
    args = list(argv)
    if not args:
        print(__doc__, file=sys.stderr)
        return 2
    while args:
        opt = args.pop(0)
        if opt == "--shell":
            sys.stdout.write(shell(m))
        elif opt in ("--cmake", "--header") and args:
            _write(args.pop(0), cmake(m) if opt == "--cmake" else header(m))
        else:
            print(f"csrc/manifest.py: bad option {opt!r} (--cmake FILE, --shell, --header FILE)",
                  file=sys.stderr)
            return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
