"""Tokenizers carried inside model files (GGUF metadata, Hugging Face tokenizer.json).

`load_tokenizer(metadata, source)` takes a plain dict with GGUF key names and returns a
tokenizer with the same protocol as `Llama2cTokenizer` (``encode``, ``piece``, ``decode``,
``decode_tokens``, ``vocab_size``, ``bos_id``, ``eos_id``) plus ``stop_ids``, ``add_bos``,
``chat_template`` and ``encode(..., special=True)``. Encoding follows llama.cpp:

- special tokens first: the text is cut at every occurrence of a control/user-defined token's
  text, longest token first, each token scanned left to right (llama.cpp's
  ``tokenizer_st_partition``); with ``special=False`` control tokens stay plain text;
- "gpt2" vocabularies (byte-level BPE with merges): llama.cpp's pre-tokenizer regexes for the
  model's ``tokenizer.ggml.pre`` (see `_PRE_GROUPS`), then BPE by merge rank (run by the
  `tokenizers` library); a byte whose byte-level character is not a token is dropped;
- "llama" vocabularies (SentencePiece BPE with scores): dummy-prefix space, spaces as "▁",
  merges by best score (leftmost on ties), byte fallback ``<0xXX>`` for what stays unknown
  (else the unknown token, where llama.cpp would fail);
- ``tokenizer.huggingface.json`` (the text of a Hugging Face tokenizer.json): the `tokenizers`
  library as is, with ids/add_bos/chat template from the same GGUF key names.

tests/test_tokenizer_hf.py checks these ids against llama.cpp's (recorded, and live when
llama-cpp-python is importable).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence

from ..types import ModelFormatError
from .merge import merge_by_score
from .stream import decode_tokens

NORMAL, UNKNOWN, CONTROL, USER_DEFINED, UNUSED, BYTE = 1, 2, 3, 4, 5, 6  # GGUF token types
_STOP_TEXTS = ("<|im_end|>", "<|eot_id|>", "<|eom_id|>", "<|endoftext|>", "<|end|>",
               "<end_of_turn>", "<|end_of_text|>", "</s>")

# llama.cpp's pre-tokenizer regexes (llama-vocab.cpp) by tokenizer.ggml.pre name, applied one
# after the other, each isolating its matches (the GPT-2 regex is the byte-level one)
_GPT2 = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"
_CONTRACTIONS = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])"
_LLAMA3 = (_CONTRACTIONS + r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
           r"|\s*[\r\n]+|\s+(?!\S)|\s+")
_QWEN2 = _LLAMA3.replace(r"\p{N}{1,3}", r"\p{N}")
# Mistral's tekken: llama.cpp's lookahead form of "upper* lower+ | upper+ lower*" (any letter
# but a-z / A-Z), digits one by one, "/" kept after punctuation
_UPPER, _LOWER = r"(?:(?=\p{L})[^a-z])", r"(?:(?=\p{L})[^A-Z])"
_TEKKEN = (rf"[^\r\n\p{{L}}\p{{N}}]?{_UPPER}*{_LOWER}+|[^\r\n\p{{L}}\p{{N}}]?{_UPPER}+{_LOWER}*"
           r"|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+")
# DeepSeek's: newlines alone, then (llm) the letters DeepSeek lists (cased letters of its
# Unicode version, without Armenian and Georgian small letters; code point ranges below),
# ASCII and full-width punctuation, trailing spaces, CJK/Hangul runs
_DS_LETTERS = "".join(
    "\\x{" + r.replace("-", "}-\\x{") + "}" for r in (
    "41-5A 61-7A B5 C0-D6 D8-F6 F8-1BA 1BC-1BF 1C4-293 295-2AF 370-373 376-377 37B-37D "
    "37F 386 388-38A 38C 38E-3A1 3A3-3F5 3F7-481 48A-52F 531-556 10A0-10C5 13A0-13F5 "
    "13F8-13FD 1C90-1CBA 1CBD-1CBF 1D00-1D2B 1D6B-1D77 1D79-1D9A 1E00-1F15 1F18-1F1D "
    "1F20-1F45 1F48-1F4D 1F50-1F57 1F59 1F5B 1F5D 1F5F-1F7D 1F80-1FB4 1FB6-1FBC 1FBE "
    "1FC2-1FC4 1FC6-1FCC 1FD0-1FD3 1FD6-1FDB 1FE0-1FEC 1FF2-1FF4 1FF6-1FFC 2102 2107 "
    "210A-2113 2115 2119-211D 2124 2126 2128 212A-212D 212F-2134 2139 213C-213F "
    "2145-2149 214E 2183-2184 2C00-2C7B 2C7E-2CE4 2CEB-2CEE 2CF2-2CF3 A640-A66D "
    "A680-A69B A722-A76F A771-A787 A78B-A78E AB70-ABBF FB00-FB06 FB13-FB17 FF21-FF3A "
    "FF41-FF5A 10400-1044F 104B0-104D3 104D8-104FB 10C80-10CB2 10CC0-10CF2 118A0-118DF "
    "1E900-1E943"
    ).split())
_DS_CJK = r"[\x{4E00}-\x{9FA5}\x{0800}-\x{4E00}\x{AC00}-\x{D7FF}]+"
_DS_PUNCT = r"\s?[!-/:-~\x{FF01}-\x{FF0F}\x{FF1A}-\x{FF5E}\x{2018}-\x{201F}\x{3000}-\x{3002}]+"
_PRE_GROUPS: list[tuple[tuple[str, ...], tuple[str, ...]]] = [
    (("default",), (r"[\p{P}\$\+<=>\^~\|]+", _GPT2, r"\p{N}+", r"[0-9][0-9][0-9]")),
    (("gpt-2", "phi-2", "roberta-bpe", "mpt"), (_GPT2,)),
    (("smollm", "starcoder", "refact", "codeshell"), (r"\p{N}", _GPT2)),
    (("llama3", "llama-v3", "llama-bpe", "falcon3"), (_LLAMA3,)),
    (("qwen2", "stablelm2"), (_QWEN2,)),
    (("dbrx", "smaug-bpe"), (_LLAMA3,)),  # llama3's regex, merges always applied
    (("tekken",), (_TEKKEN,)),
    (("falcon",), (r"[\p{P}\$\+<=>\^~\|`]+", _GPT2, r"[0-9][0-9][0-9]")),
    (("deepseek-llm",), (r"[\r\n]", rf"\s?[{_DS_LETTERS}]+", _DS_PUNCT, r"\s+$", _DS_CJK,
                         r"\p{N}+")),
    (("deepseek-coder",), (r"[\r\n]", r"\s?\p{L}+", r"\s?\p{P}+", _DS_CJK, r"\p{N}")),
]
_PRE_REGEXES = {name: rx for names, rx in _PRE_GROUPS for name in names}
# names for the refusal message, two sorted lists: the first five groups (GPT-2, Llama 3 and
# Qwen 2 styles), then the other families'
_PRE_NAMES = [[n for g in _PRE_GROUPS[a:b] for n in g[0]] for a, b in ((0, 5), (5, None))]
# llama.cpp: these ignore merges for a word that is a token, and add BOS by default
_IGNORE_MERGES = (*_PRE_GROUPS[3][0], "tekken")


def byte_to_unicode() -> dict[int, str]:
    """GPT-2's byte-level alphabet: printable Latin-1 bytes map to themselves, the other 68
    bytes to U+0100.. in byte order."""
    keep = [*range(0x21, 0x7F), *range(0xA1, 0xAD), *range(0xAE, 0x100)]
    out, extra = {b: chr(b) for b in keep}, 0
    for b in range(256):
        if b not in out:
            out[b] = chr(0x100 + extra)
            extra += 1
    return out


_B2U = byte_to_unicode()
_U2B = {c: b for b, c in _B2U.items()}


def _spm_piece_bytes(text: str) -> bytes:
    """A SentencePiece token's bytes: "<0xXX>" is that byte, "▁" a space."""
    if len(text) == 6 and text.startswith("<0x") and text.endswith(">"):
        try:
            return bytes((int(text[3:5], 16),))
        except ValueError:
            pass
    return text.replace("\u2581", " ").encode("utf-8")


