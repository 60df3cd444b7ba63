"""The x86 tiers this machine cannot run (AVX-VNNI, AVX-512 VNNI), under Bochs.

The static x86_64-linux-musl drivers (tests/native/build.sh x86_64-musl) are packed into an
initramfs whose /init (tests/native/x86emu_init.c) runs them one after the other, and a Debian
cloud kernel boots it in Bochs 3.0 emulating a Sapphire Rapids CPU (scripts/x86_emulator.sh
provides both). One boot per test session runs every driver; each test reads its driver's
section of the serial console and asserts that the emulated tiers ran and matched scalar bit
for bit. AMX is left out of the emulated CPU: Bochs has no XSAVE-XFD, and Linux does not enable
AMX state without it (docs/emulation.md).

Slow (the boot is ~15 s, the drivers take minutes under emulation), so opt-in:
ISAFORGE_X86EMU_TESTS=1 runs them (and a missing tool is then a failure, not a skip).
ISAFORGE_X86EMU_TIMEOUT (seconds, default 3600) bounds the boot.
"""

from __future__ import annotations

import os
import re
import shlex
import struct
import subprocess
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parent.parent
ENABLED = os.environ.get("ISAFORGE_X86EMU_TESTS") == "1"
TIMEOUT = float(os.environ.get("ISAFORGE_X86EMU_TIMEOUT", "3600"))
EMULATED = ["avx_vnni", "avx512_vnni"]  # the tiers this file exists for
# Sapphire Rapids without AMX (no XFD in Bochs), 5-level paging, UMIP, PKS, CET and UINTR
# (their CR4 bits fail Bochs 3.0's SMM-restore check when the BIOS enters SMM)
CPU = ('model=sapphire_rapids, count=1, ips=200000000, reset_on_triple_fault=0, '
       'exclude_features="amx amx_int8 amx_bf16 la57 umip pks cet uintr"')
# 580 = X86_FEATURE_FSRM: with it the boot hangs in a #UD loop after the alternatives are
# applied (kernel text patched with a REP MOVSB memcpy; Bochs 3.0's fault, most likely)
CMDLINE = "console=ttyS0,115200 quiet hpet=disable panic=0 clearcpuid=580"
COMMANDS = {"info": "/if_native_test info",
            "conformance": "/if_native_test conformance --quick",
            "lanes": "/detmath_test lanes 9973",  # every 9973rd float (~430k), not every 61st
            "q4": "/q4_native_test --quick"}
# attention shapes (n_heads, n_kv_heads, head_size, pos0, n, window, n_sinks, cap), from
# tests/test_attention.py's CASES: a prefill, a rolled window with sinks, a window from
# position 0, partial tiles, a decode row, head size 6; each with f32 (0) and f16 (1) caches
ATTN = [(9, 3, 64, 100, 37, 0, 0, 200), (9, 3, 64, 300, 20, 48, 4, 71),
        (8, 4, 8, 0, 30, 12, 2, 43), (8, 4, 8, 70, 21, 0, 0, 91), (9, 3, 64, 130, 1, 0, 0, 131),
        (4, 2, 6, 5, 20, 0, 0, 25)]
# and float32 caches with the keys block-transposed (kv 3: if_kv_layer.keys_t, cap a multiple
# of 64): a decode row, a prefill, a rolled ring without sinks (read in place)
ATTN_T = [(9, 3, 64, 130, 1, 0, 0, 192), (9, 3, 64, 100, 37, 0, 0, 192),
          (4, 1, 32, 150, 9, 70, 0, 128)]
ATTN_INPUTS = {**{f"attn{i}_{kv}.in": (shape, kv) for i, shape in enumerate(ATTN)
                  for kv in (0, 1)},
               **{f"attnt{i}_3.in": (shape, 3) for i, shape in enumerate(ATTN_T)}}

