"""The server's `system_fingerprint`: "fp_" and 12 hex digits of a SHA-256 over what decides
the bytes a request gets, and nothing else.

In: the model file's SHA-256 (a folder: each file's relative path and bytes, in path order), a
llama2.c tokenizer's pieces and scores (it may come from another file), the resident type of
every matrix (Q8 g32, F32, Q6_K in place, ...), the KV cache type, the context per slot (it
bounds every reply) and NUMERICS_VERSION. Out, on purpose: the kernel tier, the thread count,
--parallel, the batch a request shares and the machine, because every kernel equals the
scalar one bit for bit and every batched row equals that sequence alone (docs/server.md,
"Determinism").

Hashing reads the whole file: `Fingerprint` does it in a thread of its own, started with the
server (hashlib releases the GIL, so the model load and the event loop go on meanwhile); a
request that needs it first waits for it."""

from __future__ import annotations

import hashlib
import json
import os
import threading
from pathlib import Path

from ..runtime.engine import resident_type
from ..text.llama2c import Llama2cTokenizer
from ..types import LAYER_MATRICES

# Raise it with any change that can alter a logit or a sampled token (a kernel's order of
# operations, the sampler, a tokenizer): equal fingerprints then still mean equal bytes.
NUMERICS_VERSION = 1
CHUNK = 1 << 20  # bytes hashed per read


def file_sha256(path: str | os.PathLike) -> str:
    """SHA-256 hex of a file's bytes, read in CHUNK pieces; of a folder, over each regular
    file's relative path and SHA-256 in path order (hidden entries skipped)."""
    p = Path(path)
    if p.is_dir():
        h = hashlib.sha256()
        for f in sorted(p.rglob("*")):
            rel = f.relative_to(p)
            if f.is_file() and not any(part.startswith(".") for part in rel.parts):
                h.update(json.dumps([rel.as_posix(), file_sha256(f)]).encode() + b"\n")
        return h.hexdigest()
    h = hashlib.sha256()
    with open(p, "rb") as fh:
        while block := fh.read(CHUNK):
            h.update(block)
    return h.hexdigest()


def resident_types(loaded, kernels: dict) -> list[str]:
    """Each matrix's resident type, layer by layer in the core's order, then the classifier
    and the token table (when not the classifier's); the same on every tier (row groups count
    as in place: resident_type)."""
    w = loaded.weights
    out = [resident_type(getattr(w, n)[layer], kernels)
           for layer in range(loaded.config.n_layers) for n in LAYER_MATRICES]
    out.append(resident_type(w.wcls, kernels))
    if w.tok_embeddings is not w.wcls:
        out.append("table " + resident_type(w.tok_embeddings, kernels))
    return out


def tokenizer_sha256(tok) -> str | None:
    """A llama2.c tokenizer's pieces and scores (its file may sit apart from the model's);
    None for the others, which the model file carries."""
    if not isinstance(tok, Llama2cTokenizer):
        return None
    h = hashlib.sha256()
    for t in range(tok.vocab_size):
        h.update(tok.piece(t).hex().encode() + b" " + repr(tok.score(t)).encode() + b"\n")
    return h.hexdigest()


def combine(model_sha: str, tok_sha: str | None, types: list[str], kv_cache: str,
            ctx: int) -> str:
    doc = {"model": model_sha, "tokenizer": tok_sha, "matrices": types, "kv_cache": kv_cache,
           "ctx": ctx, "numerics": NUMERICS_VERSION}
    return "fp_" + hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()[:12]


class Fingerprint:
    """A backend's fingerprint, its file hashed in a background thread (`value` waits)."""

    def __init__(self, backend):
        self._types = resident_types(backend.loaded, backend.engine.kernels)
        self._tok = tokenizer_sha256(backend.tokenizer)
        self._rest = (backend.engine.kv_cache, backend.ctx)
        self._path = backend.loaded.path
        self._value: str | None = None
        self._error: BaseException | None = None
        self._done = threading.Event()
        threading.Thread(target=self._run, name="isaforge-fingerprint", daemon=True).start()

    def _run(self) -> None:
        try:
            self._value = combine(file_sha256(self._path), self._tok, self._types, *self._rest)
        except BaseException as e:  # an unreadable file: every reply says so, none hangs
            self._error = e
        finally:
            self._done.set()

    def ready(self) -> bool:
        return self._done.is_set()

    def value(self, timeout: float | None = None) -> str:
        """The fingerprint, once the file is hashed (waits up to `timeout` seconds)."""
        if not self._done.wait(timeout):
            raise TimeoutError("the model file is still being hashed")
        if self._error is not None:
            raise RuntimeError(f"{self._path}: cannot hash the model file: {self._error}")
        return self._value