def _indices(types: Sequence[int], wanted: tuple[int, ...]) -> list[int]:
    """The indices whose type is in `wanted`, ascending. The types (GGUF token types, 0..6)
    are scanned as one bytes object by a regular expression: a 262k vocabulary in a few
    milliseconds, where a Python loop takes tens."""
    try:
        packed = bytes(types)
    except (TypeError, ValueError):  # not small ints: the plain loop
        return [i for i, ty in enumerate(types) if ty in wanted]
    cls = re.compile(b"[" + b"".join(re.escape(bytes((w,))) for w in wanted) + b"]")
    return [m.start() for m in cls.finditer(packed)]


def _byte_token_candidates(texts: Sequence[str], joined: str | None) -> list[int]:
    """The indices of texts of 6 characters starting "<0x" (SentencePiece byte tokens),
    ascending; `joined` is "\0".join(texts) when no text holds a NUL (found with str.find,
    a few hundred hits in a 262k vocabulary), else None (a loop)."""
    if joined is None:
        return [i for i, t in enumerate(texts) if len(t) == 6 and t[:3] == "<0x"]
    out, idx, counted = [], 0, 0
    at = joined.find("<0x")
    while at >= 0:
        end = at + 6  # the text must be exactly joined[at:end], between NULs or the ends
        if ((at == 0 or joined[at - 1] == "\0") and end <= len(joined)
                and joined[end:end + 1] in ("\0", "") and "\0" not in joined[at:end]):
            idx += joined.count("\0", counted, at)
            counted = at
            out.append(idx)
        at = joined.find("<0x", at + 1)
    return out


