"""Constrained generation: a grammar (JSON schema, Lark, regex, llama.cpp's GBNF) compiled
against a tokenizer into a `Constraint`, whose `Matcher`s mask each step's logits to the tokens
that keep the text inside the grammar.

The grammar engine is llguidance (an optional dependency, `pip install 'isaforge[grammar]'`):
it works on any vocabulary given as the bytes of each token, which `token_bytes` makes of
isaforge's tokenizers (llama2.c's SentencePiece-style pieces, GGUF and tokenizer.json
vocabularies). Without it the package imports as usual and `constraint_for` raises
GrammarUnavailable, naming the package.

    c = constraint_for(tokenizer, "json_schema", {"type": "object", ...}, stop_ids=(2,))
    m = c.matcher()           # one per sequence: its own parse state
    m.mask(logits)            # disallowed tokens -> -inf, in place (False: none is allowed)
    m.advance(token)          # after sampling; m.finished once the grammar is complete

A Constraint is immutable and shareable between threads and requests; a Matcher belongs to
one sequence. The stop ids are the constraint's end-of-text tokens: allowed exactly where the
grammar is complete, so sampling one ends a constrained generation as any stop id does.
"""

from __future__ import annotations

import json
import re
import threading
import weakref
from collections.abc import Sequence

import numpy as np

__all__ = ["KINDS", "Constraint", "GrammarError", "GrammarUnavailable", "Matcher",
           "constraint_for", "mask_rows", "tagged_json", "token_bytes", "tool_call_schema"]

PACKAGE = "llguidance"
INSTALL = "pip install 'isaforge[grammar]'"
KINDS = ("json_schema", "json_object", "lark", "regex", "gbnf", "tagged_json")
SPECIAL = b"\xff"  # llguidance's mark of a special token's bytes: never matched by text
# JSON without free whitespace, with a space after ":" and ",": a model cannot spend its token
# budget on blank lines, and the text reads as json.dumps writes it. A schema's own
# "x-guidance" options come after these and win.
JSON_DEFAULTS = {"whitespace_flexible": False, "item_separator": ", ", "key_separator": ": "}


class GrammarUnavailable(RuntimeError):
    """The grammar engine (llguidance) is not installed."""


class GrammarError(ValueError):
    """A schema or grammar that cannot be compiled: the message names the problem."""


def _engine():
    try:
        import llguidance
    except ImportError:
        raise GrammarUnavailable(f"structured output needs the {PACKAGE} package, which is not "
                                 f"installed ({INSTALL})") from None
    return llguidance


# -- the tokenizer adapter ---------------------------------------------------------------------

def token_bytes(tokenizer) -> list[bytes]:
    """Each token's bytes as text (what it adds after a token other than BOS), control tokens
    (BOS, EOS, end-of-turn, unknown) as SPECIAL + their text, which no grammar's text matches.

    A llama2.c vocabulary: run.c's pieces (C strings; "<0xXX>" the byte), ids 0-2 (unk, BOS,
    EOS) special. A GGUF / tokenizer.json one: each token's bytes (byte-level or "▁"-spaced
    pieces decoded), control, unknown and unused tokens special."""
    n = tokenizer.vocab_size
    out: list[bytes] = []
    if hasattr(tokenizer, "is_control"):
        for t in range(n):
            if tokenizer.is_control(t):
                out.append(SPECIAL + tokenizer.token_text(t).encode("utf-8"))
            else:
                out.append(tokenizer.piece(t))
        return out
    special = {0, tokenizer.bos_id, tokenizer.eos_id}
    for t in range(n):
        if t in special:
            out.append(SPECIAL + tokenizer.piece(t))
        else:
            out.append(tokenizer.decode(-1, t))  # -1: not after BOS, the space is kept
    return out


class _Greedy:
    """Longest-match tokenizing over the text tokens: what llguidance asks of a tokenizer to
    find the tokens of bytes the grammar forces (any tokenization whose bytes are right
    works there; the model's own merges are not needed)."""

    def __init__(self, pieces: Sequence[bytes], special: set[int]):
        self.lookup: dict[bytes, int] = {}
        for i, p in enumerate(pieces):
            if p and i not in special and not p.startswith(SPECIAL):
                self.lookup.setdefault(p, i)
        self.longest = max(map(len, self.lookup), default=1)

    def __call__(self, s: bytes | str) -> list[int]:
        if isinstance(s, str):
            s = s.encode("utf-8")
        out, i, n = [], 0, len(s)
        while i < n:
            for k in range(min(self.longest, n - i), 0, -1):
                t = self.lookup.get(s[i:i + k])
                if t is not None:
                    out.append(t)
                    i += k
                    break
            else:
                i += 1  # a byte no token spells: the grammar cannot force it either
        return out


