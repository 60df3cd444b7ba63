"""The Python API: `isaforge.load(path)` and the Model it returns.

    m = isaforge.load()                     # the default model (SmolLM2-135M-Instruct)
    m.chat([{"role": "user", "content": "Hi"}])
    m.generate("Once upon a time")          # raw continuation, no chat template
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np

from .formats import with_context
from .runtime.engine import Engine, runtime_info
from .runtime.generate import (
    Sampler,
    Stats,
    generate_tokens,
    resolve_steps,
    sample_tokens,
)
from .types import LoadedModel, ModelFormatError

# Sampling the SmolLM2 model card suggests; used for chat-template models when the caller
# gives no temperature (llama2.c files keep run.c's defaults, 1.0 and 0.9).
CHAT_TEMPERATURE, CHAT_TOP_P = 0.2, 0.9
# Repetition penalty for models with their own tokenizer (GGUF, HF, .isaf): llama.cpp's long-
# standing 1.1 over the last 64 tokens. Without it SmolLM2-135M at temperature 0.2 loops on a
# phrase for some seeds (in llama.cpp too); llama2.c files keep run.c's sampler (1.0).
REPEAT_PENALTY, REPEAT_LAST_N = 1.1, 64
DEFAULT_MAX_NEW = 512
QUANTS = ("q8", "f32")


class ContextFullError(ValueError):
    """The prompt (or conversation) does not fit in the context."""


def read_model(path: str | os.PathLike, quant: str = "q8") -> LoadedModel:
    """Parse a model (llama2.c .bin, GGUF, .isaf, Hugging Face folder) without copying what
    can be mapped. `quant` ("q8" | "f32") is how non-Q8 GGUF/HF tensors are held; llama2.c
    files stay as stored (fp32 v0/v1 run in fp32, exactly as run.c)."""
    from .formats import read_any

    if quant not in QUANTS:
        raise ValueError(f"quant must be one of {', '.join(QUANTS)}, got {quant!r}")
    return read_any(path, quant)


def find_tokenizer(model_path: Path, vocab_size: int) -> Path:
    """The tokenizer beside a llama2.c model: tokenizer.bin, else tok<vocab>.bin."""
    for name in ("tokenizer.bin", f"tok{vocab_size}.bin"):
        cand = model_path.parent / name
        if cand.is_file():
            return cand
    raise FileNotFoundError(
        f"{model_path}: no tokenizer given and none found beside it "
        f"(looked for tokenizer.bin and tok{vocab_size}.bin); pass one with -z/tokenizer=")


LLAMA2C_TOKENIZER_KEY = "isaforge.llama2c_tokenizer"


def tokenizer_for(loaded: LoadedModel, tokenizer: str | os.PathLike | None = None):
    """The tokenizer of a loaded model: a llama2.c tokenizer.bin (given, embedded in a .isaf,
    or found beside a llama2.c file), else built from the model's own metadata."""
    from .text.llama2c import Llama2cTokenizer

    vocab = loaded.config.vocab_size
    if tokenizer is not None:
        if any(k.startswith("tokenizer.") for k in loaded.metadata):
            raise ValueError(f"{loaded.path} carries its own tokenizer; -z/tokenizer= is only "
                             "for llama2.c models")
        tok_path = Path(tokenizer)
        if not tok_path.is_file():
            raise FileNotFoundError(f"{tok_path}: no such tokenizer file")
        return Llama2cTokenizer.load(tok_path, vocab)
    emb = loaded.metadata.get(LLAMA2C_TOKENIZER_KEY)
    if emb is not None:
        import base64

        try:
            pieces = [base64.b64decode(p) for p in emb["pieces"]]
            return Llama2cTokenizer(pieces, emb["scores"], int(emb["max_token_length"]),
                                    f"{loaded.path} (embedded llama2.c tokenizer)")
        except (KeyError, TypeError, ValueError) as e:
            raise ModelFormatError(f"{loaded.path}: bad embedded llama2.c tokenizer: {e}") from None
    if loaded.format.startswith("llama2c"):
        return Llama2cTokenizer.load(find_tokenizer(Path(loaded.path), vocab), vocab)
    from .text.hf import load_tokenizer

    return load_tokenizer(loaded.metadata, loaded.path)