class Tokenizer:
    """Shared protocol: special-token partition, piece/decode, ids, chat template."""

    def __init__(self, texts: Sequence[str], types: Sequence[int], pieces: list[bytes],
                 bos_id: int | None, eos_id: int | None, eot_id: int | None, add_bos: bool,
                 chat_template: str | None, name: str, strip_space_after_bos: bool = False):
        self.name = name
        self._texts = list(texts)
        self._types = list(types)
        self._pieces = pieces
        self.bos_id = bos_id if bos_id is not None else -1
        self.eos_id = eos_id if eos_id is not None else -1
        self.add_bos = bool(add_bos) and bos_id is not None
        self.chat_template = chat_template
        self._strip_after_bos = strip_space_after_bos
        n = len(self._texts)
        marked = _indices(self._types, (CONTROL, USER_DEFINED, UNKNOWN))  # few, ascending
        stops = [t for t in (eos_id, eot_id) if t is not None and 0 <= t < n]
        for i in marked:
            if (self._texts[i] in _STOP_TEXTS and self._types[i] in (CONTROL, USER_DEFINED)
                    and i not in stops):  # end-of-turn tokens the model may emit
                stops.append(i)
        self.stop_ids: tuple[int, ...] = tuple(stops)
        # llama.cpp: control, user-defined and unknown tokens are split out before BPE,
        # longest first; only user-defined ones when special=False
        spec = [i for i in marked if self._texts[i]]
        spec.sort(key=lambda i: -len(self._texts[i].encode("utf-8")))
        self._special_all = [(self._texts[i], i) for i in spec]
        self._special_user = [(self._texts[i], i) for i in spec if self._types[i] == USER_DEFINED]

    @property
    def vocab_size(self) -> int:
        return len(self._texts)

    def _check(self, token: int) -> int:
        if not 0 <= token < len(self._texts):
            raise ValueError(f"token id {token} out of range [0, {len(self._texts)})")
        return token

    def token_text(self, token: int) -> str:
        """The token's text as stored in the vocabulary."""
        return self._texts[self._check(token)]

    def piece(self, token: int) -> bytes:
        """The bytes the token stands for (a control token: its text)."""
        return self._pieces[self._check(token)]

    def is_control(self, token: int) -> bool:
        return self._types[self._check(token)] in (CONTROL, UNKNOWN, UNUSED)

    def decode(self, prev_token: int, token: int) -> bytes:
        """The bytes printed for `token` after `prev_token`: nothing for control tokens; with
        a SentencePiece dummy prefix, the leading space after BOS (or at the start) is dropped."""
        if self.is_control(token):
            return b""
        p = self._pieces[token]
        if self._strip_after_bos and p[:1] == b" " and prev_token in (self.bos_id, -1, None):
            return p[1:]
        return p

    text_bytes = decode  # what `token` adds to decoded text (StreamDecoder's protocol)

    def decode_tokens(self, tokens: Iterable[int], prev_token: int | None = None) -> str:
        """Decode ids to text (UTF-8, errors="replace"); `prev_token` precedes `tokens`."""
        return decode_tokens(self, tokens, prev_token)

    def _partition(self, text: str, special: bool) -> list[str | int]:
        """llama.cpp's tokenizer_st_partition: raw text fragments (str) and token ids."""
        frags: list[str | int] = [text] if text else []
        for tok_text, tid in self._special_all if special else self._special_user:
            if not any(isinstance(f, str) and tok_text in f for f in frags):
                continue
            out: list[str | int] = []
            for f in frags:
                if isinstance(f, int) or tok_text not in f:
                    out.append(f)
                    continue
                parts = f.split(tok_text)
                for k, part in enumerate(parts):
                    if k:
                        out.append(tid)
                    if part:
                        out.append(part)
            frags = out
        return frags

    def encode(self, text: str, bos: bool | None = None, eos: bool = False,
               special: bool = True) -> list[int]:
        """Token ids of `text`. bos=None: the model's default (``add_bos``); special=True
        parses control-token texts such as "<|im_start|>" as single tokens."""
        if not isinstance(text, str):
            raise ValueError(f"encode() needs a str, got {type(text).__name__}")
        add_bos = self.add_bos if bos is None else bool(bos)
        if add_bos and self.bos_id < 0:
            raise ValueError(f"{self.name}: the model has no BOS token")
        if eos and self.eos_id < 0:
            raise ValueError(f"{self.name}: the model has no EOS token")
        return ([self.bos_id] if add_bos else []) + self._encode_text(text, special) + (
            [self.eos_id] if eos else [])

    def _encode_text(self, text: str, special: bool) -> list[int]:
        return self._encode_fragments(self._partition(text, special))

    def _encode_fragments(self, frags: list[str | int]) -> list[int]:
        raise NotImplementedError


