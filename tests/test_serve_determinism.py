"""The determinism promise (docs/server.md, "Determinism"): the same system_fingerprint,
request and seed give the same bytes whatever the kernel tier, --threads and --parallel, alone
or inside a busy batch; and the fingerprint is the same across those and changes with what
does change the bytes (the KV cache type, the context, the model file)."""

from __future__ import annotations

import hashlib
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

from isaforge import _native
from serve_helper import serve

openai = pytest.importorskip("openai")

M = "stories260K"
# seeded requests of every sampler kind, and one greedy
REQUESTS = [
    dict(prompt="Once upon a time", temperature=1.0, top_p=0.95, seed=123),
    dict(prompt="One day Lily", temperature=0.9, seed=7, extra_body={"top_k": 5}),
    dict(prompt="The dog", temperature=1.2, top_p=1.0, seed=9, extra_body={"min_p": 0.05}),
    dict(prompt="Tom and Sue", temperature=1.0, seed=11, extra_body={"typical_p": 0.8}),
    dict(prompt="In the park", temperature=0.8, seed=5, frequency_penalty=0.5,
         logit_bias={"410": -3.5}, extra_body={"repeat_penalty": 1.2}),
    dict(prompt="Once upon a time", temperature=0),
    dict(prompt="A little bird", temperature=1.0, seed=21, n=2),
]


def _tiers() -> list[str]:
    """The scalar tier and this machine's best."""
    ok = [t["name"] for t in _native.info(None, None)["tiers"] if t["supported"]]
    return ["scalar", ok[-1]] if len(ok) > 1 else ["scalar"]


def _run(c, req) -> tuple[list[str], str]:
    r = c.completions.create(model=M, max_tokens=48, **req)
    return [ch.text for ch in r.choices], r.system_fingerprint


def _stream(c, req) -> tuple[str, set]:
    text, fps = "", set()
    for ch in c.completions.create(model=M, max_tokens=48, stream=True, **req):
        fps.add(ch.system_fingerprint)
        text += "".join(x.text for x in ch.choices)
    return text, fps


def _busy(s, stop: threading.Event, started: threading.Barrier) -> None:
    """Long streams one after another, keeping a slot decoding until told to stop."""
    c = s.client()
    first = True
    while not stop.is_set():
        for _ in c.completions.create(model=M, prompt="The sun was", max_tokens=400,
                                      temperature=0.5, seed=1, stream=True,
                                      extra_body={"ignore_eos": True}):
            if first:
                started.wait()
                first = False
            if stop.is_set():
                break


def _metric(s, name: str) -> float:
    return float(s.get("/metrics")[1].split(f"\n{name} ")[1].split()[0])


def _alone_and_batched(s) -> tuple[list, list, set]:
    c = s.client()
    alone = [_run(c, r) for r in REQUESTS]
    steps0, gen0 = _metric(s, "isaforge_decode_steps_total"), _metric(
        s, "isaforge_generated_tokens_total")
    stop, started = threading.Event(), threading.Barrier(3, timeout=60)
    busy = [threading.Thread(target=_busy, args=(s, stop, started)) for _ in range(2)]
    for t in busy:
        t.start()
    started.wait()  # two streams are decoding: the requests join a running batch
    try:
        with ThreadPoolExecutor(len(REQUESTS)) as pool:
            batched = list(pool.map(lambda r: _run(s.client(), r), REQUESTS))
            streamed = list(pool.map(lambda r: _stream(s.client(), r), REQUESTS[:3]))
    finally:
        stop.set()
    for t in busy:
        t.join(60)
    steps = _metric(s, "isaforge_decode_steps_total") - steps0
    gen = _metric(s, "isaforge_generated_tokens_total") - gen0
    assert gen > 1.5 * steps  # rows were decoded together
    for (text, fps), (want, fp) in zip(streamed, alone, strict=False):
        assert text == want[0] and fps == {fp}
    return alone, batched, {fp for _, fp in alone + batched}


def test_same_bytes_across_tiers_threads_parallel_and_batches(stories):
    runs = {}
    for tier in _tiers():
        for threads in ("1", "2"):
            with serve(stories / "stories260K.bin", "--kernel", tier, "--threads", threads,
                       "--parallel", "4") as s:
                alone, batched, fps = _alone_and_batched(s)
                assert batched == alone, (tier, threads)
                assert len(fps) == 1 and next(iter(fps)).startswith("fp_")
                runs[(tier, threads)] = alone
    with serve(stories / "stories260K.bin", "--threads", "2", "--parallel", "1") as s:
        runs[("default", "parallel 1")] = [_run(s.client(), r) for r in REQUESTS]
    first = next(iter(runs.values()))
    for key, got in runs.items():
        assert got == first, key
    texts = [t for ts, _ in first for t in ts]
    assert len(set(texts)) == len(texts)  # the requests really differ (and n=2's choices)


