"""The engine: a Python object owning the C run state of one model.

Python decides what to run; the C core decides how fast. One C call per decode step and one
per prefill, never a Python loop over layers."""

from __future__ import annotations

import mmap
import re

import numpy as np

from .. import _native, settings
from ..quant.ggml import KQTensor
from ..quant.mapped import MappedQ8
from ..quant.q4 import Q4Tensor
from ..settings import default_threads, disabled_features, kernel_tier
from ..types import LAYER_MATRICES, Config, LoadedModel, ModelFormatError, Q8Tensor

F32, Q8, Q4, GGML, KQ = _native.F32, _native.Q8, _native.Q4, _native.GGML, _native.KQ  # if_dtype
KV_CACHE_TYPES: dict[str, int] = _native.KV_CACHE_TYPES  # if_kv_type by name


_default_tier: str | None = None  # select_kernel's choice for engines made without `kernel`


def select_kernel(tier: str | None) -> None:
    """The kernel tier of engines made from now on without their own `kernel` ("auto": the best
    per op; None: back to ISAFORGE_KERNEL, else auto). Engines that exist keep their kernels:
    the choice is a value each engine holds, not process state. Raises ValueError for an
    unknown tier, RuntimeError for an unsupported one."""
    global _default_tier
    _native.info(tier or kernel_tier(), disabled_features())  # validates
    _default_tier = tier


def chosen_tier(kernel: str | None = None) -> str | None:
    """The tier an engine made with `kernel` runs: kernel, else select_kernel's, else
    ISAFORGE_KERNEL's (None: automatic)."""
    return kernel or _default_tier or kernel_tier()


def runtime_info(kernel: str | None = None) -> dict:
    """CPU model, features found (and hidden by ISAFORGE_DISABLE_FEATURES), compiled tiers and
    the kernels an engine made with `kernel` would run per op."""
    return _native.info(chosen_tier(kernel), disabled_features())


def _config_fields(c: Config) -> dict:
    """The config as the C core's named fields (_native.CONFIG_FIELDS)."""
    return {name: getattr(c, name) for name in _native.CONFIG_FIELDS}


def _kv_type(kv_cache: str) -> int:
    if kv_cache not in KV_CACHE_TYPES:
        raise ValueError(f"kv_cache must be one of {', '.join(KV_CACHE_TYPES)}, got {kv_cache!r}")
    return KV_CACHE_TYPES[kv_cache]


def kv_cache_bytes(config: Config, kv_cache: str = "f32", ubatch: int = 0) -> int:
    """Bytes the KV cache of an Engine over `config` (context config.seq_len) would take,
    counted by the C core that allocates it; nothing is allocated."""
    return _native.kv_cache_bytes(_config_fields(config), ubatch, _kv_type(kv_cache))


def packed_bytes(config: Config, group_size: int, kernel: str | None = None) -> int:
    """Bytes a Q8 model (group_size) packs at load for the chosen GEMM kernel's layout."""
    return _native.packed_bytes(_config_fields(config), group_size, chosen_tier(kernel),
                                disabled_features())


def _matrix_spec(w) -> tuple:
    if isinstance(w, MappedQ8):  # the file's bytes: the core converts them (ggml_intake.c)
        return (GGML, *w.shape, w.type_id, w.raw)
    if isinstance(w, KQTensor):  # the file's blocks, run in place (never packed or released)
        return (KQ, w.rows_, w.cols, w.type_id, _c(w.raw, np.uint8))
    if isinstance(w, Q4Tensor):
        rows = w.nibbles.shape[0]
        signs = None if w.signs is None else _c(w.signs, np.float32)
        return (Q4, rows, w.cols, w.group_size, _c(w.nibbles, np.uint8), _c(w.s, np.float32),
                _c(w.codebook, np.int8), signs, w.kpad)
    if isinstance(w, Q8Tensor):
        rows, cols = w.q.shape
        return (Q8, rows, cols, w.group_size, _c(w.q, np.int8), _c(w.s, np.float32))
    rows, cols = w.shape
    return (F32, rows, cols, 0, _c(w, np.float32), None)