_U2B_TABLE = str.maketrans({c: chr(b) for c, b in _U2B.items()})  # each char -> its byte
_NOT_BYTE_LEVEL = re.compile("[^" + "".join(f"\\u{ord(c):04x}" for c in _U2B) + "]")


def _byte_level_pieces(texts: Sequence[str], types: Sequence[int]) -> list[bytes]:
    """Each token's bytes: a normal or unused token whose characters are all GPT-2 byte-level
    ones is those bytes, a byte token "<0xXX>" that byte, any other its text in UTF-8 (control
    and user-defined tokens are stored as plain text). The byte-level tokens are translated
    all at once (one string, cut at each token's length: one byte per character), which
    takes a 128k vocabulary a fraction of the time a token-by-token loop does."""
    pieces = [t.encode("utf-8") for t in texts]
    sel = [i for i, ty in enumerate(types) if ty in (NORMAL, UNUSED)]
    bad = _NOT_BYTE_LEVEL
    keep = [i for i in sel if bad.search(texts[i]) is None] if bad.search(
        "".join(texts[i] for i in sel)) else sel  # the rare vocabulary with others: per token
    cat = "".join(texts[i] for i in keep).translate(_U2B_TABLE).encode("latin-1")
    at = 0
    for i in keep:
        n = len(texts[i])
        pieces[i] = cat[at:at + n]
        at += n
    for i in [i for i, ty in enumerate(types) if ty == BYTE]:
        pieces[i] = _spm_piece_bytes(texts[i])
    return pieces


