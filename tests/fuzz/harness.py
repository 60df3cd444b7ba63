"""Fuzz targets: one per reader of a file a model brings (llama2.c model and tokenizer, GGUF,
safetensors, HF config.json, tokenizer.json, .isaf, chat template).

Each target takes bytes, puts them where isaforge reads that kind of file (the rest of the
model fixed and valid), and drives the public API: `isaforge.load`, then `encode` and, where
the model has one, `render_chat`. An input passes when it loads and runs, or is refused with a
`ValueError` (`ModelFormatError` is one) whose message is not empty; anything else (another
exception, an empty message, a crash, a hang, a huge allocation under the fuzzer's memory
limit) is a finding. Used by tests/test_fuzz.py (committed corpora plus seeded mutations) and
scripts/fuzz.py (coverage-guided, atheris). Seeds: tests/fuzz/seeds.py.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from pathlib import Path

from fuzz import seeds

CORPUS = Path(__file__).parent / "corpus"


class Finding(AssertionError):
    """An input that isaforge did not refuse cleanly."""


def _work() -> Path:
    d = Path(os.environ.get("ISAFORGE_FUZZ_DIR") or tempfile.mkdtemp(prefix="isaforge-fuzz-"))
    d.mkdir(parents=True, exist_ok=True)
    return d


_DIR: Path | None = None


def workdir() -> Path:
    global _DIR
    if _DIR is None:
        _DIR = _work()
    return _DIR


def _drive(path: Path, tokenizer: Path | None = None) -> None:
    import isaforge

    m = isaforge.load(path, tokenizer=tokenizer, threads=1)
    ids = m.encode("Hello, world! \u00e9\u6f22")
    m.logits(ids[:2] or [0])
    if m.chat_template:
        m.render_chat([{"role": "user", "content": "hi"}])


def _write(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


def _llama2c(name: str, data: bytes) -> None:
    """A llama2.c model and tokenizer.bin, the file `name` replaced by data."""
    d = workdir() / "llama2c"
    d.mkdir(exist_ok=True)
    for n, make in (("model.bin", seeds.llama2c_model), ("tokenizer.bin", seeds.llama2c_tokenizer)):
        (d / n).write_bytes(data if n == name else make())
    _drive(d / "model.bin", d / "tokenizer.bin")


def t_llama2c(data: bytes) -> None:
    _llama2c("model.bin", data)


def t_llama2c_tokenizer(data: bytes) -> None:
    _llama2c("tokenizer.bin", data)


def t_gguf(data: bytes) -> None:
    _drive(_write(workdir() / "model.gguf", data))


def t_isaf(data: bytes) -> None:
    _drive(_write(workdir() / "model.isaf", data))


def _hf(name: str, data: bytes) -> None:
    d = workdir() / "hf"
    files = seeds.hf_files()
    d.mkdir(exist_ok=True)
    for n, b in files.items():
        (d / n).write_bytes(data if n == name else b)
    _drive(d)


def t_safetensors(data: bytes) -> None:
    _hf("model.safetensors", data)


def t_hf_config(data: bytes) -> None:
    _hf("config.json", data)


def t_tokenizer_json(data: bytes) -> None:
    _hf("tokenizer.json", data)


def t_chat_template(data: bytes) -> None:
    text = data.decode("utf-8", "replace")
    _drive(_write(workdir() / "chat.gguf", seeds.gguf_model(chat_template=text)))


def t_planted(data: bytes) -> None:
    """A deliberately broken reader (only with ISAFORGE_FUZZ_PLANT=1): proves a run reports."""
    if data[:1] == b"P" and data[1:2] == b"!":
        raise TypeError("planted bug")


TARGETS: dict[str, Callable[[bytes], None]] = {
    "llama2c": t_llama2c, "llama2c_tokenizer": t_llama2c_tokenizer, "gguf": t_gguf,
    "isaf": t_isaf, "safetensors": t_safetensors, "hf_config": t_hf_config,
    "tokenizer_json": t_tokenizer_json, "chat_template": t_chat_template,
}
if os.environ.get("ISAFORGE_FUZZ_PLANT") == "1":
    TARGETS["planted"] = t_planted


def check(target: str, data: bytes) -> None:
    """Run one input; raise Finding unless it ran or was refused cleanly."""
    try:
        TARGETS[target](data)
    except UnicodeError as e:  # a ValueError, but the raw codec message names no file
        raise Finding(f"{target}: raw {type(e).__name__}: {e}") from e
    except ValueError as e:
        if not str(e).strip():
            raise Finding(f"{target}: {type(e).__name__} with an empty message") from e
    except Exception as e:  # noqa: BLE001 - anything else is what the fuzzer looks for
        raise Finding(f"{target}: {type(e).__name__}: {e}") from e


def mutations(data: bytes, rng, n: int):
    """n seeded mutants of data: bit flips, byte runs set to extreme values, insertions,
    deletions, truncations, and little-endian integers overwritten with edge values."""
    edges = [0, 1, 0x7F, 0x80, 0xFF, 0xFFFF, 0x7FFFFFFF, 0xFFFFFFFF, 2**63 - 1, 2**64 - 1]
    for _ in range(n):
        b = bytearray(data)
        for _ in range(int(rng.integers(1, 4))):
            op = int(rng.integers(6))
            at = int(rng.integers(max(len(b), 1)))
            if op == 0 and b:
                b[at] ^= 1 << int(rng.integers(8))
            elif op == 1:
                b[at:at + 8] = int(edges[int(rng.integers(len(edges)))]).to_bytes(8, "little")
            elif op == 2:
                b[at:at] = bytes(rng.integers(0, 256, int(rng.integers(1, 16)), dtype="u1"))
            elif op == 3:
                del b[at:at + int(rng.integers(1, 64))]
            elif op == 4:
                del b[at:]
            else:
                b[at:at + 4] = int(edges[int(rng.integers(8))]).to_bytes(4, "little")
        yield bytes(b)


def warm_up(target: str) -> None:
    """Run the target's corpus once, so every module it reaches is imported."""
    for data in corpus(target):
        try:
            check(target, data)
        except Finding:
            pass


def corpus(target: str) -> list[bytes]:
    if target == "planted":
        return [b"PA"]
    return [p.read_bytes() for p in sorted((CORPUS / target).glob("*")) if p.is_file()]