def _c(a: np.ndarray, dtype) -> np.ndarray:
    """a as aligned C-contiguous `dtype`, without copying when it already is (mmapped weights;
    v2 scales may sit at unaligned offsets and are then copied)."""
    if a.dtype != dtype:
        raise TypeError(f"expected {np.dtype(dtype)} weights, got {a.dtype}")
    return np.require(a, requirements=["C", "A"])


def _in_memory(a: np.ndarray) -> bool:
    """True when a's memory is a Python-owned buffer (a requantized array), not a mapped file."""
    while isinstance(a, np.ndarray) and a.base is not None:
        a = a.base
    return isinstance(a, (np.ndarray, bytes, bytearray))


class _PackedQ8(Q8Tensor):
    """A Q8 matrix whose row-major int8 the engine let go (its C model reads only its packed
    copy): q is unpacked from that copy on each access (a fresh read-only array). `native` is a
    one-item list holding the C model (filled once it exists: matrices go while it is made)."""

    def __init__(self, native: list, idx: int, shape: tuple, s: np.ndarray, group_size: int):
        self._native, self._idx, self._shape = native, idx, shape
        self.s, self.group_size = s, group_size

    @property
    def q(self) -> np.ndarray:
        if not self._native:
            raise RuntimeError("these weights were released by an engine that failed to load")
        return np.frombuffer(self._native[0].unpack(self._idx), np.int8).reshape(self._shape)

    @property
    def shape(self) -> tuple[int, int]:
        return self._shape


class _PackedQ4(Q4Tensor):
    """A 4-bit matrix whose row-major nibbles the engine let go (its C model's GEMM and decode
    read only the packed copy: if_q4_gemm_kernel.decode_packed): nibbles are unpacked from that
    copy on each access (a fresh read-only array); scales, codebook and signs stay as they are.
    `native` as for _PackedQ8."""

    def __init__(self, native: list, idx: int, t: Q4Tensor):
        self._native, self._idx, self._nshape = native, idx, t.nibbles.shape
        self.s, self.codebook, self.group_size, self.cols = t.s, t.codebook, t.group_size, t.cols
        self.signs, self.kind, self.seed = t.signs, t.kind, t.seed

    @property
    def nibbles(self) -> np.ndarray:
        if not self._native:
            raise RuntimeError("these weights were released by an engine that failed to load")
        rows, nbytes = self._nshape
        return np.frombuffer(self._native[0].unpack(self._idx, rows * nbytes),
                             np.uint8).reshape(self._nshape)

    @property
    def kpad(self) -> int:
        return self._nshape[1] * 2

    @property
    def shape(self) -> tuple[int, int]:
        return (self._nshape[0], self.cols)


def _mapping_of(a: np.ndarray, maps: list) -> tuple:
    """(mapping, offset) of array a in one of the read-only file mappings `maps`, else
    (None, 0)."""
    addr = a.__array_interface__["data"][0]
    for mm in maps:
        if mm.closed:
            continue
        view = np.frombuffer(mm, np.uint8)
        base = view.__array_interface__["data"][0]
        del view  # no export left on the mapping
        if base <= addr and addr + a.nbytes <= base + len(mm):
            return mm, addr - base
    return None, 0


