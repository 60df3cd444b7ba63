"""The model a server runs: file, tokenizer, chat template and profile, and the Scheduler over
a BatchEngine with `parallel` sequence slots of `ctx` positions each. No other state is kept
between requests (each slot's cached prefix only), so replicas scale behind a load balancer."""

from __future__ import annotations

import json
import os
import threading
from collections import OrderedDict
from pathlib import Path

from ..formats import read_any, with_context
from ..runtime.batch import BatchEngine, Request, Scheduler
from ..runtime.profile import profile_for
from ..runtime.responses import make_request
from ..text.chat import chat_tokens, render_chat
from ..text.llama2c import Llama2cTokenizer
from ..text.load import tokenizer_for
from .fingerprint import Fingerprint

CONSTRAINTS_KEPT = 64  # compiled grammars kept for requests that send the same one again


class Backend:
    def __init__(self, path: str | os.PathLike | None = None, parallel: int = 4,
                 ctx: int | None = None, threads: int | None = None, max_queue: int = 64,
                 tokenizer: str | None = None, kernel: str | None = None,
                 kv_cache: str = "f32", ubatch: int = 0, prefill_chunk: int = 256,
                 name: str | None = None, quant: str = "auto"):
        if path is None:
            from ..pull import ensure_model

            path = ensure_model()
        if parallel < 1:
            raise ValueError(f"--parallel must be >= 1, got {parallel}")
        self.loaded = with_context(read_any(path, quant), ctx)
        self.tokenizer = tokenizer_for(self.loaded, tokenizer)
        self.template = self.tokenizer.chat_template if hasattr(self.tokenizer,
                                                                 "chat_template") else None
        self.template = self.template or self.loaded.metadata.get("tokenizer.chat_template")
        self.profile = profile_for(self.tokenizer, self.template)
        self.engine = BatchEngine(self.loaded, parallel, threads, ubatch=ubatch,
                                  kv_cache=kv_cache, kernel=kernel)
        self.scheduler = Scheduler(self.engine, max_queue=max_queue,
                                   prefill_chunk=prefill_chunk)
        self.ctx = self.loaded.config.seq_len
        self.parallel = parallel
        p = Path(self.loaded.path)
        self.name = name or (p.name if p.is_dir() else p.stem)
        self._typed: bool | None = None  # whether the template renders content lists
        self.max_token_bytes = _max_token_bytes(self.tokenizer)
        self.fingerprint = Fingerprint(self)  # hashes the model file in a thread
        self._constraints: OrderedDict = OrderedDict()
        self._constraints_lock = threading.Lock()

    def constraint(self, kind: str, spec):
        """The compiled text.grammar.Constraint of (kind, spec) for this model, the most
        recently used CONSTRAINTS_KEPT kept: a client that sends one schema with every
        request compiles it once. Raises GrammarError / GrammarUnavailable."""
        from ..text.grammar import constraint_for

        key = (kind, json.dumps(spec, sort_keys=True))
        with self._constraints_lock:
            if key in self._constraints:
                self._constraints.move_to_end(key)
                return self._constraints[key]
        c = constraint_for(self.tokenizer, kind, spec, stop_ids=self.profile.stop_ids,
                           vocab_size=self.loaded.config.vocab_size)
        with self._constraints_lock:
            self._constraints[key] = c
            while len(self._constraints) > CONSTRAINTS_KEPT:
                self._constraints.popitem(last=False)
        return c

    def prompt_bytes(self, text: str) -> int:
        """The UTF-8 bytes of `text` the tokenizer reads (a llama2.c one stops at a NUL)."""
        if isinstance(self.tokenizer, Llama2cTokenizer):
            text = text.split("\0", 1)[0]
        return len(text.encode("utf-8", "replace"))

    def min_tokens(self, n_bytes: int) -> int:
        """The fewest tokens `n_bytes` of text can encode to: no token stands for more than
        max_token_bytes bytes of input (its text, or its bytes, whichever is longer)."""
        return -(-n_bytes // self.max_token_bytes)

    def accepts(self, model: str) -> bool:
        """Whether a request's "model" names this one (its name, file name or path)."""
        p = Path(self.loaded.path)
        return model in (self.name, p.name, str(p), str(self.loaded.path))

    def chat_tokens(self, messages, tools=None, template_kwargs=None) -> list[int]:
        """Token ids of a conversation. Content lists reach the template as lists when it
        renders them (as transformers passes them); a template that cannot (it concatenates
        content as a string, like SmolLM2's) gets each list's text parts joined by newlines
        and "" for a tool-calling turn's null content, as llama.cpp's server does.
        `template_kwargs` become template variables (chat_template_kwargs)."""
        if not self.template:
            raise ValueError(f"{self.name} has no chat template; use /v1/completions")
        extra = {**(template_kwargs or {}), **({"tools": tools} if tools else {})}
        if not self._typed_content():
            messages = [_flatten(m) for m in messages]
        return chat_tokens(self.tokenizer, self.template, messages, **extra)

    def _typed_content(self) -> bool:
        if self._typed is None:
            probe = "\ue000probe\ue001"
            try:
                text = render_chat(self.template, [{"role": "user", "content": [
                    {"type": "text", "text": probe}]}], bos_token="", eos_token="")
                self._typed = probe in text
            except ValueError:
                self._typed = False
        return self._typed

    def encode(self, prompt: str) -> list[int]:
        return self.tokenizer.encode(prompt, bos=self.profile.add_bos, special=True)

    def request(self, tokens: list[int], max_new: int, params, emit, seed_offset: int = 0
                ) -> Request:
        return make_request(self.profile, tokens, max_new, emit, temperature=params.temperature,
                            top_p=params.top_p, seed=params.seed,
                            repeat_penalty=params.repeat_penalty,
                            frequency_penalty=params.frequency_penalty,
                            presence_penalty=params.presence_penalty,
                            ignore_eos=params.ignore_eos, logprobs=params.logprobs,
                            seed_offset=seed_offset, top_k=params.top_k, min_p=params.min_p,
                            typical_p=params.typical_p, logit_bias=params.logit_bias,
                            constraint=params.constraint)

    def close(self) -> None:
        self.scheduler.close(timeout=30)


def _max_token_bytes(tok) -> int:
    """The most input bytes one token can consume: the longest piece or vocabulary text
    (a control token's text, such as "<|im_start|>", is one token when special)."""
    n = 1
    for t in range(tok.vocab_size):
        n = max(n, len(tok.piece(t)))
        if hasattr(tok, "token_text"):
            n = max(n, len(tok.token_text(t).encode("utf-8")))
    return n


def _flatten(m):
    c = m.get("content") if isinstance(m, dict) else None
    if isinstance(c, list) and all(isinstance(p, dict) and p.get("type") == "text" and
                                   isinstance(p.get("text"), str) for p in c):
        return {**m, "content": "\n".join(p["text"] for p in c)}
    if isinstance(m, dict) and c is None and m.get("tool_calls"):
        return {**m, "content": ""}  # a tool-calling turn: the template wants a string
    return m
