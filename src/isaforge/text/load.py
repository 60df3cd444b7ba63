"""The tokenizer of a loaded model: a llama2.c tokenizer.bin (given, embedded in a .isaf, or
found beside a llama2.c file), else the one its own metadata describes (GGUF, HF)."""

from __future__ import annotations

import base64
import os
from pathlib import Path

from ..types import LoadedModel, ModelFormatError, check_regular
from .hf import load_tokenizer
from .llama2c import Llama2cTokenizer


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
    vocab = loaded.config.vocab_size
    if tokenizer is not None:
        if any(k.startswith("tokenizer.") for k in loaded.metadata):
            raise ValueError(f"{loaded.path} carries its own tokenizer; -z/tokenizer= is only "
                             "for llama2.c models")
        tok_path = Path(tokenizer)
        check_regular(tok_path)
        if not tok_path.is_file():
            raise FileNotFoundError(f"{tok_path}: no such tokenizer file")
        return Llama2cTokenizer.load(tok_path, vocab)
    emb = loaded.metadata.get(LLAMA2C_TOKENIZER_KEY)
    if emb is not None:
        try:
            pieces = [base64.b64decode(p) for p in emb["pieces"]]
            return Llama2cTokenizer(pieces, emb["scores"], int(emb["max_token_length"]),
                                    f"{loaded.path} (embedded llama2.c tokenizer)")
        except (KeyError, TypeError, ValueError) as e:
            raise ModelFormatError(f"{loaded.path}: bad embedded llama2.c tokenizer: {e}") from None
    if loaded.format.startswith("llama2c"):
        return Llama2cTokenizer.load(find_tokenizer(Path(loaded.path), vocab), vocab)
    return load_tokenizer(loaded.metadata, loaded.path, vocab)
