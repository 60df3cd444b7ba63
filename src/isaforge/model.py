"""The Python API: `isaforge.load(path)` and the Model it returns, a thin face over the
stages below (formats read the file, text holds the tokenizer and chat template, runtime runs
the engine and the one generation loop under the model's profile).

    m = isaforge.load()                     # the default model (SmolLM2-135M-Instruct)
    m.chat([{"role": "user", "content": "Hi"}])
    m.generate("Once upon a time")          # raw continuation, no chat template
    m.create_chat_completion([...])         # OpenAI-shaped dicts (completions.py)
    m.embed(["a text", "another"])          # (2, dim) unit vectors (runtime/embed.py)
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator, Sequence

import numpy as np

from . import settings
from .formats import drop_file_pages, quantized_table, read_any, with_context
from .runtime.embed import check_pooling, embed_tokens, pooling_for
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


class _Default(int):
    """A keyword's default that prints as its value but is told apart from the same value
    given (a GenerationConfig passed as `config` keeps its own field then)."""


_MAX_NEW = _Default(DEFAULT_MAX_NEW)


def read_model(path: str | os.PathLike, quant: str = "auto") -> LoadedModel:
    """Parse a model (llama2.c .bin, GGUF, .isaf, Hugging Face folder) without copying what
    can be mapped. `quant` ("auto", the default: GGUF K-quant (Q4_K / Q5_K / Q6_K) and legacy
    (Q4_0 / Q4_1 / Q5_0 / Q5_1) and IQ4_NL / IQ4_XS matrices run in place on the file's blocks,
    the rest as "q8";
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

    def tokenize(self, text: str | bytes, add_special: bool = False, special: bool = True
                 ) -> list[int]:
        """Token ids of `text`; add_special: with the tokens the model puts before a prompt
        (its BOS, when it uses one). special: control-token texts ("<|im_start|>") read as
        those tokens."""
        if isinstance(text, bytes) and not self.profile.runc_output:
            text = text.decode("utf-8", "replace")
        return self.tokenizer.encode(text, bos=self.add_bos and add_special, special=special)

    def detokenize(self, ids: Sequence[int]) -> str:
        """The text of token ids (BOS/EOS and control tokens print nothing)."""
        ids = list(ids)
        bad = [t for t in ids if not 0 <= t < self.config.vocab_size]
        if bad:
            raise ValueError(f"token ids out of range [0, {self.config.vocab_size}): {bad[:5]}")
        return self.tokenizer.decode_tokens(ids)

    @property
    def pooling(self) -> str:
        """embed()'s default pooling: the model's (a GGUF's `<arch>.pooling_type`), else
        "mean"."""
        return pooling_for(self.loaded.metadata)

    def embed(self, texts: str | Sequence[str], pooling: str | None = None,
              normalize: bool = True) -> np.ndarray:
        """One float32 vector per text: the final hidden states (after the final norm) of
        its tokens (with BOS when the model uses one) pooled ("mean" over positions, "last",
        "cls"; None: `self.pooling`) and L2-normalized unless normalize=False. A str gives
        (dim,), a list (n, dim). A text's vector is the same bits alone or in any list."""
        pooling = check_pooling(self.pooling if pooling is None else pooling)
        one = isinstance(texts, (str, bytes))
        batch = [texts] if one else list(texts)
        if not all(isinstance(t, (str, bytes)) for t in batch):
            raise ValueError("embed() takes a string or a list of strings")
        toks = [self.encode(t) for t in batch]
        for i, t in enumerate(toks):
            if not t:
                raise ValueError(f"text {i} encodes to no tokens")
            if len(t) > self.config.seq_len:
                raise ContextFullError(f"text {i} is {len(t)} tokens, longer than the context "
                                       f"({self.config.seq_len}; see ctx=)")
        out = np.empty((len(batch), self.config.dim), np.float32)
        with self.session.hold():
            self.session.cached = []  # the cache is overwritten
            for i, t in enumerate(toks):
                out[i] = embed_tokens(self.engine, t, pooling, normalize)
        return out[0] if one else out

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

    @staticmethod
    def _config(config: GenerationConfig | None, **given) -> GenerationConfig:
        """`config` (default: GenerationConfig()) with the keywords given: a None sampling
        keyword or an untouched max_new_tokens leaves the config's field (None fields then
        take the profile's: the model card's)."""
        changes = {k: v for k, v in given.items()
                   if v is not None and not isinstance(v, _Default)}
        if "max_new_tokens" in given and given["max_new_tokens"] is None:
            changes["max_new_tokens"] = None  # until the context is full
        if config is not None and not isinstance(config, GenerationConfig):
            raise ValueError(f"config must be a GenerationConfig, got {type(config).__name__}")
        return (config or GenerationConfig()).replace(**changes)

    def generate_ids(self, prompt: str | list[int], max_new_tokens: int | None = 256,
                     temperature: float | None = None, top_p: float | None = None,
                     seed: int | None = None, steps: int | None = None,
                     stop_ids: tuple[int, ...] | None = None) -> Iterator[tuple[int, int]]:
        """(previous, next) token pairs exactly as run.c's loop prints them (the prompt's
        pieces too; run.c's sampler, no repetition penalty; temperature/top_p None: the
        model's). `prompt` is text or already-encoded tokens (BOS included)."""
        return self.pairs(prompt, GenerationConfig(
            max_new_tokens, steps, temperature, top_p, seed, repeat_penalty=1.0,
            stop_ids=stop_ids, echo=True))

    def constraint(self, kind: str, spec=None):
        """A grammar for `constraint=` (text.grammar.constraint_for over this model's
        tokenizer and stop ids): kind "json_schema" (spec: the schema), "json_object",
        "lark", "regex", "gbnf" (spec: the grammar's text) or "tagged_json" ({"prefix",
        "schema", "suffix"}). Needs llguidance (`pip install 'isaforge[grammar]'`)."""
        from .text.grammar import constraint_for

        return constraint_for(self.tokenizer, kind, spec, stop_ids=self.stop_ids,
                              vocab_size=self.config.vocab_size)

    def generate(self, prompt: str | Sequence[str], max_new_tokens: int | None = _MAX_NEW,
                 temperature: float | None = None, top_p: float | None = None,
                 seed: int | None = None, stream: bool = False,
                 stop: Sequence[str] | None = None, *, config: GenerationConfig | None = None,
                 constraint=None):
        """Text continuing `prompt` (the prompt itself excluded), no chat template. With
        stream=True, a generator of text pieces that never split a UTF-8 character. Stops at
        the tokenizer's stop ids (llama2.c: BOS or EOS) and before any `stop` string.
        Sampling left None: the model's (`profile`, the model card's).

        A list of prompts runs as one batch through the server's scheduler and returns a
        list of texts, each equal to its prompt's alone (not with stream=True). `constraint`
        (see `constraint()`): the text follows its grammar, ending when the grammar is
        complete."""
        config = self._config(config, max_new_tokens=max_new_tokens, temperature=temperature,
                              top_p=top_p, seed=seed, stop=stop, constraint=constraint)
        if not isinstance(prompt, (str, bytes)):
            if stream:
                raise ValueError("stream=True takes one prompt, not a list")
            from .completions import generate_many

            return generate_many(self, list(prompt), self.profile.complete(config))
        return self._text(prompt, config, stream)

    def complete(self, tokens: list[int], max_new_tokens: int | None = _MAX_NEW,
                 temperature: float | None = None, top_p: float | None = None,
                 seed: int | None = None, stop: Sequence[str] | None = None,
                 stream: bool = False, repeat_penalty: float | None = None, *,
                 config: GenerationConfig | None = None, constraint=None):
        """The text generated after the token ids `tokens` (what chat() and generate() run):
        stops at a stop id, before a `stop` string, or after max_new_tokens (None: when the
        context is full). Sampling left None: the model's. Returns the text, or a generator
        of pieces with stream=True. `constraint`: as generate()'s."""
        return self._text(tokens, self._config(
            config, max_new_tokens=max_new_tokens, temperature=temperature, top_p=top_p,
            seed=seed, stop=stop, repeat_penalty=repeat_penalty, constraint=constraint), stream)

    # -- OpenAI-shaped entry points (completions.py) -------------------------------------------

    def create_chat_completion(self, messages, *, max_tokens: int | None = None,
                               temperature: float | None = None, top_p: float | None = None,
                               seed: int | None = None, stop: str | Sequence[str] | None = None,
                               stream: bool = False, logprobs: bool = False,
                               top_logprobs: int | None = None, tools=None, tool_choice=None,
                               response_format=None, parallel_tool_calls: bool | None = None,
                               chat_template_kwargs: dict | None = None, n: int = 1,
                               frequency_penalty: float = 0.0, presence_penalty: float = 0.0,
                               repeat_penalty: float | None = None, grammar: str | None = None):
        """OpenAI's chat.completion as a dict (id, object, created, model, choices [{index,
        message, logprobs, finish_reason}], usage, system_fingerprint), or with stream=True
        an iterator of chat.completion.chunk dicts, as the server sends them. max_tokens
        None: 512, at most what the context has room for. tools, tool_choice,
        parallel_tool_calls, chat_template_kwargs and response_format are planned as the
        server plans them (text/chatplan.py, text/structured.py): offered tools reach the
        template and the reply's calls come back as message.tool_calls (reasoning as
        reasoning_content); tool_choice "required" or a named function, a JSON
        response_format and a GBNF `grammar` (llama.cpp's keyword) are enforced by
        constrained decoding (needs llguidance); a bad argument raises StructuredOutputError
        naming it."""
        from .completions import chat_completion

        return chat_completion(
            self, messages, max_tokens=max_tokens, temperature=temperature, top_p=top_p,
            seed=seed, stop=stop, stream=stream, logprobs=logprobs, top_logprobs=top_logprobs,
            tools=tools, tool_choice=tool_choice, response_format=response_format,
            parallel_tool_calls=parallel_tool_calls, chat_template_kwargs=chat_template_kwargs,
            n=n,
            frequency_penalty=frequency_penalty, presence_penalty=presence_penalty,
            repeat_penalty=repeat_penalty, grammar=grammar)

    def create_completion(self, prompt: str | Sequence[int], *, max_tokens: int | None = None,
                          temperature: float | None = None, top_p: float | None = None,
                          seed: int | None = None, stop: str | Sequence[str] | None = None,
                          stream: bool = False, logprobs: int | None = None,
                          echo: bool = False, n: int = 1, frequency_penalty: float = 0.0,
                          presence_penalty: float = 0.0, repeat_penalty: float | None = None,
                          response_format=None, grammar: str | None = None):
        """OpenAI's text_completion as a dict (choices [{index, text, logprobs,
        finish_reason}]), or with stream=True an iterator of chunk dicts. `prompt`: text
        (BOS added as the model does) or token ids. response_format and `grammar` (GBNF)
        constrain the text as the server's fields do."""
        from .completions import completion

        return completion(
            self, prompt, max_tokens=max_tokens, temperature=temperature, top_p=top_p,
            seed=seed, stop=stop, stream=stream, logprobs=logprobs, echo=echo, n=n,
            frequency_penalty=frequency_penalty, presence_penalty=presence_penalty,
            repeat_penalty=repeat_penalty, response_format=response_format, grammar=grammar)

    def render_chat(self, messages, add_generation_prompt: bool = True, tools=None) -> str:
        """The conversation as the model's chat template renders it (`tools`: OpenAI's tool
        list, passed to the template)."""
        return render_conversation(self.tokenizer, self._template(), messages,
                                   add_generation_prompt, self._template_chars(),
                                   **({"tools": tools} if tools else {}))

    def chat_tokens(self, messages, tools=None, template_kwargs: dict | None = None
                    ) -> list[int]:
        """Token ids of the rendered conversation plus the assistant prompt (BOS added when
        the tokenizer asks for it and the template did not already write it). Special-token
        texts inside the messages are tokenized as text (no injected turn boundary)."""
        extra = {**(template_kwargs or {}), **({"tools": tools} if tools else {})}
        return chat_tokens(self.tokenizer, self._template(), messages, self._template_chars(),
                           **extra)

    def _template_chars(self) -> int:
        return settings.template_max_chars(self.config.seq_len)

    def _template(self) -> str:
        template = self.chat_template
        if not template:
            raise ValueError(f"{self.path}: the model has no chat template; use generate()")
        return template

    def chat(self, messages, stream: bool = False, max_new_tokens: int | None = _MAX_NEW,
             temperature: float | None = None, top_p: float | None = None,
             seed: int | None = None, stop: Sequence[str] | None = None,
             repeat_penalty: float | None = None, tools=None, *,
             config: GenerationConfig | None = None, constraint=None):
        """The assistant's reply to `messages` ([{"role": "user", "content": ...}, ...]; also
        OpenAI's shapes: content parts, tool calls, tool results; `tools` go to the template).

        Renders the model's chat template, generates until an end-of-turn token, `stop`
        string (never emitted, not even in part) or max_new_tokens (None: until the context
        is full). temperature/top_p default to the model card's (0.2 / 0.9 for SmolLM2),
        repeat_penalty to the model's default (`default_repeat_penalty`).
        Returns the text, or with stream=True a generator of pieces. The KV cache of the
        longest common token prefix with the previous call is re-used, so a multi-turn
        conversation only prefills its new turn. `constraint`: the reply follows its grammar
        (see `constraint()`), ending when the grammar is complete."""
        config = self._config(config, max_new_tokens=max_new_tokens, temperature=temperature,
                              top_p=top_p, seed=seed, stop=stop, repeat_penalty=repeat_penalty,
                              constraint=constraint)
        return self._text(self.chat_tokens(messages, tools), config, stream)


def load(path: str | os.PathLike | None = None, tokenizer: str | os.PathLike | None = None,
         threads: int | None = None, kernel: str | None = None, quant: str = "auto",
         ctx: int | None = None, ubatch: int = 0, kv_cache: str = "f32", parallel: int = 1
         ) -> Model:
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
      (default), "f16" or "int8" (per position, head and group of head dims).
    parallel: KV cache slots, sequences a batch (generate([...]), create_* with n) decodes
      together (each slot a whole context's cache)."""
    if threads is not None and threads < 1:
        raise ValueError(f"threads must be >= 1, got {threads}")
    if isinstance(parallel, bool) or not isinstance(parallel, int) or parallel < 1:
        raise ValueError(f"parallel must be an integer >= 1, got {parallel!r}")
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
    engine = Engine(loaded, threads, ubatch=ubatch, kv_cache=kv_cache, kernel=kernel,
                    n_seqs=parallel)
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