class _Wrapper:
    """What llguidance.TokenizerWrapper reads of a tokenizer."""

    def __init__(self, pieces: list[bytes], eos: int, bos: int | None, special: list[int]):
        self.tokens, self.eos_token_id, self.bos_token_id = pieces, eos, bos
        self.special_token_ids = special
        self._greedy = _Greedy(pieces, set(special))

    def __call__(self, s):
        return self._greedy(s)


_LL_CACHE: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_LL_LOCK = threading.Lock()


def _ll_tokenizer(tokenizer, stop_ids: tuple[int, ...], n_vocab: int | None):
    """The llguidance tokenizer of `tokenizer` (built once per tokenizer, stop ids and size:
    a large vocabulary takes a noticeable fraction of a second)."""
    ll = _engine()
    key = (stop_ids, n_vocab)
    with _LL_LOCK:
        per = _LL_CACHE.setdefault(tokenizer, {})
        if key in per:
            return per[key]
        pieces = token_bytes(tokenizer)
        special = [i for i, p in enumerate(pieces) if p.startswith(SPECIAL)]
        bos = getattr(tokenizer, "bos_id", None)
        w = _Wrapper(pieces, stop_ids[0], bos if bos is not None and bos >= 0 else None,
                     special)
        per[key] = ll.LLTokenizer(ll.TokenizerWrapper(w), n_vocab=n_vocab,
                                  eos_token=list(stop_ids))
        return per[key]


# -- grammars ----------------------------------------------------------------------------------

def _lark_string(s: str) -> str:
    """A Lark string literal for s (JSON's escapes, which llguidance's Lark reads)."""
    return json.dumps(s, ensure_ascii=False)


def _with_defaults(schema: dict) -> dict:
    xg = schema.get("x-guidance")
    return {**schema, "x-guidance": {**JSON_DEFAULTS, **(xg if isinstance(xg, dict) else {})}}


def tagged_json(prefix: str, schema: dict | bool, suffix: str, separator: str | None = None,
                after: str | None = None) -> str:
    """A Lark grammar for `prefix`, then one JSON value of `schema`, then `suffix`: a tool
    call such as <tool_call>{"name": ..., "arguments": {...}}</tool_call> (make `schema` an
    anyOf over the tools to allow any of them). With `separator`, one or more values joined
    by it (several calls: "\n</tool_call>\n<tool_call>\n" between Hermes calls). With
    `after`, free text up to the first `after` comes first (a reasoning block the prompt
    opened: "</think>"), then a blank line, then the rest."""
    body = _with_defaults(schema) if isinstance(schema, dict) else schema
    value = "%json " + json.dumps(body, ensure_ascii=False)
    rules = []
    parts = []
    if after:  # lazy: the text ends at the first `after`, which it cannot then contain
        rules.append("lead[lazy]: /(?s:.*)" + _regex_literal(after) + "/")
        parts += ["lead", _lark_string("\n\n")]
    if prefix:
        parts.append(_lark_string(prefix))
    if separator:
        rules.append("value: " + value)
        parts.append(f"value ({_lark_string(separator)} value)*")
    else:
        parts.append(value)
    if suffix:
        parts.append(_lark_string(suffix))
    return "start: " + " ".join(parts) + "\n" + "".join(r + "\n" for r in rules)


def _regex_literal(s: str) -> str:
    """`s` matched literally inside a Lark /regex/ (slashes escaped for Lark)."""
    return re.escape(s).replace("/", "\\/")


def tool_call_schema(tools: Sequence[dict]) -> dict:
    """The schema of one call of any of OpenAI's `tools` ([{"type": "function", "function":
    {"name", "parameters"}}]): {"name": that name, "arguments": its parameters}, as an anyOf
    (a single tool: its own object). For tool_choice "required" give every tool, for a named
    function that one; wrap it in tagged_json() for a template's call markers."""
    alts = []
    for i, t in enumerate(tools):
        fn = t.get("function") if isinstance(t, dict) else None
        if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
            raise GrammarError(f"tools[{i}] has no function name")
        params = fn.get("parameters")
        if params is None:  # a function without parameters takes {}
            params = {"type": "object", "properties": {}, "additionalProperties": False}
        if not isinstance(params, (dict, bool)):
            raise GrammarError(f"tools[{i}].function.parameters must be a JSON schema object")
        alts.append({"type": "object", "additionalProperties": False,
                     "properties": {"name": {"const": fn["name"]}, "arguments": params},
                     "required": ["name", "arguments"]})
    if not alts:
        raise GrammarError("no tools to call")
    return alts[0] if len(alts) == 1 else {"anyOf": alts}


