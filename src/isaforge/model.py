"""The Python API: `isaforge.load(path)` and the Model it returns."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from .engine import Engine, select_kernel
from .generate import Sampler, Stats, generate_tokens, resolve_steps
from .types import LoadedModel, ModelFormatError


def read_model(path: str | os.PathLike) -> LoadedModel:
    """Parse a model file (llama2.c .bin v0/v1/v2) without copying its tensor data."""
    from .formats.llama2c import read_llama2c

    p = Path(path)
    if not p.exists():
        raise FileNotFoundError(f"{p}: no such model file")
    if p.is_dir():
        raise ModelFormatError(f"{p}: is a directory, expected a model file")
    return read_llama2c(p)


def find_tokenizer(model_path: Path, vocab_size: int) -> Path:
    """The tokenizer beside a llama2.c model: tokenizer.bin, else tok<vocab>.bin."""
    for name in ("tokenizer.bin", f"tok{vocab_size}.bin"):
        cand = model_path.parent / name
        if cand.is_file():
            return cand
    raise FileNotFoundError(
        f"{model_path}: no tokenizer given and none found beside it "
        f"(looked for tokenizer.bin and tok{vocab_size}.bin); pass one with -z/tokenizer=")


class Model:
    """A loaded model ready to generate. Built by `isaforge.load`."""

    def __init__(self, loaded: LoadedModel, tokenizer, threads: int | None = None):
        self.loaded = loaded
        self.config = loaded.config
        self.tokenizer = tokenizer
        self.engine = Engine(loaded, threads)
        self.last_stats: Stats | None = None

    @property
    def path(self) -> str:
        return self.loaded.path

    def encode(self, text: str, bos: bool = True) -> list[int]:
        return self.tokenizer.encode(text, bos=bos)

    def logits(self, tokens) -> np.ndarray:
        """(n, vocab) float32 logits for tokens at positions 0..n-1 (a fresh sequence)."""
        tokens = list(tokens)
        if not tokens:
            raise ValueError("logits() needs at least one token")
        if len(tokens) > self.config.seq_len:
            raise ValueError(f"{len(tokens)} tokens exceed the context ({self.config.seq_len})")
        bad = [t for t in tokens if not 0 <= t < self.config.vocab_size]
        if bad:
            raise ValueError(f"token ids out of range [0, {self.config.vocab_size}): {bad[:5]}")
        return self.engine.prefill(tokens, 0, all_logits=True)

    def generate_ids(self, prompt: str | list[int], max_new_tokens: int | None = 256,
                     temperature: float = 1.0, top_p: float = 0.9, seed: int | None = None,
                     steps: int | None = None, stop_ids: tuple[int, ...] | None = None
                     ) -> Iterator[tuple[int, int]]:
        """(previous, next) token pairs exactly as run.c's loop prints them. `prompt` is text
        or already-encoded tokens (BOS included)."""
        sampler = Sampler(temperature, top_p, seed)
        tokens = self.tokenizer.encode(prompt, bos=True) if isinstance(prompt, str) else prompt
        if len(tokens) > self.config.seq_len:
            raise ValueError(f"the prompt is {len(tokens)} tokens, longer than the model's "
                             f"context ({self.config.seq_len})")
        n_steps = resolve_steps(len(tokens), self.config.seq_len, steps,
                                None if steps is not None else max_new_tokens)
        self.last_stats = Stats()
        stops = stop_ids if stop_ids is not None else (self.tokenizer.bos_id, self.tokenizer.eos_id)
        return generate_tokens(self.engine, tokens, n_steps, sampler, stops, self.last_stats)

    def generate(self, prompt: str, max_new_tokens: int = 256, temperature: float = 1.0,
                 top_p: float = 0.9, seed: int | None = None, stream: bool = False):
        """Text continuing `prompt` (the prompt itself excluded). With stream=True, a generator
        of text pieces that never split a UTF-8 character. Stops at BOS or EOS."""
        from .tokenizer import StreamDecoder

        prompt_tokens = self.tokenizer.encode(prompt, bos=True)
        pairs = self.generate_ids(prompt_tokens, max_new_tokens, temperature, top_p, seed)
        skip = len(prompt_tokens) - 1  # run.c's loop first yields the prompt's own pieces

        def pieces() -> Iterator[str]:
            dec = StreamDecoder(self.tokenizer, prev_token=prompt_tokens[-1])
            for i, (_prev, nxt) in enumerate(pairs):
                if i < skip:
                    continue
                text = dec.feed(nxt)
                if text:
                    yield text
            tail = dec.flush()
            if tail:
                yield tail

        return pieces() if stream else "".join(pieces())


def load(path: str | os.PathLike, tokenizer: str | os.PathLike | None = None,
         threads: int | None = None, kernel: str | None = None) -> Model:
    """Load a model file (and its tokenizer) into a ready Model.

    kernel: force a kernel tier ("scalar", ...); None picks the best (or ISAFORGE_KERNEL)."""
    from .tokenizer import Llama2cTokenizer

    if threads is not None and threads < 1:
        raise ValueError(f"threads must be >= 1, got {threads}")
    select_kernel(kernel)
    loaded = read_model(path)
    tok_path = Path(tokenizer) if tokenizer is not None else find_tokenizer(
        Path(path), loaded.config.vocab_size)
    if not tok_path.is_file():
        raise FileNotFoundError(f"{tok_path}: no such tokenizer file")
    tok = Llama2cTokenizer.load(tok_path, loaded.config.vocab_size)
    return Model(loaded, tok, threads)