class BPETokenizer(Tokenizer):
    """Byte-level BPE ("gpt2" GGUF vocabularies) with llama.cpp's pre-tokenizer."""

    def __init__(self, texts, types, merges: Sequence[str], pre: str, **kw):
        from tokenizers import Regex, models, pre_tokenizers
        from tokenizers import Tokenizer as HFTokenizer

        name = kw["name"]
        if pre not in _PRE_REGEXES:
            raise ModelFormatError(
                f"{name}: unsupported tokenizer.ggml.pre {pre!r} "
                f"(supported: {', '.join(sorted(_PRE_NAMES[0]))}; and "
                f"{', '.join(sorted(_PRE_NAMES[1]))})")
        n = len(texts)  # text -> its first id
        vocab: dict[str, int] = dict(zip(reversed(texts), range(n - 1, -1, -1), strict=True))
        parts = [m.partition(" ") for m in merges]
        for k, (a, sep, b) in enumerate(parts):
            if not sep or not a or not b:
                raise ModelFormatError(f"{name}: tokenizer.ggml.merges[{k}] is not 'a b': "
                                       f"{merges[k]!r}")
        pairs = [(a, b) for a, _, b in parts]
        try:
            # llama.cpp's llama3 pre-tokenizer takes a word that is a token as is
            bpe = models.BPE(vocab=vocab, merges=pairs, fuse_unk=False, byte_fallback=False,
                             ignore_merges=pre in _IGNORE_MERGES)
        except Exception as e:  # noqa: BLE001 - tokenizers raises plain Exception
            raise ModelFormatError(f"{name}: bad BPE vocab/merges: {e}") from None
        self._hf = HFTokenizer(bpe)
        steps = [pre_tokenizers.Split(Regex(r), behavior="isolated") for r in _PRE_REGEXES[pre]]
        steps.append(pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False))
        # llama.cpp drops a byte whose byte-level char is not a token, and nothing merges
        # across it: cut the word there and remove it
        missing = "".join(c for c in _U2B if c not in vocab)
        if missing:
            cls = "".join(f"\\x{{{ord(c):x}}}" for c in missing)
            steps.append(pre_tokenizers.Split(Regex(f"[{cls}]"), behavior="removed"))
        self._hf.pre_tokenizer = pre_tokenizers.Sequence(steps)
        super().__init__(texts, types, _byte_level_pieces(texts, types), **kw)

    def _encode_fragments(self, frags: list[str | int]) -> list[int]:
        ids: list[int] = []
        for f in frags:
            if isinstance(f, int):
                ids.append(f)
            else:
                ids += self._hf.encode(f, add_special_tokens=False).ids
        return ids


class SPMTokenizer(Tokenizer):
    """llama.cpp's SentencePiece-BPE ("llama" GGUF vocabularies): merges by score."""

    def __init__(self, texts, types, scores: Sequence[float], add_space_prefix: bool,
                 unk_id: int | None = None, **kw):
        from array import array

        self._unk_id = unk_id if unk_id is not None else next(
            (i for i, ty in enumerate(types) if ty == UNKNOWN), None)

        self._scores = list(array("f", scores))  # float32, compared as llama.cpp does
        n = len(texts)  # text -> its first id
        self._lookup: dict[str, int] = dict(zip(reversed(texts), range(n - 1, -1, -1), strict=True))
        self._byte_ids: dict[int, int] = {}
        for b in range(256):
            tid = self._lookup.get(f"<0x{b:02X}>")
            if tid is not None:
                self._byte_ids[b] = tid
        self.add_space_prefix = bool(add_space_prefix)
        # _spm_piece_bytes for normal, byte, user-defined and unused tokens, inlined
        joined = "\0".join(texts)  # one replace/encode/split for all 262k texts
        pieces = joined.replace("\u2581", " ").encode("utf-8").split(b"\0")
        split_ok = len(pieces) == n  # else a token has a NUL in it
        if not split_ok:
            pieces = [t.replace("\u2581", " ").encode("utf-8") for t in texts]
        for i in _byte_token_candidates(texts, joined if split_ok else None):
            pieces[i] = _spm_piece_bytes(texts[i])
        for i in _indices(types, (CONTROL, UNKNOWN, 0)):
            pieces[i] = texts[i].encode("utf-8")
        super().__init__(texts, types, pieces, strip_space_after_bos=self.add_space_prefix,
                         **kw)

    def _encode_fragments(self, frags: list[str | int]) -> list[int]:
        ids: list[int] = []
        prev_special = True  # llama.cpp: the dummy prefix goes on the first raw fragment
        for f in frags:       # and on any raw fragment right after a special token
            if isinstance(f, int):
                ids.append(f)
                prev_special = True
                continue
            if self.add_space_prefix and prev_special:
                f = " " + f
            ids += self._spm(f.replace(" ", "\u2581"))
            prev_special = False
        return ids

    def _spm(self, text: str) -> list[int]:
        """Merge adjacent symbols whose concatenation is a token, best score first (leftmost
        on ties), then emit tokens, undoing merges that are not tokens into byte tokens."""
        lookup, scores = self._lookup, self._scores

        def pair(a: str, b: str) -> tuple[float, str] | None:
            tid = lookup.get(a + b)
            return None if tid is None else (scores[tid], a + b)

        ids: list[int] = []
        for sym in merge_by_score(list(text), pair):
            tid = lookup.get(sym)
            if tid is not None:
                ids.append(tid)
                continue
            for b in sym.encode("utf-8"):  # byte fallback, else <unk>
                tid = self._byte_ids.get(b, self._unk_id)
                if tid is None:
                    raise ModelFormatError(f"{self.name}: no byte token <0x{b:02X}> and no "
                                           f"unknown token for {sym!r}")
                ids.append(tid)
        return ids


