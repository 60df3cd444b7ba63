"""Small valid inputs for the fuzz targets (tests/fuzz/harness.py), built from scratch with the
package's own writers and the gguf / safetensors / tokenizers packages, deterministic.
`python3 scripts/fuzz.py --write-seeds` writes them into tests/fuzz/corpus/<target>/."""

from __future__ import annotations

import functools
import io
import json
import struct
import tempfile
from pathlib import Path

import numpy as np

from isaforge.types import Config, Weights

C = Config(dim=16, hidden_dim=24, n_layers=1, n_heads=2, n_kv_heads=1, vocab_size=40,
           seq_len=16, shared_classifier=True)
BYTES = [f"<0x{b:02X}>" for b in range(8)]
TOKENS = ["<unk>", "<s>", "</s>"] + BYTES + [
    "\u2581", "\u2581H", "ello", ",", "\u2581w", "orld", "!", "e", "l", "o", "H", "w", "r",
    "d", "\u2581He", "ll", "or", "ld", "<|im_start|>", "<|im_end|>", "a", "b", "c", "x", "y",
    "z", "\u2581a", "\u2581b", "\u2581c"]
assert len(TOKENS) == C.vocab_size
TEMPLATE = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
            "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")


def _weights(c: Config = C, seed: int = 0) -> Weights:
    rng = np.random.default_rng(seed)

    def m(r: int, k: int) -> np.ndarray:
        return (rng.standard_normal((r, k)) / np.sqrt(k)).astype(np.float32)
    L, d, h, kv = c.n_layers, c.dim, c.hidden_dim, c.kv_dim
    w = Weights(tok_embeddings=m(c.vocab_size, d),
                rms_att=rng.uniform(0.5, 1.5, (L, d)).astype(np.float32),
                rms_ffn=rng.uniform(0.5, 1.5, (L, d)).astype(np.float32),
                rms_final=rng.uniform(0.5, 1.5, d).astype(np.float32))
    w.wcls = w.tok_embeddings
    for _ in range(L):
        w.wq.append(m(d, d))
        w.wk.append(m(kv, d))
        w.wv.append(m(kv, d))
        w.wo.append(m(d, d))
        w.w1.append(m(h, d))
        w.w2.append(m(d, h))
        w.w3.append(m(h, d))
    return w


def _via_file(write, suffix: str) -> bytes:
    with tempfile.TemporaryDirectory() as t:
        p = Path(t) / f"seed{suffix}"
        write(p)
        return p.read_bytes()


@functools.cache
def llama2c_model(version: int = 1) -> bytes:
    from isaforge.formats.llama2c import quantize_model, write_llama2c_v1

    if version == 2:
        def write(p: Path) -> None:
            write_llama2c_v1(p.with_suffix(".v1"), C, _weights())
            quantize_model(p.with_suffix(".v1"), p, group_size=8)
        return _via_file(write, ".bin")
    return _via_file(lambda p: write_llama2c_v1(p, C, _weights()), ".bin")


@functools.cache
def llama2c_tokenizer() -> bytes:
    """llama2.c's tokenizer.bin: max token length, then per token: score, length, bytes."""
    toks = [t.replace("\u2581", " ").encode() for t in TOKENS]
    out = io.BytesIO()
    out.write(struct.pack("<i", max(len(t) for t in toks)))
    for i, t in enumerate(toks):
        out.write(struct.pack("<fi", -float(i), len(t)) + t)
    return out.getvalue()


def gguf_model(chat_template: str | None = TEMPLATE, tokenizer: str = "llama") -> bytes:
    import gguf

    w = _weights()

    def write(p: Path) -> None:
        g = gguf.GGUFWriter(str(p), "llama")
        for k, v in {"llama.embedding_length": C.dim, "llama.feed_forward_length": C.hidden_dim,
                     "llama.block_count": C.n_layers, "llama.attention.head_count": C.n_heads,
                     "llama.attention.head_count_kv": C.n_kv_heads,
                     "llama.context_length": C.seq_len, "tokenizer.ggml.bos_token_id": 1,
                     "tokenizer.ggml.eos_token_id": 2}.items():
            g.add_uint32(k, v)
        g.add_float32("llama.attention.layer_norm_rms_epsilon", 1e-5)
        g.add_string("tokenizer.ggml.model", tokenizer)
        if tokenizer == "gpt2":
            toks = [t.replace("\u2581", "\u0120") for t in TOKENS]
            g.add_string("tokenizer.ggml.pre", "smollm")
            g.add_array("tokenizer.ggml.merges", ["l l", "o r", "l d"])
        else:
            toks = TOKENS
            g.add_array("tokenizer.ggml.scores", [-float(i) for i in range(len(TOKENS))])
        g.add_array("tokenizer.ggml.tokens", toks)
        g.add_array("tokenizer.ggml.token_type",
                    [2, 3, 3] + [6] * len(BYTES) + [1] * (len(TOKENS) - 3 - len(BYTES)))
        if chat_template is not None:
            g.add_string("tokenizer.chat_template", chat_template)
        g.add_tensor("token_embd.weight", w.tok_embeddings)
        g.add_tensor("output_norm.weight", w.rms_final)
        names = {"attn_q": w.wq, "attn_k": w.wk, "attn_v": w.wv, "attn_output": w.wo,
                 "ffn_gate": w.w1, "ffn_down": w.w2, "ffn_up": w.w3}
        for i in range(C.n_layers):
            g.add_tensor(f"blk.{i}.attn_norm.weight", w.rms_att[i])
            g.add_tensor(f"blk.{i}.ffn_norm.weight", w.rms_ffn[i])
            for n, mats in names.items():
                g.add_tensor(f"blk.{i}.{n}.weight", mats[i])
        g.write_header_to_file()
        g.write_kv_data_to_file()
        g.write_tensors_to_file()
        g.close()
    return _via_file(write, ".gguf")