def _schema(spec, what: str) -> dict | bool:
    if isinstance(spec, str):
        try:
            spec = json.loads(spec)
        except ValueError as e:
            raise GrammarError(f"{what} is not valid JSON: {e}") from None
    if not isinstance(spec, (dict, bool)):
        raise GrammarError(f"{what} must be a JSON object (a JSON schema), got "
                           f"{type(spec).__name__}")
    return spec


def _text(spec, kind: str) -> str:
    if not isinstance(spec, str) or not spec.strip():
        raise GrammarError(f"a {kind} grammar must be a non-empty string")
    return spec


def _grammar(ll, kind: str, spec) -> str:
    """llguidance's grammar text for (kind, spec)."""
    M = ll.LLMatcher
    if kind == "json_object":
        kind, spec = "json_schema", {"type": "object"}
    if kind == "json_schema":
        s = _schema(spec, "the JSON schema")
        if s is False:
            raise GrammarError("the JSON schema is false: no value matches it")
        if s is True:
            s = {}
        try:
            return M.grammar_from_json_schema(s, defaults=JSON_DEFAULTS)
        except ValueError as e:
            raise GrammarError(f"the JSON schema: {e}") from None
    if kind == "tagged_json":
        if not isinstance(spec, dict) or "schema" not in spec:
            raise GrammarError('a tagged_json constraint is {"prefix": str, "schema": {...}, '
                               '"suffix": str}')
        pre, suf = spec.get("prefix", ""), spec.get("suffix", "")
        sep, after = spec.get("separator"), spec.get("after")
        if not all(isinstance(x, str) for x in (pre, suf)) or not all(
                x is None or isinstance(x, str) for x in (sep, after)):
            raise GrammarError("tagged_json's prefix, suffix, separator and after must be "
                               "strings")
        return M.grammar_from_lark(tagged_json(pre, _schema(spec["schema"], "the JSON schema"),
                                               suf, sep, after))
    if kind == "lark":
        return M.grammar_from_lark(_text(spec, kind))
    if kind == "regex":
        return M.grammar_from_regex(_text(spec, kind))
    if kind == "gbnf":
        try:
            return ll.grammar_from("gbnf", _text(spec, kind))
        except ValueError as e:
            raise GrammarError(f"the GBNF grammar: {e}") from None
    raise GrammarError(f"unknown constraint kind {kind!r} (one of {', '.join(KINDS)})")


class Constraint:
    """A compiled grammar over one tokenizer: `matcher()` starts a sequence's parse state.
    Built by constraint_for; immutable, shared by the requests that use it."""

    def __init__(self, lltok, proto, kind: str, vocab: int, stop_ids: tuple[int, ...]):
        self._tok, self._proto = lltok, proto
        self._lock = threading.Lock()  # deep_copy of one prototype from many threads
        self.kind, self.vocab, self.stop_ids = kind, vocab, stop_ids

    def matcher(self) -> Matcher:
        with self._lock:
            return Matcher(self._proto.deep_copy(), self.vocab, self.stop_ids)


# byte -> the 8 additive biases of its bits, low bit first: 0 where allowed, -inf where not
_BIAS = np.where(np.unpackbits(np.arange(256, dtype=np.uint8)[:, None], axis=1,
                               bitorder="little").astype(bool),
                 np.float32(0), np.float32(-np.inf)).astype(np.float32)