def test_fingerprint_follows_what_changes_the_bytes(stories, tmp_path):
    req = dict(prompt="Once upon a time", temperature=0)
    with serve(stories / "stories260K.bin", "--parallel", "1") as s:
        base = _run(s.client(), req)[1]
        assert len(base) == 15 and int(base[3:], 16) >= 0
    with serve(stories / "stories260K.bin", "--parallel", "1", "--kv-cache", "f16") as s:
        assert _run(s.client(), req)[1] != base
    with serve(stories / "stories260K.bin", "--parallel", "1", "--ctx", "256") as s:
        assert _run(s.client(), req)[1] != base
    # the same bytes under another name and place: the same fingerprint; one byte changed
    # in the file (a weight): another
    data = bytearray((stories / "stories260K.bin").read_bytes())
    copy = tmp_path / "renamed.bin"
    copy.write_bytes(bytes(data))
    (tmp_path / "tok512.bin").write_bytes((stories / "tok512.bin").read_bytes())
    with serve(copy, "--parallel", "1") as s:
        assert s.client().completions.create(model="renamed", max_tokens=4, **req
                                             ).system_fingerprint == base
    data[-100] ^= 1
    copy.write_bytes(bytes(data))
    with serve(copy, "--parallel", "1") as s:
        assert s.client().completions.create(model="renamed", max_tokens=4, **req
                                             ).system_fingerprint != base


def test_file_hash_and_fingerprint_parts(tmp_path):
    from isaforge.serve.fingerprint import CHUNK, NUMERICS_VERSION, combine, file_sha256

    big = tmp_path / "m.bin"
    data = bytes(range(256)) * (3 * CHUNK // 256 + 7)  # several reads, a short last one
    big.write_bytes(data)
    assert file_sha256(big) == hashlib.sha256(data).hexdigest()
    d = tmp_path / "folder"
    (d / "sub").mkdir(parents=True)
    (d / "a.json").write_text("{}")
    (d / "sub" / "w.bin").write_bytes(b"xyz")
    (d / ".cache").mkdir()
    (d / ".cache" / "junk").write_text("ignored")
    h = file_sha256(d)
    (d / ".cache" / "junk").write_text("changed")
    assert file_sha256(d) == h
    (d / "sub" / "w.bin").write_bytes(b"xyZ")
    assert file_sha256(d) != h
    parts = ("ab" * 32, None, ["Q8 g32"] * 7, "f32", 512)
    fp = combine(*parts)
    assert fp.startswith("fp_") and len(fp) == 15 and fp == combine(*parts)
    assert NUMERICS_VERSION >= 1
    for i, other in enumerate(("cd" * 32, "ef" * 32, ["F32"] * 7, "f16", 256)):
        changed = list(parts)
        changed[i] = other
        assert combine(*changed) != fp, i


def test_chat_same_bytes_across_tiers_and_threads(smollm2_gguf):
    """SmolLM2 (Q8 matrices, the GEMM kernels that differ most between tiers): seeded chat
    requests, alone and together, on the scalar tier at 1 thread and the best at 2."""
    msgs = [[{"role": "user", "content": q}] for q in
            ("Name a fruit.", "Say hi to Sam.", "What is 2 + 2?")]
    kws = [dict(temperature=0.9, seed=3, extra_body={"top_k": 40, "min_p": 0.05}),
           dict(temperature=1.1, seed=4, top_p=0.9, extra_body={"typical_p": 0.9}),
           dict(temperature=0)]

    def ask(c, m, kw):
        r = c.chat.completions.create(model="SmolLM2-135M-Instruct.Q4_1", messages=m,
                                      max_tokens=20, **kw)
        return r.choices[0].message.content, r.system_fingerprint

    got = []
    for tier, threads in zip(_tiers(), ("1", "2"), strict=False):
        with serve(smollm2_gguf, "--kernel", tier, "--threads", threads, "--parallel", "3",
                   "--ctx", "512") as s:
            alone = [ask(s.client(), m, kw) for m, kw in zip(msgs, kws, strict=True)]
            with ThreadPoolExecutor(3) as pool:
                together = list(pool.map(lambda a: ask(s.client(), *a),
                                         zip(msgs, kws, strict=True)))
            assert together == alone, tier
            got.append(alone)
    assert all(g == got[0] for g in got)
    assert len({fp for _, fp in got[0]}) == 1 and len({t for t, _ in got[0]}) == 3


def test_fingerprint_hashes_in_a_thread_and_reports_failure(stories, tmp_path, monkeypatch):
    """`value` waits for the background hash (a timeout says it is still running); a file
    that cannot be read gives every caller an error naming it, never a hang."""
    from types import SimpleNamespace

    from isaforge.formats import read_any
    from isaforge.runtime.engine import Engine
    from isaforge.serve import fingerprint as fpm
    from isaforge.text.load import tokenizer_for

    loaded = read_any(stories / "stories260K.bin", "q8")
    backend = SimpleNamespace(loaded=loaded, engine=Engine(loaded, threads=1),
                              tokenizer=tokenizer_for(loaded), ctx=loaded.config.seq_len)
    gate = threading.Event()
    real = fpm.file_sha256
    monkeypatch.setattr(fpm, "file_sha256", lambda p: (gate.wait(30), real(p))[1])
    f = fpm.Fingerprint(backend)
    with pytest.raises(TimeoutError, match="still being hashed"):
        f.value(timeout=0.05)
    assert not f.ready()
    gate.set()
    want = fpm.combine(real(loaded.path), fpm.tokenizer_sha256(backend.tokenizer),
                       fpm.resident_types(loaded, backend.engine.kernels), "f32",
                       loaded.config.seq_len)
    assert f.value(timeout=30) == want and f.ready()
    monkeypatch.setattr(fpm, "file_sha256", real)
    backend.loaded = SimpleNamespace(path=tmp_path / "gone.bin", weights=loaded.weights,
                                     config=loaded.config)
    with pytest.raises(RuntimeError, match="gone.bin: cannot hash the model file"):
        fpm.Fingerprint(backend).value(timeout=30)