@functools.cache
def isaf_model() -> bytes:
    from isaforge.converter import convert

    def write(p: Path) -> None:
        src = p.with_suffix(".gguf")
        src.write_bytes(gguf_model())
        convert(src, p, group_size=8)
    return _via_file(write, ".isaf")


HF_CONFIG = {"architectures": ["LlamaForCausalLM"], "model_type": "llama",
             "hidden_size": C.dim, "intermediate_size": C.hidden_dim,
             "num_hidden_layers": C.n_layers, "num_attention_heads": C.n_heads,
             "num_key_value_heads": C.n_kv_heads, "vocab_size": C.vocab_size,
             "max_position_embeddings": C.seq_len, "rope_theta": 10000.0,
             "rms_norm_eps": 1e-5, "tie_word_embeddings": True, "hidden_act": "silu",
             "bos_token_id": 1, "eos_token_id": 2}


@functools.cache
def _hf_files() -> tuple[tuple[str, bytes], ...]:
    from safetensors.numpy import save as st_save
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    w = _weights()
    t = {"model.embed_tokens.weight": w.tok_embeddings, "model.norm.weight": w.rms_final}
    hf = {"wq": "self_attn.q_proj", "wk": "self_attn.k_proj", "wv": "self_attn.v_proj",
          "wo": "self_attn.o_proj", "w1": "mlp.gate_proj", "w2": "mlp.down_proj",
          "w3": "mlp.up_proj"}
    for i in range(C.n_layers):
        p = f"model.layers.{i}."
        t[p + "input_layernorm.weight"] = w.rms_att[i]
        t[p + "post_attention_layernorm.weight"] = w.rms_ffn[i]
        for k, n in hf.items():
            t[p + n + ".weight"] = getattr(w, k)[i]
    vocab = {tok.replace("\u2581", "\u0120"): i for i, tok in enumerate(TOKENS)}
    tk = Tokenizer(models.BPE(vocab=vocab, merges=[("l", "l"), ("o", "r"), ("l", "d")]))
    tk.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tk.decoder = decoders.ByteLevel()
    tc = {"bos_token": "<s>", "eos_token": "</s>", "chat_template": TEMPLATE}
    return (("config.json", json.dumps(HF_CONFIG).encode()),
            ("model.safetensors", st_save(t)),
            ("tokenizer.json", tk.to_str().encode()),
            ("tokenizer_config.json", json.dumps(tc).encode()))


def hf_files() -> dict[str, bytes]:
    return dict(_hf_files())


def all_seeds() -> dict[str, dict[str, bytes]]:
    """target -> {file name: bytes}: what the committed corpora start from."""
    hf = hf_files()
    return {
        "llama2c": {"v1.bin": llama2c_model(1), "v2.bin": llama2c_model(2)},
        "llama2c_tokenizer": {"tokenizer.bin": llama2c_tokenizer()},
        "gguf": {"spm.gguf": gguf_model(), "bpe.gguf": gguf_model(tokenizer="gpt2")},
        "isaf": {"q8.isaf": isaf_model()},
        "safetensors": {"model.safetensors": hf["model.safetensors"]},
        "hf_config": {"config.json": hf["config.json"]},
        "tokenizer_json": {"tokenizer.json": hf["tokenizer.json"]},
        "chat_template": {"chatml.jinja": TEMPLATE.encode(),
                          "loop.jinja": b"{% for m in messages %}{{ m.content|upper }}"
                                        b"{% endfor %}"},
    }