def _drop_mapped(a: np.ndarray, maps: list) -> None:
    """madvise(MADV_DONTNEED) the whole pages of array a where it lies in one of the read-only
    file mappings `maps`: they leave this process's resident set now, not at the end of the
    load (a page read again faults back in from the file, so nothing is lost)."""
    advice = getattr(mmap, "MADV_DONTNEED", None)
    mm, at = _mapping_of(a, maps)
    if advice is None or mm is None:
        return
    lo = -(-at // mmap.PAGESIZE) * mmap.PAGESIZE
    hi = (at + a.nbytes) // mmap.PAGESIZE * mmap.PAGESIZE
    if hi > lo:
        mm.madvise(advice, lo, hi - lo)


def _releaser(w, mats: list, native: list, maps: list):
    """released(idx) for the C model: matrix idx is packed and its row-major int8 never read
    again, so drop this side's references now, before the next matrix is packed (the peak then
    holds one matrix twice, not the whole model). An in-memory Q8 matrix of w becomes a
    _PackedQ8 over the packed copy, an in-memory 4-bit one (its nibbles) a _PackedQ4; a
    file-mapped one stays, its pages dropped from the resident set (_drop_mapped: without it a
    mapped .isaf's packed matrices were resident twice until the load ended)."""
    n = len(LAYER_MATRICES)

    def released(idx: int) -> None:
        spec = mats[idx]
        mats[idx] = spec[:4] + (None,) + spec[5:]
        del spec
        layer, i = divmod(idx, n)
        if layer == len(w.wq):
            t = w.wcls

            def put(v):  # a tied token table is the same matrix: it goes too
                if w.tok_embeddings is w.wcls:
                    w.tok_embeddings = v
                w.wcls = v
        else:
            lst = getattr(w, LAYER_MATRICES[i])
            t, put = lst[layer], lambda v: lst.__setitem__(layer, v)
        if isinstance(t, MappedQ8):  # converted: the file's pages are not read again
            if maps:
                _drop_mapped(t.raw, maps)
            return
        if type(t) is Q8Tensor and _in_memory(t.q):
            put(_PackedQ8(native, idx, t.q.shape, t.s, t.group_size))
        elif type(t) is Q4Tensor and _in_memory(t.nibbles):
            put(_PackedQ4(native, idx, t))
        else:
            a = t.nibbles if type(t) is Q4Tensor else getattr(t, "q", None)
            if isinstance(a, np.ndarray) and maps:
                _drop_mapped(a, maps)
            return
        del t
        if idx % n == n - 1:  # once per layer: the freed heap pages back to the system
            _native.trim_heap()  # (the packed arena cannot reuse them)

    return released


def _file_error(e: ValueError, model: LoadedModel) -> ValueError:
    """A creation error about a matrix the core converted from the file's bytes (MappedQ8), as
    the file's error naming its tensor; any other error as it is."""
    m = re.match(r"(?:layer (\d+) (\w+)|classifier): (.*)", str(e), re.S)
    w = model.weights
    if m:
        if m.group(1) is None:
            t = w.wcls
        else:
            per_layer, i = getattr(w, m.group(2), None) or [], int(m.group(1))
            t = per_layer[i] if i < len(per_layer) else None
        if isinstance(t, MappedQ8):
            return ModelFormatError(f"{model.path}: tensor {t.name}: {m.group(3)}")
    return e


def _native_view(name: str, doc: str) -> property:
    """A read-only attribute of the engine's C model."""
    return property(lambda self: getattr(self._m, name), doc=doc)


class Engine:
    """C run state (activations, KV cache, thread pool) over borrowed weights.

    ubatch: prompt rows per prefill chunk (0: the core's default, 512). kv_cache: "f32",
    "f16" or "int8" (per position, head and group of head dims). kernel: the kernel tier for
    every op (None: chosen_tier's), fixed for the engine's life."""

    def __init__(self, model: LoadedModel, threads: int | None = None, ubatch: int = 0,
                 kv_cache: str = "f32", kernel: str | None = None, n_seqs: int = 1,
                 gemv_rows_per_thread: int | None = None, par_min_work: int | None = None,
                 sme2_workers: int | None = None):
        kv_type = _kv_type(kv_cache)  # n_seqs: KV cache slots (runtime/batch.py)
        # decode matmuls' thread budget (settings.gemv_rows_per_thread; 0: the whole pool)
        rows_per_thread = (settings.gemv_rows_per_thread() if gemv_rows_per_thread is None
                           else int(gemv_rows_per_thread))
        if rows_per_thread < 0:
            raise ValueError(f"gemv_rows_per_thread must be >= 0, got {rows_per_thread}")
        # multiply-adds below which an op runs on the calling thread (0: the core's 2^17)
        min_work = settings.par_min_work() if par_min_work is None else int(par_min_work)
        if min_work < 0:
            raise ValueError(f"par_min_work must be >= 0, got {min_work}")
        # SME2 hybrid split (settings.sme2_workers; 0: none): streaming-mode workers per matmul
        sme2 = settings.sme2_workers() if sme2_workers is None else int(sme2_workers)
        if sme2 < 0:
            raise ValueError(f"sme2_workers must be >= 0, got {sme2}")
        if ubatch < 0:
            raise ValueError(f"ubatch must be >= 0, got {ubatch}")
        c: Config = model.config
        w = model.weights
        self.config = c
        self.model = model
        mats = []
        for layer in range(c.n_layers):
            for name in LAYER_MATRICES:
                mats.append(_matrix_spec(getattr(w, name)[layer]))
        mats.append(_matrix_spec(w.wcls))
        self._arrays = mats  # keep every borrowed array referenced
        cfg = _config_fields(c)
        self._rms = ([_c(r, np.float32) for r in w.rms_att], [_c(r, np.float32) for r in w.rms_ffn])
        # the token table: None when it is the classifier's matrix (tied: one copy, which the
        # core looks rows up in), else its own matrix (float32, or Q8/4-bit rows dequantized on
        # lookup)
        self._tok = None if w.tok_embeddings is w.wcls else _matrix_spec(w.tok_embeddings)
        self._final = _c(w.rms_final, np.float32)
        # the layer description's optional vectors (norms, biases), None where a layer has none
        self._vectors = {name: [None if a is None else _c(a, np.float32) for a in per_layer]
                         for name, per_layer in w.vectors.items() if per_layer is not None}
        self._rope_freqs = None if w.rope_freqs is None else _c(w.rope_freqs, np.float32)
        # a converted model's nibbles move into the core's weight arena (2 MiB pages; one copy:
        # these are released as each is copied); a mapped file's stay where they are. The
        # blocks that run in place are copied there too, a slice per decode step
        # (settings.weight_arena); the core drops a mapped file's pages once copied (mode 2)
        q4 = [spec[4] for spec in mats if spec[0] == Q4]
        q4_arena = bool(q4) and all(_in_memory(a) for a in q4)
        native: list = []
        maps = [mm for mm in model.keepalive if isinstance(mm, mmap.mmap)]
        kq = [spec[4] for spec in mats if spec[0] == KQ]
        kq_arena = 0 if not kq or not settings.weight_arena() else (
            2 if all(_mapping_of(a, maps)[0] for a in kq) else 1)
        try:
            self._m = _native.Model(cfg, self._tok, self._final, self._rms[0], self._rms[1],
                                    mats, threads or default_threads(), ubatch, kv_type,
                                    chosen_tier(kernel), disabled_features(),
                                    _releaser(w, mats, native, maps), vectors=self._vectors,
                                    rope_freqs=self._rope_freqs,
                                    n_seqs=n_seqs, gemv_rows_per_thread=rows_per_thread,
                                    par_min_work=min_work, sme2_workers=sme2,
                                    q4_arena=q4_arena,
                                    kq_arena=kq_arena)
        except ValueError as e:
            raise _file_error(e, model) from None
        native.append(self._m)
        if not self._m.reads_rowmajor:
            # decode and prefill read only the packed copy: no row-major int8 stays resident
            _native.trim_heap()  # the freed arrays' heap pages, else still resident
        self.kv_cache = kv_cache
        self.n_seqs = n_seqs  # KV cache slots (prefill_seq, step, hidden's seq)
        self._logits = np.empty(c.vocab_size, np.float32)

    threads = _native_view("threads", "Threads in the engine's pool.")
    kernels = _native_view("kernels", 'The kernel tables this engine runs: {"decode": {...}, '
                           '"prefill": {...}}.')
    kv_cache_bytes = _native_view("kv_cache_bytes",
                                  "Bytes of the KV cache (keys, values and int8 scales).")
    packed_bytes = _native_view("packed_bytes", "Bytes of weights packed at load (0: none).")
    arena_pending = _native_view("arena_pending", "In-place matrices not yet copied into the "
                                 "weight arena (settings.weight_arena), 0 once all are.")

    kq_kernels = _native_view("kq_kernels", "Per matrix (layer-major, the classifier last): "
                              "(decode kernel, prefill kernel) an in-place matrix runs now, "
                              "None for others; a Q4_K or Q8_0 matrix changes kernels when "
                              "the weight arena holds it in row groups.")

    def arena_wait(self) -> None:
        """Copy the rest of the in-place matrices into the weight arena now (decode steps
        otherwise copy a slice each, 32 steps for all; results are the same either way)."""
        self._m.arena_wait()
    embedding = _native_view("embedding", 'The token table\'s lookup: {"dtype": "f32" | "q8" | '
                             '"q4", "tied": the classifier\'s matrix, "packed": rows read from '
                             'its packed copy}.')
    attention = _native_view("attention",
                             "The attention kernel this engine runs for prefill and decode alike.")

    def embed(self, tokens) -> np.ndarray:
        """(n, dim) float32: the token rows the forward pass starts from (dequantized on
        lookup, times the config's embed_scale)."""
        t = np.ascontiguousarray(tokens, dtype=np.int32)
        out = np.empty((len(t), self.config.dim), np.float32)
        self._m.embed(t, out)
        return out

    def prefill_seq(self, seq: int, tokens, pos0: int = 0) -> np.ndarray:
        """Run tokens at pos0.. in slot `seq`; the last position's logits (a fresh array)."""
        t = np.ascontiguousarray(tokens, dtype=np.int32)
        out = np.empty(self.config.vocab_size, np.float32)
        self._m.prefill_seq(int(seq), t, int(pos0), out)
        return out

    def step(self, seqs, tokens, positions, want) -> np.ndarray:
        """One forward call over rows of any slots (a slot's rows at rising positions: decode
        rows and prompt chunks together, if_model_batch); logits (sum(want), vocab) of the
        rows with want[r] true, in row order."""
        t = np.ascontiguousarray(tokens, dtype=np.int32)
        w = np.ascontiguousarray(want, dtype=np.uint8)
        out = np.empty((int(np.count_nonzero(w)), self.config.vocab_size), np.float32)
        self._m.decode_batch(t, np.ascontiguousarray(seqs, dtype=np.uintp),
                             np.ascontiguousarray(positions, dtype=np.uintp), out, w)
        return out

    def hidden(self, tokens, pos0: int = 0, last: bool = False, seq: int = 0) -> np.ndarray:
        """The final hidden states of tokens run at pos0.. in slot `seq` (after the final
        norm: the rows the classifier reads), (n, dim) float32, or (dim,) of the last
        position with last=True. The same bits at every tier, thread count and ubatch;
        the slot's cache then holds these tokens."""
        t = np.ascontiguousarray(tokens, dtype=np.int32)
        out = np.empty(self.config.dim if last else (len(t), self.config.dim), np.float32)
        self._m.hidden(int(seq), t, int(pos0), out, bool(last))
        return out

    def forward(self, token: int, pos: int) -> np.ndarray:
        """Logits (vocab,) after running `token` at `pos`; the array is reused by the next call."""
        self._m.forward(int(token), int(pos), self._logits)
        return self._logits

    def prefill(self, tokens, pos0: int = 0, all_logits: bool = False) -> np.ndarray:
        """Run tokens at pos0..; returns the last logits (vocab,) or all (n, vocab)."""
        t = np.ascontiguousarray(tokens, dtype=np.int32)
        if all_logits:
            out = np.empty((len(t), self.config.vocab_size), np.float32)
            self._m.prefill(t, int(pos0), self._logits, out)
            return out
        self._m.prefill(t, int(pos0), self._logits)
        return self._logits


def weight_bytes(model: LoadedModel) -> dict[str, int]:
    """Bytes of the model's tensors by where they live: "mapped" (views of the model file's
    mapping: resident only while read, their pages given back after the load), "in_place"
    (mapped K-quant blocks the kernels read every token: resident, the one copy) and
    "in_memory" (converted or requantized arrays on the heap). A tied token table counts
    once."""
    w = model.weights
    out = {"mapped": 0, "in_place": 0, "in_memory": 0}
    seen: set[int] = set()

    def add(t) -> None:
        if t is None or id(t) in seen:
            return
        seen.add(id(t))
        if isinstance(t, KQTensor):
            out["in_place"] += t.raw.nbytes
            return
        if isinstance(t, MappedQ8):  # the file's bytes, converted by the core as it packs
            main, rest = t.raw, []
        elif isinstance(t, Q4Tensor):
            main, rest = t.nibbles, [t.s, t.codebook, t.signs]
        elif isinstance(t, Q8Tensor):
            main, rest = t.q, [t.s]
        else:
            main, rest = np.asarray(t), []
        for a in [main, *rest]:
            if isinstance(a, np.ndarray):
                out["in_memory" if _in_memory(a) else "mapped"] += a.nbytes

    for t in (w.tok_embeddings, w.wcls, w.rms_final, w.rope_freqs, *w.rms_att, *w.rms_ffn):
        add(t)
    for name in LAYER_MATRICES:
        for t in getattr(w, name):
            add(t)
    for per_layer in w.vectors.values():
        for t in per_layer or ():
            add(t)
    return out


# type -> its layouts in the arena's order of preference: (rows, cols %, kernels)
GROUPS = {"Q4_K": ((16, 256, "q4kx16"), (8, 256, "q4kx8")),
          "Q6_K": ((16, 256, "q6kx16"), (8, 256, "q6kx8")), "Q8_0": ((16, 64, "q80x16"),),
          "Q4_0": ((16, 64, "q40x16"),)}


def _group(w, kernels: dict) -> tuple[int, str]:
    """(rows per group, kernels' prefix) of the layout the arena gives w, or (0, "")."""
    if not isinstance(w, KQTensor) or w.type_name not in GROUPS or not settings.weight_arena():
        return 0, ""
    for g, cols, k in GROUPS[w.type_name]:
        if (w.rows_ % g == 0 and w.cols % cols == 0 and kernels["decode"].get(f"{k}_gemv")
                and kernels["prefill"].get(f"{k}_gemm")):
            return g, k
    return 0, ""


def group_rows(w, kernels: dict) -> int:
    """The rows per group the weight arena rearranges w, an in-place matrix, into (0: none;
    csrc/arena.c): Q4_K, Q6_K in 16s (AVX-512) or 8s (the AVX2 tiers), Q8_0, Q4_0 in 16s
    (AVX-512) where both tables have the kernels, its shape fills whole groups and the arena is
    on."""
    return _group(w, kernels)[0]


def resident_type(w, kernels: dict) -> str:
    """w's resident type as its numbers see it: a matrix the arena holds in row groups counts
    as in place (the same bytes, the same bits), so a fingerprint of these agrees across
    tiers."""
    return f"{w.type_name} in place" if group_rows(w, kernels) else matrix_kernels(w, kernels)[0]


def matrix_kernels(w, kernels: dict) -> tuple[str, str, str]:
    """(resident type, decode kernel, prefill kernel) of matrix w under an engine's kernel
    tables (`kernels`: runtime_info's or Engine.kernels' {"decode": .., "prefill": ..}). A
    matrix the arena groups runs its first decode steps on the file's rows, the kernels given
    here once moved."""
    d, p = kernels["decode"], kernels["prefill"]
    g, k = _group(w, kernels)
    if g:
        return f"{w.type_name} in {g}-row groups", d[f"{k}_gemv"], p[f"{k}_gemm"]
    if isinstance(w, KQTensor):
        t = w.type_name.lower().replace("_", "")
        return f"{w.type_name} in place", d[f"{t}_gemv"], p[f"{t}_gemm"]
    if isinstance(w, Q4Tensor):
        return f"4-bit {w.kind} g{w.group_size}", d["q4_decode"], p["q4_gemm"]
    if isinstance(w, Q8Tensor):
        return f"Q8 g{w.group_size}", d["q8_decode"], p["q8_gemm"]
    return "F32", d["f32_gemv"], p["f32_gemv"]


def scratch_bytes(config: Config, ubatch: int = 0, threads: int = 1) -> int:
    """About the bytes of an engine's run state besides the KV cache and weights: the
    activation rows of a prefill chunk (ubatch rows; 0: 512), their quantized copies, each
    thread's decode row and attention scores (csrc/model.c alloc_run_state's buffers, the
    attention scratch as csrc/ops.c's f32 bound). Reserved, not touched: the pages become
    resident as a prompt's rows use them."""
    c = config
    ub = min(ubatch or 512, c.seq_len)
    hs = c.head_size
    q_dim, kv_dim = hs * c.n_heads, hs * c.n_kv_heads
    wide = max(c.dim, q_dim)
    big = max(wide, c.hidden_dim)
    rows = 3 * c.dim + wide + 2 * c.hidden_dim + q_dim + 2 * kv_dim + hs  # floats per row
    group = min(c.n_heads, c.n_heads // c.n_kv_heads)
    keys = -(-c.seq_len // 16) * 16
    att = 16 * group * keys + 64 + 3 * 64 * hs + 128  # floats per thread
    return 4 * ub * rows + 9 * ub * big + threads * (13 * big + 4 * att)