def _is_llama2c_tok(tok) -> bool:
    from .text.llama2c import Llama2cTokenizer

    return isinstance(tok, Llama2cTokenizer)


def _piece_text(tok, token_id: int | None) -> str:
    if token_id is None or token_id < 0:
        return ""
    p = tok.piece(token_id)
    return p.decode("utf-8", "replace") if isinstance(p, bytes) else str(p)


class Model:
    """A loaded model ready to generate. Built by `isaforge.load`."""

    def __init__(self, loaded: LoadedModel, tokenizer, threads: int | None = None,
                 ubatch: int = 0, kv_cache: str = "f32", kernel: str | None = None):
        self.loaded = loaded
        self.config = loaded.config
        self.tokenizer = tokenizer
        self.engine = Engine(loaded, threads, ubatch=ubatch, kv_cache=kv_cache, kernel=kernel)
        self.last_stats: Stats | None = None
        self._cached: list[int] = []  # tokens whose K/V sit in the cache at positions 0..

    @property
    def path(self) -> str:
        return self.loaded.path

    @property
    def chat_template(self) -> str | None:
        """The model's Jinja chat template, or None (llama2.c models have none)."""
        t = getattr(self.tokenizer, "chat_template", None)
        return t or self.loaded.metadata.get("tokenizer.chat_template") or None

    @property
    def stop_ids(self) -> tuple[int, ...]:
        """Token ids that end a reply: the tokenizer's EOS/EOT set (llama2.c: BOS, EOS)."""
        ids = getattr(self.tokenizer, "stop_ids", None)
        if ids:
            return tuple(ids)
        return tuple(i for i in (self.tokenizer.bos_id, self.tokenizer.eos_id) if i is not None)

    @property
    def add_bos(self) -> bool:
        return bool(getattr(self.tokenizer, "add_bos", True))

    def encode(self, text: str, bos: bool | None = None) -> list[int]:
        bos = self.add_bos if bos is None else bos
        if _is_llama2c_tok(self.tokenizer):
            return self.tokenizer.encode(text, bos=bos)
        return self.tokenizer.encode(text, bos=bos, special=True)

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
        self._cached = []
        out = self.engine.prefill(tokens, 0, all_logits=True)
        self._cached = tokens
        return out

    def generate_ids(self, prompt: str | list[int], max_new_tokens: int | None = 256,
                     temperature: float = 1.0, top_p: float = 0.9, seed: int | None = None,
                     steps: int | None = None, stop_ids: tuple[int, ...] | None = None
                     ) -> Iterator[tuple[int, int]]:
        """(previous, next) token pairs exactly as run.c's loop prints them. `prompt` is text
        or already-encoded tokens (BOS included)."""
        sampler = Sampler(temperature, top_p, seed)
        tokens = self.encode(prompt) if isinstance(prompt, str) else list(prompt)
        if len(tokens) > self.config.seq_len:
            raise ContextFullError(f"the prompt is {len(tokens)} tokens, longer than the "
                                   f"model's context ({self.config.seq_len})")
        n_steps = resolve_steps(len(tokens), self.config.seq_len, steps,
                                None if steps is not None else max_new_tokens)
        self.last_stats = Stats()
        self._cached = []  # generate_tokens prefills from position 0
        stops = stop_ids if stop_ids is not None else self.stop_ids
        return generate_tokens(self.engine, tokens, n_steps, sampler, stops, self.last_stats)

    def generate(self, prompt: str, max_new_tokens: int = 256, temperature: float = 1.0,
                 top_p: float = 0.9, seed: int | None = None, stream: bool = False,
                 stop: Sequence[str] | None = None):
        """Text continuing `prompt` (the prompt itself excluded), no chat template. With
        stream=True, a generator of text pieces that never split a UTF-8 character. Stops at
        the tokenizer's stop ids (llama2.c: BOS or EOS) and before any `stop` string."""
        if _is_llama2c_tok(self.tokenizer) and not stop:
            return self._generate_llama2c(prompt, max_new_tokens, temperature, top_p, seed,
                                          stream)
        tokens = self.encode(prompt)
        return self.complete(tokens, max_new_tokens, temperature, top_p, seed, stop, stream)

    def _generate_llama2c(self, prompt, max_new_tokens, temperature, top_p, seed, stream):
        from .text.stream import StreamDecoder

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

    def render_chat(self, messages, add_generation_prompt: bool = True) -> str:
        """The conversation as the model's chat template renders it."""
        from .text.chat import check_messages, render_chat

        template = self.chat_template
        if not template:
            raise ValueError(f"{self.path}: the model has no chat template; use generate()")
        tok = self.tokenizer
        return render_chat(template, check_messages(messages),
                           add_generation_prompt=add_generation_prompt,
                           bos_token=_piece_text(tok, tok.bos_id),
                           eos_token=_piece_text(tok, tok.eos_id))

    def chat_tokens(self, messages) -> list[int]:
        """Token ids of the rendered conversation plus the assistant prompt (BOS added when
        the tokenizer asks for it and the template did not already write it)."""
        text = self.render_chat(messages)
        bos_text = _piece_text(self.tokenizer, self.tokenizer.bos_id)
        bos = self.add_bos and not (bos_text and text.startswith(bos_text))
        return self.encode(text, bos=bos)

    def chat(self, messages, stream: bool = False, max_new_tokens: int | None = DEFAULT_MAX_NEW,
             temperature: float | None = None, top_p: float | None = None,
             seed: int | None = None, stop: Sequence[str] | None = None,
             repeat_penalty: float | None = None):
        """The assistant's reply to `messages` ([{"role": "user", "content": ...}, ...]).

        Renders the model's chat template, generates until an end-of-turn token, `stop`
        string (never emitted, not even in part) or max_new_tokens (None: until the context
        is full). temperature/top_p default to the model card's (0.2 / 0.9 for SmolLM2),
        repeat_penalty to the model's default (`default_repeat_penalty`).
        Returns the text, or with stream=True a generator of pieces. The KV cache of the
        longest common token prefix with the previous call is re-used, so a multi-turn
        conversation only prefills its new turn."""
        temperature = CHAT_TEMPERATURE if temperature is None else temperature
        top_p = CHAT_TOP_P if top_p is None else top_p
        tokens = self.chat_tokens(messages)
        return self.complete(tokens, max_new_tokens, temperature, top_p, seed, stop, stream,
                             repeat_penalty)

    @property
    def default_repeat_penalty(self) -> float:
        """1.0 (off) for llama2.c files, as run.c; REPEAT_PENALTY for the others."""
        return 1.0 if _is_llama2c_tok(self.tokenizer) else REPEAT_PENALTY

    def complete(self, tokens: list[int], max_new_tokens: int | None = DEFAULT_MAX_NEW,
                 temperature: float = 1.0, top_p: float = 0.9, seed: int | None = None,
                 stop: Sequence[str] | None = None, stream: bool = False,
                 repeat_penalty: float | None = None):
        """The text generated after the token ids `tokens` (what chat() and generate() run):
        stops at a stop id, before a `stop` string, or after max_new_tokens (None: when the
        context is full). repeat_penalty None: the model's default (see Sampler). Returns the
        text, or a generator of pieces with stream=True."""
        if stop is not None and (isinstance(stop, str) or not all(isinstance(s, str)
                                                                   for s in stop)):
            raise ValueError("stop must be a list of strings")
        stops = [s for s in (stop or ()) if s]
        if stops:
            from .text.stream import StopMatcher
        from .text.stream import StreamDecoder
        tokens = list(tokens)
        if not tokens:
            raise ValueError("the prompt encodes to no tokens")
        if len(tokens) > self.config.seq_len:
            raise ContextFullError(f"the prompt is {len(tokens)} tokens, longer than the "
                                   f"context ({self.config.seq_len}; see --ctx)")
        penalty = self.default_repeat_penalty if repeat_penalty is None else repeat_penalty
        sampler = Sampler(temperature, top_p, seed, penalty, REPEAT_LAST_N)
        sampler.accept(tokens[-REPEAT_LAST_N:])
        self.last_stats = Stats()
        ids = self._sample(tokens, max_new_tokens, sampler, self.last_stats)

        def pieces() -> Iterator[str]:
            text = StreamDecoder(self.tokenizer, tokens[-1])
            matcher = StopMatcher(stops) if stops else None
            try:
                for t in ids:
                    piece = text.feed(t)
                    if matcher is not None:
                        piece, stopped = matcher.feed(piece)
                        if piece:
                            yield piece
                        if stopped:
                            return
                    elif piece:
                        yield piece
                tail = text.flush()
                if matcher is not None:
                    piece, stopped = matcher.feed(tail)
                    if piece:
                        yield piece
                    if not stopped and (rest := matcher.flush()):
                        yield rest
                elif tail:
                    yield tail
            finally:
                ids.close()

        return pieces() if stream else "".join(pieces())

    def _sample(self, tokens: list[int], max_new_tokens: int | None, sampler: Sampler,
                stats: Stats) -> Iterator[int]:
        """Prefill `tokens` (re-using the cached common prefix) and yield sampled ids."""
        n_seq = self.config.seq_len
        k = 0
        for a, b in zip(self._cached, tokens[:-1], strict=False):  # always run >= 1 token
            if a != b:
                break
            k += 1
        limit = n_seq - len(tokens) + 1 if max_new_tokens is None else max_new_tokens
        if limit < 0:
            raise ValueError(f"max_new_tokens must be >= 0, got {max_new_tokens}")
        self._cached = tokens[:k]
        t0 = time.perf_counter()
        logits = self.engine.prefill(tokens[k:], k)
        stats.prefill_s = time.perf_counter() - t0
        stats.prompt_tokens = len(tokens) - k
        self._cached = list(tokens)
        return sample_tokens(self.engine, logits, len(tokens), limit, sampler, self.stop_ids,
                             stats, self._cached)


