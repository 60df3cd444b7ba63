"""The Python API: `isaforge.load(path)` and the Model it returns, a thin face over the
stages below (formats read the file, text holds the tokenizer and chat template, runtime runs
the engine and the one generation loop under the model's profile).

    m = isaforge.load()                     # the default model (SmolLM2-135M-Instruct)
    m.chat([{"role": "user", "content": "Hi"}])
    m.generate("Once upon a time")          # raw continuation, no chat template
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator, Sequence

import numpy as np

from . import settings
from .formats import drop_file_pages, quantized_table, read_any, with_context
from .runtime.engine import Engine, runtime_info
from .runtime.generate import (
    DEFAULT_MAX_NEW,
    ContextFullError,
    GenerationConfig,
    ModelBusyError,
    Session,
)
from .runtime.profile import ModelProfile, profile_for
from .text.chat import chat_tokens, render_conversation
from .text.load import tokenizer_for
from .types import LoadedModel

__all__ = ["ContextFullError", "GenerationConfig", "Model", "ModelBusyError", "load",
           "read_model"]
QUANTS = ("q8", "auto", "f32", "cq4", "q4_0")  # cq4 takes suffixes (quant.cq4.parse_quant)


def read_model(path: str | os.PathLike, quant: str = "auto") -> LoadedModel:
    """Parse a model (llama2.c .bin, GGUF, .isaf, Hugging Face folder) without copying what
    can be mapped. `quant` ("auto", the default: GGUF K-quant (Q4_K / Q5_K / Q6_K) and legacy
    (Q4_0 / Q4_1 / Q5_0 / Q5_1) matrices run in place on the file's blocks, the rest as "q8";
    "q8" | "f32": how non-Q8 GGUF/HF tensors are held);
    llama2.c files stay as stored (fp32 v0/v1 run in fp32, exactly as run.c). A 4-bit quant ("cq4",
    "cq4-128-lsq", ..., "q4_0"; quant.cq4.parse_quant) applies to every format."""
    from .quant.cq4 import parse_quant

    spec = parse_quant(quant)  # ValueError naming the valid forms
    if spec.gptq:
        return _read_calibrated(path, spec)
    return read_any(path, str(spec))


def _read_calibrated(path, spec) -> LoadedModel:
    """A -gptq 4-bit load: the float model reads runtime.calibrate's calibration text
    (CALIBRATION_TOKENS tokens) to get each matrix's input second moment, then every layer
    matrix is quantized with error compensation (quant.cq4.gptq_cq4)."""
    from .quant.cq4 import to_4bit
    from .runtime.calibrate import (
        CALIBRATE_ON,
        CALIBRATION_TOKENS,
        calibration_text,
        generated_tokens,
        hessians,
    )

    f32 = read_any(path, "f32")
    prompt = tokenizer_for(f32, None).encode(calibration_text())[:CALIBRATION_TOKENS]
    tokens = generated_tokens(f32, prompt) if CALIBRATE_ON == "generated" else prompt
    return quantized_table(to_4bit(f32, spec, hessians=hessians(f32, tokens)))


class Model:
    """A loaded model ready to generate. Built by `isaforge.load`. Every method that generates
    runs the one loop (`runtime.generate.Session`) with a GenerationConfig whose unset fields
    come from the model's profile (`profile`: llama2.c's run.c defaults, or the chat model's).

    Thread-safe: the engine and cached prefix serve one call at a time (a stream holds them
    from its first piece until it ends or is closed); another thread waits, the thread with
    an unfinished stream on this model gets ModelBusyError (README, "Thread safety")."""

    def __init__(self, loaded: LoadedModel, tokenizer, threads: int | None = None,
                 ubatch: int = 0, kv_cache: str = "f32", kernel: str | None = None,
                 engine: Engine | None = None):
        self.loaded = loaded
        self.config = loaded.config
        self.tokenizer = tokenizer
        self.engine = engine or Engine(loaded, threads, ubatch=ubatch, kv_cache=kv_cache,
                                       kernel=kernel)
        self.session = Session(self.engine)
        self.profile: ModelProfile = profile_for(tokenizer, self.chat_template)
        # seconds per phase of `load` (resolve, read, engine, tokenizer); empty otherwise
        self.load_times: dict[str, float] = {}

    @property
    def path(self) -> str:
        return self.loaded.path

    @property
    def last_stats(self):
        """Statistics of the last generation (`runtime.generate.Stats`), or None."""
        return self.session.stats

    @property
    def chat_template(self) -> str | None:
        """The model's Jinja chat template, or None (llama2.c models have none)."""
        return self.tokenizer.chat_template or self.loaded.metadata.get(
            "tokenizer.chat_template") or None

    @property
    def stop_ids(self) -> tuple[int, ...]:
        """Token ids that end a reply: the tokenizer's EOS/EOT set (llama2.c: BOS, EOS)."""
        return self.profile.stop_ids

    @property
    def add_bos(self) -> bool:
        return self.profile.add_bos

    @property
    def default_repeat_penalty(self) -> float:
        """1.0 (off) for llama2.c files, as run.c; 1.1 for the others (see runtime.profile)."""
        return self.profile.repeat_penalty

    def encode(self, text: str | bytes, bos: bool | None = None) -> list[int]:
        """Token ids of `text`. Bytes go to a llama2.c tokenizer as they are (bytes that are not
        UTF-8 as byte tokens, as run.c); the others read them as UTF-8, bad bytes as U+FFFD."""
        if isinstance(text, bytes) and not self.profile.runc_output:
            text = text.decode("utf-8", "replace")
        return self.tokenizer.encode(text, bos=self.add_bos if bos is None else bos,
                                     special=True)

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
        return self.session.logits(tokens)

    # -- the one loop, two views -------------------------------------------------------------

    def _tokens(self, prompt: str | bytes | Sequence[int]) -> list[int]:
        return self.encode(prompt) if isinstance(prompt, (str, bytes)) else list(prompt)

    def pairs(self, prompt: str | Sequence[int], config: GenerationConfig | None = None
              ) -> Iterator[tuple[int, int]]:
        """(previous, next) token pairs of a generation (with config.echo the prompt's own
        first, as run.c prints them). `prompt`: text or token ids (BOS included)."""
        config = self.profile.complete(config or GenerationConfig())
        return self.session.pairs(self._tokens(prompt), config)

    def stream(self, prompt: str | Sequence[int], config: GenerationConfig | None = None
               ) -> Iterator[str]:
        """The generated text as pieces that never split a UTF-8 character, ending at a stop
        id, before a stop string (never emitted, not even in part) or at the token budget."""
        config = self.profile.complete(config or GenerationConfig())
        return self.session.text(self._tokens(prompt), config, self.tokenizer)

    def _text(self, prompt, config: GenerationConfig, stream: bool):
        pieces = self.stream(prompt, config)
        return pieces if stream else "".join(pieces)

    # -- the documented entry points -----------------------------------------------------------

    def generate_ids(self, prompt: str | list[int], max_new_tokens: int | None = 256,
                     temperature: float = 1.0, top_p: float = 0.9, seed: int | None = None,
                     steps: int | None = None, stop_ids: tuple[int, ...] | None = None
                     ) -> Iterator[tuple[int, int]]:
        """(previous, next) token pairs exactly as run.c's loop prints them (the prompt's
        pieces too; run.c's sampler, no repetition penalty). `prompt` is text or
        already-encoded tokens (BOS included)."""
        return self.pairs(prompt, GenerationConfig(
            max_new_tokens, steps, temperature, top_p, seed, repeat_penalty=1.0,
            stop_ids=stop_ids, echo=True))

    def generate(self, prompt: str, max_new_tokens: int = 256, temperature: float = 1.0,
                 top_p: float = 0.9, seed: int | None = None, stream: bool = False,
                 stop: Sequence[str] | None = None):
        """Text continuing `prompt` (the prompt itself excluded), no chat template. With
        stream=True, a generator of text pieces that never split a UTF-8 character. Stops at
        the tokenizer's stop ids (llama2.c: BOS or EOS) and before any `stop` string."""
        return self._text(prompt, GenerationConfig(max_new_tokens, None, temperature, top_p,
                                                   seed, stop=stop or ()), stream)

    def complete(self, tokens: list[int], max_new_tokens: int | None = DEFAULT_MAX_NEW,
                 temperature: float = 1.0, top_p: float = 0.9, seed: int | None = None,
                 stop: Sequence[str] | None = None, stream: bool = False,
                 repeat_penalty: float | None = None):
        """The text generated after the token ids `tokens` (what chat() and generate() run):
        stops at a stop id, before a `stop` string, or after max_new_tokens (None: when the
        context is full). repeat_penalty None: the model's default. Returns the text, or a
        generator of pieces with stream=True."""
        return self._text(tokens, GenerationConfig(max_new_tokens, None, temperature, top_p,
                                                   seed, repeat_penalty, stop=stop or ()),
                          stream)

    def render_chat(self, messages, add_generation_prompt: bool = True, tools=None) -> str:
        """The conversation as the model's chat template renders it (`tools`: OpenAI's tool
        list, passed to the template)."""
        return render_conversation(self.tokenizer, self._template(), messages,
                                   add_generation_prompt, self._template_chars(),
                                   **({"tools": tools} if tools else {}))

    def chat_tokens(self, messages, tools=None) -> list[int]:
        """Token ids of the rendered conversation plus the assistant prompt (BOS added when
        the tokenizer asks for it and the template did not already write it). Special-token
        texts inside the messages are tokenized as text (no injected turn boundary)."""
        return chat_tokens(self.tokenizer, self._template(), messages, self._template_chars(),
                           **({"tools": tools} if tools else {}))

    def _template_chars(self) -> int:
        return settings.template_max_chars(self.config.seq_len)

    def _template(self) -> str:
        template = self.chat_template
        if not template:
            raise ValueError(f"{self.path}: the model has no chat template; use generate()")
        return template

    def chat(self, messages, stream: bool = False, max_new_tokens: int | None = DEFAULT_MAX_NEW,
             temperature: float | None = None, top_p: float | None = None,
             seed: int | None = None, stop: Sequence[str] | None = None,
             repeat_penalty: float | None = None, tools=None):
        """The assistant's reply to `messages` ([{"role": "user", "content": ...}, ...]; also
        OpenAI's shapes: content parts, tool calls, tool results; `tools` go to the template).

        Renders the model's chat template, generates until an end-of-turn token, `stop`
        string (never emitted, not even in part) or max_new_tokens (None: until the context
        is full). temperature/top_p default to the model card's (0.2 / 0.9 for SmolLM2),
        repeat_penalty to the model's default (`default_repeat_penalty`).
        Returns the text, or with stream=True a generator of pieces. The KV cache of the
        longest common token prefix with the previous call is re-used, so a multi-turn
        conversation only prefills its new turn."""
        config = GenerationConfig(max_new_tokens, None, temperature, top_p, seed,
                                  repeat_penalty, stop=stop or ())
        return self._text(self.chat_tokens(messages, tools), config, stream)