class HFJsonTokenizer(Tokenizer):
    """A Hugging Face tokenizer.json run by the `tokenizers` library; ids, add_bos and the
    chat template come from the GGUF-style keys of `md` (add_bos defaults to whether the
    post-processor's template starts with a special token, as transformers adds it)."""

    def __init__(self, spec: str, md: dict, name: str, vocab_size: int | None = None):
        from tokenizers import Tokenizer as HFTokenizer

        try:
            self._hf = HFTokenizer.from_str(spec)
            data = json.loads(spec)
        except Exception as e:  # noqa: BLE001 - tokenizers raises plain Exception
            raise ModelFormatError(f"{name}: bad tokenizer.json: {e}") from None
        vocab = self._hf.get_vocab(with_added_tokens=True)
        n = max(vocab.values()) + 1 if vocab else 0
        if n == 0:
            raise ModelFormatError(f"{name}: tokenizer.json has an empty vocabulary")
        cap = vocab_size if vocab_size is not None else MAX_VOCAB
        if n > cap:  # before any list of n entries is made
            t = max(vocab, key=vocab.get)
            raise ModelFormatError(
                f"{name}: tokenizer.json token {t!r} has id {n - 1}, beyond the model's "
                f"vocabulary of {cap} ids" if vocab_size is not None else
                f"{name}: tokenizer.json token {t!r} has id {n - 1} (limit {MAX_VOCAB})")
        texts = [""] * n
        for t, i in vocab.items():
            texts[i] = t
        types = [NORMAL] * n
        for a in data.get("added_tokens") or []:
            if 0 <= a.get("id", -1) < n:
                types[a["id"]] = CONTROL if a.get("special") else USER_DEFINED
        byte_level = '"ByteLevel"' in json.dumps(data.get("decoder"))
        pieces = []
        for t, ty in zip(texts, types, strict=True):
            if ty != NORMAL:
                pieces.append(t.encode("utf-8"))
            elif byte_level and all(c in _U2B for c in t):
                pieces.append(bytes(_U2B[c] for c in t))
            else:
                pieces.append(_spm_piece_bytes(t))
        prefix = json.dumps([data.get("normalizer"), data.get("pre_tokenizer")])
        strip = not byte_level and ('"Prepend"' in prefix or '"Metaspace"' in prefix)
        add_bos = md.get("tokenizer.ggml.add_bos_token")
        if add_bos is None:
            single = (data.get("post_processor") or {}).get("single") or [{}]
            add_bos = "SpecialToken" in single[0]
        super().__init__(texts, types, pieces,
                         bos_id=_opt_id(md, "tokenizer.ggml.bos_token_id", n, name),
                         eos_id=_opt_id(md, "tokenizer.ggml.eos_token_id", n, name),
                         eot_id=_opt_id(md, "tokenizer.ggml.eot_token_id", n, name),
                         add_bos=bool(add_bos), chat_template=md.get("tokenizer.chat_template"),
                         name=name, strip_space_after_bos=strip)

    def _encode_text(self, text: str, special: bool) -> list[int]:
        self._hf.encode_special_tokens = not special
        return self._hf.encode(text, add_special_tokens=False).ids if text else []


def _need(md: dict, key: str, source: str):
    if key not in md or md[key] is None:
        raise ModelFormatError(f"{source}: missing tokenizer metadata {key!r}")
    return md[key]


