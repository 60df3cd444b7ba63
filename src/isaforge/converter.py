"""`isaforge convert`: any model the readers know, written as a .isaf (formats/isaf.py), with a
llama2.c tokenizer embedded. It reads models and tokenizers, so it sits above formats/ and the
tokenizers, beside the API (model.py) whose helpers it uses."""

from __future__ import annotations

import base64
import os
from collections.abc import Callable
from pathlib import Path

from .formats import check_finite, detect_format
from .formats.gguf import read_gguf
from .formats.isaf import KEEP_PREFIXES, ConvertSummary, requantize, write_isaf
from .formats.tables import quantized_table
from .model import read_model
from .text.llama2c import Llama2cTokenizer
from .text.load import LLAMA2C_TOKENIZER_KEY, find_tokenizer
from .types import LoadedModel


def convert(src: str | os.PathLike, out: str | os.PathLike, quant: str = "q8",
            group_size: int | None = None, tokenizer: str | os.PathLike | None = None,
            log: Callable[[str], None] = lambda s: None, classifier: str = "q8",
            progress: Callable[[int, int], None] | None = None) -> ConvertSummary:
    """`isaforge convert`: read any supported model and write it as .isaf.

    quant "q8" (default), "f32", or a 4-bit scheme: "cq4" (CQ4 at its default group size;
    "cq4-32/64/128", "-lsq", "-norot" choose; GGUF Q4_0/IQ4_NL/IQ4_XS tensors kept as they are)
    or "q4_0"; the .isaf then holds 4-bit layer matrices and a Q8 classifier. group_size: Q8
    group size (must divide dim and hidden_dim; default: the source's Q8 group size, else the
    largest power of two <= 64 dividing both). tokenizer: a llama2.c tokenizer.bin to embed
    (default: the one beside a llama2.c model, if any). classifier: a 4-bit conversion's
    classifier, "q8" (default) or "4bit" (the layers' 4-bit scheme at their group size; a tied
    model's token table is that matrix, stored once: about 0.55 instead of 0.66 bytes per
    parameter on SmolLM2, for more KL, README "4-bit weights"). progress(done, total) follows
    a GGUF file's 4-bit conversion matrix by matrix."""
    from .quant.cq4 import QUANT_HELP, parse_quant

    try:
        spec = parse_quant(quant)
    except ValueError:
        raise ValueError(f"quant must be one of {QUANT_HELP}; got {quant!r}") from None
    quant = str(spec)
    if spec.kind == "auto":  # K-quant blocks run in place from the GGUF file itself
        raise ValueError("--quant auto runs a GGUF file's K-quant and legacy blocks in place and "
                         "has nothing to convert; choose q8, f32 or a 4-bit scheme")
    if group_size is not None and quant != "q8":
        raise ValueError("--group-size only applies to --quant q8")
    src_p = Path(src)
    if os.path.exists(out) and src_p.exists() and os.path.samefile(src_p, out):
        raise ValueError(f"output {out} is the input file; choose another path")
    if spec.four_bit and not spec.gptq and detect_format(src_p) == "gguf":
        # one layer matrix of the source in memory at a time, quantized from its blocks
        loaded = read_gguf(src_p, quant, stream=True, progress=progress)
        check_finite(loaded)
        loaded = quantized_table(loaded)
    else:
        loaded = read_model(src_p, quant)
    loaded, _ = requantize(loaded, quant, group_size, log)
    if classifier not in ("q8", "4bit"):
        raise ValueError(f"classifier must be q8 or 4bit, got {classifier!r}")
    if classifier == "4bit":
        if not spec.four_bit:
            raise ValueError("--classifier 4bit needs a 4-bit --quant (cq4..., q4_0)")
        loaded = four_bit_classifier(loaded, spec)
    metadata = {k: v for k, v in loaded.metadata.items() if k.startswith(KEEP_PREFIXES)}
    if loaded.format.startswith("llama2c"):
        try:
            tpath = Path(tokenizer) if tokenizer is not None else find_tokenizer(
                src_p, loaded.config.vocab_size)
            tok = Llama2cTokenizer.load(tpath, loaded.config.vocab_size)
        except FileNotFoundError:
            if tokenizer is not None:
                raise
            tok = None
            log(f"{src}: no tokenizer beside it; the .isaf needs -z/tokenizer= at load")
        if tok is not None:
            metadata[LLAMA2C_TOKENIZER_KEY] = {
                "max_token_length": tok.max_token_length,
                "pieces": [base64.b64encode(tok.piece(i)).decode() for i in range(tok.vocab_size)],
                "scores": [tok.score(i) for i in range(tok.vocab_size)],
            }
    elif tokenizer is not None:
        raise ValueError("-z/tokenizer= only applies to llama2.c models; others carry their own")
    return write_isaf(out, loaded, metadata)


def four_bit_classifier(loaded: LoadedModel, spec) -> LoadedModel:
    """`loaded` (4-bit layers) with its classifier in the layers' 4-bit scheme (spec, at the
    group size of its first layer matrix): for a tied model also the token table (the same
    matrix, one copy; a rotated table's looked-up rows are un-rotated by the core)."""
    from dataclasses import replace

    from .quant.cq4 import quantize_4bit

    w = loaded.weights
    wcls = w.wcls.dequantize() if hasattr(w.wcls, "dequantize") else w.wcls
    c4 = quantize_4bit(wcls, spec, w.wq[0].group_size)
    tok = c4 if loaded.config.shared_classifier else w.tok_embeddings
    return replace(loaded, weights=replace(w, wcls=c4, tok_embeddings=tok))