def load(path: str | os.PathLike | None = None, tokenizer: str | os.PathLike | None = None,
         threads: int | None = None, kernel: str | None = None, quant: str = "auto",
         ctx: int | None = None, ubatch: int = 0, kv_cache: str = "f32") -> Model:
    """Load a model (and its tokenizer) into a ready Model.

    path: a llama2.c .bin, a .gguf, a .isaf or a Hugging Face folder; a known model's name
      (`isaforge pull --list`) or file name; None = the default model (SmolLM2-135M-Instruct).
      Known models are pulled into the cache on first use.
    tokenizer: a llama2.c tokenizer.bin (default: beside a llama2.c model; other formats carry
      their own tokenizer). kernel: force a kernel tier for this model ("scalar", ...; None:
      the best, or ISAFORGE_KERNEL); other models keep theirs. quant: "auto" (default: GGUF
      K-quant and legacy-block matrices run in place on the file's blocks, one resident copy;
      the rest as "q8"), "q8" (every GGUF/HF tensor that is not Q8 already converted to Q8)
      or "f32".
      ctx: context length (KV cache size); default min(model's, 4096).
    ubatch: prompt tokens per prefill chunk (0: the core's default, 512). kv_cache: "f32"
      (default), "f16" or "int8" (per position, head and group of head dims)."""
    if threads is not None and threads < 1:
        raise ValueError(f"threads must be >= 1, got {threads}")
    if ctx is not None and ctx < 1:  # before pulling or reading anything
        raise ValueError(f"ctx must be >= 1, got {ctx}")
    times: dict[str, float] = {}
    t0 = time.perf_counter()
    runtime_info(kernel)  # an unknown or unsupported tier fails before anything is read
    if path is None:
        from .pull import ensure_model

        path = ensure_model()
    else:
        from .pull import resolve_model

        path = resolve_model(path)  # a registry name (gemma3-270m) or a cached model's file
    t0 = _lap(times, "resolve", t0)
    loaded = with_context(read_model(path, quant), ctx)
    # Peak RSS: the file's pages go once its tensors are converted (and again once the engine
    # packed them); the engine comes before the tokenizer, whose tables need not be resident
    # while packing holds one matrix twice for a moment.
    drop_file_pages(loaded)
    t0 = _lap(times, "read", t0)
    engine = Engine(loaded, threads, ubatch=ubatch, kv_cache=kv_cache, kernel=kernel)
    drop_file_pages(loaded)
    t0 = _lap(times, "engine", t0)
    model = Model(loaded, tokenizer_for(loaded, tokenizer), engine=engine)
    _lap(times, "tokenizer", t0)
    model.load_times = times
    return model


def _lap(times: dict[str, float], phase: str, t0: float) -> float:
    """Record the seconds since t0 as `phase`'s; return now (the next phase's start)."""
    now = time.perf_counter()
    times[phase] = now - t0
    return now