def load(path: str | os.PathLike | None = None, tokenizer: str | os.PathLike | None = None,
         threads: int | None = None, kernel: str | None = None, quant: str = "q8",
         ctx: int | None = None, ubatch: int = 0, kv_cache: str = "f32") -> Model:
    """Load a model (and its tokenizer) into a ready Model.

    path: a llama2.c .bin, a .gguf, a .isaf or a Hugging Face folder; None = the default model
      (SmolLM2-135M-Instruct), pulled into the cache on first use.
    tokenizer: a llama2.c tokenizer.bin (default: beside a llama2.c model; other formats carry
      their own tokenizer). kernel: force a kernel tier for this model ("scalar", ...; None:
      the best, or ISAFORGE_KERNEL); other models keep theirs. quant: "q8" (default) or
      "f32", how GGUF/HF tensors that are not Q8 already are held. ctx: context length (KV
      cache size); default min(model's, 4096).
    ubatch: prompt tokens per prefill chunk (0: the core's default, 512). kv_cache: "f32"
      (default), "f16" or "int8" (per position, head and group of head dims)."""
    if threads is not None and threads < 1:
        raise ValueError(f"threads must be >= 1, got {threads}")
    if ctx is not None and ctx < 1:  # before pulling or reading anything
        raise ValueError(f"ctx must be >= 1, got {ctx}")
    runtime_info(kernel)  # an unknown or unsupported tier fails before anything is read
    if path is None:
        from .pull import ensure_model

        path = ensure_model()
    loaded = with_context(read_model(path, quant), ctx)
    return Model(loaded, tokenizer_for(loaded, tokenizer), threads, ubatch, kv_cache, kernel)