pytestmark = pytest.mark.skipif(
    not ENABLED, reason="the Bochs x86 emulation tests are slow: set ISAFORGE_X86EMU_TESTS=1 "
    "(scripts/x86_emulator.sh fetches Bochs and a kernel from Debian)")


def _fnv(data: bytes) -> str:
    h = 0xCBF29CE484222325
    for b in data:
        h = ((h ^ b) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return f"{h:016x}"


def _attn_input(shape, kv: int) -> bytes:
    """attn_native_test's input: the header, then q, k, v standard normal float32."""
    nh, nkv, hs, pos0, n = shape[:5]
    rng = np.random.default_rng(len(ATTN) * kv + (ATTN + ATTN_T).index(shape))
    q, k, v = (rng.normal(size=s).astype(np.float32)
               for s in ((n, nh * hs), (pos0 + n, nkv * hs), (pos0 + n, nkv * hs)))
    return struct.pack("<9Q", *shape, kv) + q.tobytes() + k.tobytes() + v.tobytes()


def _cpio(files: dict[str, tuple[int, bytes]]) -> bytes:
    """A cpio 'newc' archive of {name: (mode, data)}, plus /dev/console."""
    out, ino = bytearray(), 1
    entries = [("dev", 0o040755, b"", 0), ("dev/console", 0o020600, b"", 1),
               *((n, m, d, 0) for n, (m, d) in files.items()), ("TRAILER!!!", 0, b"", 0)]
    for name, mode, data, console in entries:
        ino += 1
        fields = (ino, mode, 0, 0, 1, 0, len(data), 0, 0, 5 * console, console,
                  len(name) + 1, 0)
        out += b"070701" + "".join(f"{v:08x}" for v in fields).encode() + name.encode() + b"\0"
        out += b"\0" * (-len(out) % 4) + data
        out += b"\0" * (-len(out) % 4)
    return bytes(out + b"\0" * (-len(out) % 512))


@pytest.fixture(scope="module")
def emulator() -> dict[str, str]:
    r = subprocess.run(["bash", str(REPO / "scripts" / "x86_emulator.sh")],
                       capture_output=True, text=True, timeout=1800)
    if r.returncode != 0:
        pytest.fail(f"scripts/x86_emulator.sh failed:\n{r.stderr[-3000:]}")
    env = dict(re.findall(r'^export (\w+)="?(.*?)"?$', r.stdout, re.M))
    need = {"ISAFORGE_BOCHS", "ISAFORGE_X86EMU_KERNEL", "ISAFORGE_X86EMU_BIN"}
    assert need <= env.keys(), r.stdout
    return env


@pytest.fixture(scope="module")
def drivers(emulator, tmp_path_factory) -> Path:
    """The folder of the static x86_64-linux-musl drivers (with the x86 tier files)."""
    d = tmp_path_factory.mktemp("x86emu")
    env = {**os.environ, "ISAFORGE_ZIG_CC": emulator["ISAFORGE_ZIG_CC"]}
    r = subprocess.run(["bash", str(REPO / "tests" / "native" / "build.sh"), str(d),
                        "x86_64-musl"], capture_output=True, text=True, timeout=1800, env=env)
    assert r.returncode == 0, f"build.sh x86_64-musl failed:\n{r.stderr[-3000:]}"
    return d


@pytest.fixture(scope="module")
def boot(emulator, drivers) -> dict[str, tuple[str, str]]:
    """Boots once and runs every driver; {COMMANDS key: (output, exit status)}."""
    d = drivers
    zig = shlex.split(emulator["ISAFORGE_ZIG_CC"])
    r = subprocess.run([*zig, "-target", "x86_64-linux-musl", "-static", "-O2", "-o",
                        str(d / "init"), str(REPO / "tests" / "native" / "x86emu_init.c")],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    attn = [f"/attn_native_test avx512_vnni /{a} /{a}.out\n@fnv /{a}.out\n" for a in ATTN_INPUTS]
    files = {"init": (0o100755, (d / "init").read_bytes()),
             "cmds": (0o100644, "".join([*(c + "\n" for c in COMMANDS.values()), *attn]).encode())}
    for name in {c.split()[0].lstrip("/") for c in COMMANDS.values()} | {"attn_native_test"}:
        files[name] = (0o100755, (d / f"{name}-x86_64-musl").read_bytes())
    for a, (shape, kv) in ATTN_INPUTS.items():
        files[a] = (0o100644, _attn_input(shape, kv))
    initrd = _cpio(files)
    kernel = Path(emulator["ISAFORGE_X86EMU_KERNEL"])

    # a FAT disk (no partition table) with syslinux, the kernel and the initramfs
    cyl = ((len(initrd) + kernel.stat().st_size) * 5 // 4 + (4 << 20)) // (16 * 63 * 512) + 1
    disk = d / "disk.img"
    with open(disk, "wb") as f:
        f.truncate(cyl * 16 * 63 * 512)
    (d / "initrd").write_bytes(initrd)
    (d / "syslinux.cfg").write_text("DEFAULT linux\nPROMPT 0\nTIMEOUT 0\nSERIAL 0 115200\n"
                                    f"LABEL linux\n  KERNEL vmlinuz\n  INITRD initrd\n"
                                    f"  APPEND {CMDLINE}\n")
    tools = Path(emulator["ISAFORGE_X86EMU_BIN"])
    tenv = {**os.environ, "MTOOLS_SKIP_CHECK": "1", "PATH": f"{tools}:{os.environ['PATH']}"}
    for cmd in (["mformat", "-i", disk, "-t", cyl, "-h", 16, "-s", 63, "::"],
                ["mcopy", "-i", disk, kernel, "::vmlinuz"],
                ["mcopy", "-i", disk, d / "initrd", "::initrd"],
                ["mcopy", "-i", disk, d / "syslinux.cfg", "::syslinux.cfg"],
                ["syslinux", "--install", disk]):
        r = subprocess.run([str(tools / str(cmd[0])), *map(str, cmd[1:])], capture_output=True,
                           text=True, env=tenv, timeout=120)
        assert r.returncode == 0, f"{cmd[0]}: {r.stdout}{r.stderr}"

    serial = d / "serial.out"
    (d / "bochsrc").write_text(
        f"megs: 1024\ncpu: {CPU}\n"
        f"romimage: file={emulator['ISAFORGE_BOCHS_BIOS']}\n"
        f"vgaromimage: file={emulator['ISAFORGE_BOCHS_VGABIOS']}\n"
        f"ata0-master: type=disk, path={disk}, mode=flat, cylinders={cyl}, heads=16, spt=63\n"
        f"boot: disk\ncom1: enabled=1, mode=file, dev={serial}\n"
        'display_library: rfb, options="timeout=0"\nsound: driver=dummy\n'
        f"log: {d / 'bochs.log'}\npanic: action=fatal\nerror: action=report\n"
        "info: action=ignore\ndebug: action=ignore\nclock: sync=none, time0=local\n")
    try:
        subprocess.run([emulator["ISAFORGE_BOCHS"], "-q", "-f", str(d / "bochsrc")], cwd=d,
                       stdin=subprocess.DEVNULL, capture_output=True, timeout=TIMEOUT)
    except subprocess.TimeoutExpired:
        pass  # judged by the console below
    text = serial.read_text(errors="replace") if serial.exists() else ""
    assert "@@done" in text, f"the guest did not finish in {TIMEOUT:.0f} s:\n{text[-4000:]}"
    out = {}
    for key, cmd in COMMANDS.items():
        m = re.search(rf"^@@run {re.escape(cmd)}\n(.*?)^@@exit (\S+) ", text, re.M | re.S)
        assert m, f"no section for {cmd}:\n{text[-4000:]}"
        out[key] = (m.group(1), m.group(2))
    for a in ATTN_INPUTS:
        e = re.escape(a)
        m = re.search(rf"^@@run /attn_native_test \S+ /{e} .*?\n(.*?)^@@exit (\S+) .*?\n"
                      rf"@@fnv (\S+) /{e}\.out$", text, re.M | re.S)
        assert m, f"no section for {a}:\n{text[-4000:]}"
        out[a] = (m.group(1), m.group(2), m.group(3))
    print("\n".join(f"{c}: exit {out[k][1]}" for k, c in COMMANDS.items()))
    return out


def test_emulated_cpu_runs_the_vnni_tiers(boot):
    text, status = boot["info"]
    assert status == "0", text
    info = dict(re.findall(r"^([\w.]+)=(.*)$", text, re.M))
    for tier in EMULATED:
        assert info[f"tier.{tier}"] == "supported", text
    assert info["decode"] == "avx512_vnni" and info["prefill"] == "avx512_vnni", text


def test_q8_conformance_of_the_emulated_tiers(boot):
    text, status = boot["conformance"]
    tiers = re.search(r"^tiers: (.*)$", text, re.M)
    assert tiers, text
    for tier in EMULATED:
        assert tier in tiers.group(1).split(), text
    assert status == "0" and re.search(r"^conformance ok \d+ cases", text, re.M), text


def test_conformance_digest_equals_this_machines(boot, drivers):
    """The digest covers the scalar results: the emulated CPU must give this machine's bits."""
    r = subprocess.run([str(drivers / "if_native_test-x86_64-musl"), "conformance", "--quick"],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    digest = re.compile(r"^conformance ok \d+ cases digest ([0-9a-f]{16})", re.M)
    native, emulated = digest.search(r.stdout), digest.search(boot["conformance"][0])
    assert native and emulated and native.group(1) == emulated.group(1), \
        (r.stdout, boot["conformance"][0])


def test_avx512_attention_equals_scalar_bit_for_bit(boot, drivers, tmp_path):
    """f32_attn_16x64_avx512 (the avx512_vnni tier's fp32 attention, f32 and f16 caches, and f32
    with block-transposed keys) in the guest against the scalar kernel run here on the same
    input: equal output file hashes."""
    for a, (shape, kv) in ATTN_INPUTS.items():
        text, status, digest = boot[a]
        assert status == "0" and "kernel f32_attn_16x64_avx512" in text, (a, text)
        (tmp_path / a).write_bytes(_attn_input(shape, kv))
        r = subprocess.run([str(drivers / "attn_native_test-x86_64-musl"), "scalar",
                            str(tmp_path / a), str(tmp_path / "out")],
                           capture_output=True, text=True, timeout=60)
        assert r.returncode == 0 and "f32_attn_16x64_scalar" in r.stdout, r.stdout + r.stderr
        assert digest == _fnv((tmp_path / "out").read_bytes()), (a, shape, kv)


def test_detmath_avx512_exp_lanes(boot):
    text, status = boot["lanes"]
    m = re.search(r"^lanes exp8 (\d+)/(\d+) exp16 (\d+)/(\d+)$", text, re.M)
    assert m, text  # "exp16 skipped" would mean the AVX-512 copy did not run
    assert status == "0" and m.group(1) == m.group(3) == "0" and int(m.group(4)) > 0, text


def test_q4_conformance_under_emulation(boot):
    text, status = boot["q4"]
    for tier in ["avx2", *EMULATED]:  # (avx_vnni's table holds avx2's 4-bit kernels)
        assert re.search(rf"^tier {tier}: .*: [1-9]\d* cases$", text, re.M), text
    # the AVX-512 VNNI tier ran its own 4-bit GEMV and GEMM (VPDPBUSD zmm), not avx2's
    line = re.search(r"^tier avx512_vnni: (.*)$", text, re.M).group(1)
    assert "q4_gemv_1x16_avx512_vnni" in line and "q4_gemm_8x16_avx512_vnni" in line, line
    assert status == "0" and text.rstrip().endswith("ok") and "FAIL" not in text, text