def _seq(md: dict, key: str, kind, n: int | None, source: str, default=None) -> list:
    """md[key] as a list of `kind` values (of length `n` when given); missing -> default."""
    v = md.get(key)
    if v is None:
        if default is None:
            raise ModelFormatError(f"{source}: missing tokenizer metadata {key!r}")
        return default
    if not isinstance(v, (list, tuple)) or not all(  # each distinct type once: fast
            issubclass(t, kind) and not issubclass(t, bool) for t in set(map(type, v))):
        names = "/".join(k.__name__ for k in (kind if isinstance(kind, tuple) else (kind,)))
        raise ModelFormatError(f"{source}: {key} must be a list of {names}")
    if n is not None and len(v) != n:
        raise ModelFormatError(f"{source}: {key} has {len(v)} entries, "
                               f"tokenizer.ggml.tokens has {n}")
    return list(v)


def _opt_id(md: dict, key: str, n: int, source: str) -> int | None:
    v = md.get(key)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v < n:
        raise ModelFormatError(f"{source}: {key} = {v!r} is not a token id in [0, {n})")
    return v


MAX_VOCAB = 1 << 24  # ids a tokenizer may have when the model's vocabulary is not known
TOKEN_TYPES = range(0, 7)  # GGUF: undefined (0), normal ... byte (6)


def load_tokenizer(metadata: dict, source: str, vocab_size: int | None = None) -> Tokenizer:
    """Build the tokenizer described by GGUF-style `metadata` (see the module docstring);
    `source` names the file in error messages. Every token id must be below `vocab_size`, the
    model's vocabulary (when given)."""
    md, src = metadata, str(source)
    template = md.get("tokenizer.chat_template")
    if template is not None and not isinstance(template, str):
        raise ModelFormatError(f"{src}: tokenizer.chat_template is not a string")
    if md.get("tokenizer.huggingface.json") is not None:
        spec = md["tokenizer.huggingface.json"]
        if not isinstance(spec, str):
            raise ModelFormatError(f"{src}: tokenizer.huggingface.json is not a string")
        return HFJsonTokenizer(spec, md, src, vocab_size)
    kind = _need(md, "tokenizer.ggml.model", src)
    texts = _seq(md, "tokenizer.ggml.tokens", str, None, src)
    if not texts:
        raise ModelFormatError(f"{src}: tokenizer.ggml.tokens is empty")
    n = len(texts)
    if n > (vocab_size or MAX_VOCAB):
        raise ModelFormatError(f"{src}: tokenizer.ggml.tokens has {n} entries, more than the "
                               f"model's vocabulary of {vocab_size or MAX_VOCAB}")
    types = _seq(md, "tokenizer.ggml.token_type", int, n, src, default=[NORMAL] * n)
    bad = None if set(types) <= set(TOKEN_TYPES) else next(
        i for i, t in enumerate(types) if t not in TOKEN_TYPES)
    if bad is not None:
        raise ModelFormatError(f"{src}: tokenizer.ggml.token_type[{bad}] = {types[bad]} is not "
                               "a GGUF token type (0..6)")
    kw = dict(bos_id=_opt_id(md, "tokenizer.ggml.bos_token_id", n, src),
              eos_id=_opt_id(md, "tokenizer.ggml.eos_token_id", n, src),
              eot_id=_opt_id(md, "tokenizer.ggml.eot_token_id", n, src),
              chat_template=template, name=src)
    if kind == "gpt2":
        merges = _seq(md, "tokenizer.ggml.merges", str, None, src)
        if not merges:
            raise ModelFormatError(f"{src}: tokenizer.ggml.merges is empty (a 'gpt2' BPE "
                                   "vocabulary needs its merges)")
        pre = md.get("tokenizer.ggml.pre") or "default"
        if not isinstance(pre, str):
            raise ModelFormatError(f"{src}: tokenizer.ggml.pre is not a string")
        add_bos = md.get("tokenizer.ggml.add_bos_token", pre in _IGNORE_MERGES)
        return BPETokenizer(texts, types, merges, pre, add_bos=bool(add_bos), **kw)
    if kind == "llama":
        scores = _seq(md, "tokenizer.ggml.scores", (int, float), n, src)
        return SPMTokenizer(texts, types, scores,
                            bool(md.get("tokenizer.ggml.add_space_prefix", True)),
                            _opt_id(md, "tokenizer.ggml.unknown_token_id", n, src),
                            add_bos=bool(md.get("tokenizer.ggml.add_bos_token", True)), **kw)
    raise ModelFormatError(f"{src}: unsupported tokenizer.ggml.model {kind!r} "
                           "(supported: 'gpt2', 'llama')")