class Matcher:
    """One sequence's parse state (see the module doc)."""

    __slots__ = ("_m", "_words", "_bias", "vocab", "stop_ids", "error")

    def __init__(self, m, vocab: int, stop_ids: tuple[int, ...]):
        self._m, self.vocab, self.stop_ids = m, vocab, stop_ids
        self._words = np.zeros((vocab + 31) // 32, np.uint32)  # the mask, one bit a token
        self._bias = np.empty((self._words.size * 4, 8), np.float32)  # a bias per bit
        self.error = ""

    def allowed(self) -> np.ndarray:
        """(vocab,) bool: the tokens the grammar allows next."""
        w = self._words
        self._m.unsafe_compute_mask_ptr(w.ctypes.data, w.nbytes)
        return np.unpackbits(w.view(np.uint8), count=self.vocab, bitorder="little").view(bool)

    def mask(self, logits: np.ndarray) -> bool:
        """Set the logits of every token the grammar forbids to -inf, in place (a row longer
        than the vocabulary: its tail too). False, and `error` set, when no token is allowed
        (the matcher failed): the caller ends the sequence rather than sample from nothing.

        The mask's bytes index a table of additive biases (0 or -inf) and the row adds them:
        a gather and an add whatever the pattern, where a boolean-mask store over a 49k row
        costs a few times more, the more so when allowed and forbidden tokens interleave (a
        string's text forbids the tokens holding a quote or a backslash, all over the
        vocabulary).
        An allowed logit keeps its value (x + 0 is x; -0.0 becomes +0.0, which compares and
        samples the same). A forbidden NaN stays NaN: should the sampler pick it, advance()
        refuses it and the sequence ends with an error before the token is emitted."""
        w = self._words
        self._m.unsafe_compute_mask_ptr(w.ctypes.data, w.nbytes)
        if not w.any():
            self.error = self._m.get_error() or "the grammar allows no token here"
            return False
        np.take(_BIAS, w.view(np.uint8), axis=0, out=self._bias)
        n = min(logits.shape[-1], self.vocab)
        logits[:n] += self._bias.reshape(-1)[:n]
        logits[self.vocab:] = -np.inf
        return True

    def advance(self, token: int) -> bool:
        """Take the sampled token; False (and `error` set) if the grammar refuses it."""
        if not self._m.consume_token(int(token)):
            self.error = self._m.get_error() or f"the grammar refuses token {token}"
            return False
        return True

    @property
    def finished(self) -> bool:
        """The grammar is complete and allows nothing more: the sequence ends here."""
        return self._m.is_stopped()

    @property
    def accepting(self) -> bool:
        """The text so far is a complete sentence of the grammar (it may still go on)."""
        return self._m.is_accepting()


def mask_rows(matchers: Sequence[Matcher], logits: np.ndarray, rows: Sequence[int]
              ) -> list[bool]:
    """matchers[i].mask(logits[rows[i]]) for every i, one after the other: llguidance's
    thread pool (LLExecutor) spreading the rows over 2 cores took 2.5 times as long on a
    busy 2-core machine (docs/server.md, "Structured output")."""
    return [m.mask(logits[r]) for m, r in zip(matchers, rows, strict=True)]


def constraint_for(tokenizer, kind: str, spec=None, stop_ids: Sequence[int] | None = None,
                   vocab_size: int | None = None) -> Constraint:
    """Compile a constraint for generation with `tokenizer`.

    kind / spec: "json_schema" / a JSON schema (dict, or its JSON text); "json_object" / None
      (any JSON object); "lark" / Lark text (llguidance's Lark: `%json {...}` embeds a schema,
      /regex/ terminals); "regex" / a regular expression for the whole text; "gbnf" /
      llama.cpp's GBNF grammar text; "tagged_json" / {"prefix": str, "schema": {...},
      "suffix": str, "separator"?: str, "after"?: str} (a literal, one JSON value or several
      joined by the separator, a literal, after free text up to `after`: see tagged_json()).
    stop_ids: the end-of-text tokens, allowed where the grammar is complete (default: the
      tokenizer's stop ids, else its EOS). vocab_size: the logits' width when it differs
      from the tokenizer's (ids past the vocabulary are never allowed).

    Raises GrammarError naming what is wrong with the schema or grammar (unknown or
    unsupported keywords included: never a constraint that silently allows more), and
    GrammarUnavailable without llguidance."""
    ll = _engine()
    if stop_ids is None:
        stop_ids = getattr(tokenizer, "stop_ids", None) or (tokenizer.eos_id,)
    stop = tuple(int(t) for t in stop_ids if 0 <= int(t) < tokenizer.vocab_size)
    if not stop:
        raise GrammarError("a constraint needs at least one stop id in the vocabulary")
    vocab = max(int(vocab_size or 0), tokenizer.vocab_size)
    lltok = _ll_tokenizer(tokenizer, stop, vocab)
    grammar = _grammar(ll, kind, spec)
    is_error, msgs = ll.LLMatcher.validate_grammar_with_warnings(grammar, lltok)
    if is_error:
        raise GrammarError(_what(kind, msgs[0] if msgs else "invalid"))
    proto = ll.LLMatcher(lltok, grammar, log_level=0)
    if proto.is_error():
        raise GrammarError(_what(kind, proto.get_error()))
    if not proto.is_accepting() and proto.is_stopped():
        raise GrammarError(_what(kind, "it matches no text"))
    return Constraint(lltok, proto, kind, vocab, stop)


def _what(kind: str, msg: str) -> str:
    name = {"json_schema": "the JSON schema", "json_object": "the JSON object grammar",
            "tagged_json": "the tagged JSON grammar", "lark": "the Lark grammar",
            "regex": "the regular expression", "gbnf": "the GBNF grammar"}[kind]
    return f"{name}: {msg.strip()}"
