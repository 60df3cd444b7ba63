"""Limits on what a model file controls: chat templates are bounded in output size,
time (in any thread) and recursion; tokenizer ids and counts are checked against the model's
vocabulary before anything is sized by them. Each refusal is a ValueError naming the limit,
and exit status 2 with one line from the CLI."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
import isaforge  # noqa: E402
from fuzz import seeds  # noqa: E402
from isaforge import cli  # noqa: E402
from isaforge.types import ModelFormatError  # noqa: E402

MSG = [{"role": "user", "content": "hi"}]
HOSTILE = {
    "nested loops": ("{% for i in range(4000) %}{% for j in range(4000) %}{% for k in "
                     "range(4000) %}{% endfor %}{% endfor %}{% endfor %}", "longer than"),
    "loops over a string": ("{% set s = 'ab' * 2000 %}{% for a in s %}{% for b in s %}"
                            "{% for c in s %}{% endfor %}{% endfor %}{% endfor %}",
                            "longer than"),
    "huge output": ("{% for i in range(4000) %}{{ 'x' * 4000 }}{% endfor %}",
                    "rendered prompt exceeds"),
    "range(10**9)": ("{% for i in range(10**9) %}{% endfor %}", r"range\(\) of 1000000000"),
    "one huge value": ("{{ 'x' * 10**9 }}", "repeated value"),
    "doubling": ("{% set ns = namespace(s='x') %}{% for i in range(64) %}"
                 "{% set ns.s = ns.s + ns.s %}{% endfor %}{{ ns.s }}", "concatenation"),
    "wide format": ("{{ '%999999999s' % 'x' }}", "format width"),
    "wide str.format": ("{{ '{:>999999999}'.format('x') }}", "format width"),
    "wide center": ("{{ 'x'.center(10**9) }}", "center"),
    "recursive macro": ("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}",
                        "recursion too deep"),
}


def gguf_with(tmp_path: Path, template: str) -> Path:
    p = tmp_path / "m.gguf"
    p.write_bytes(seeds.gguf_model(chat_template=template))
    return p


@pytest.mark.parametrize("name", list(HOSTILE))
def test_hostile_templates_are_refused_quickly(tmp_path, name):
    template, needle = HOSTILE[name]
    m = isaforge.load(gguf_with(tmp_path, template), threads=1)
    t0 = time.perf_counter()
    with pytest.raises(ValueError, match=needle):
        m.chat_tokens(MSG)
    assert time.perf_counter() - t0 < 10  # the time budget is 1 s; generous for a busy box


def test_time_budget_holds_outside_the_main_thread(tmp_path, monkeypatch):
    monkeypatch.setenv("ISAFORGE_TEMPLATE_SECONDS", "0.3")
    m = isaforge.load(gguf_with(tmp_path, HOSTILE["nested loops"][0]), threads=1)
    out: list = []

    def worker():
        try:
            m.render_chat(MSG)
        except ValueError as e:
            out.append(str(e))
    th = threading.Thread(target=worker)
    t0 = time.perf_counter()
    th.start()
    th.join(30)
    assert not th.is_alive() and len(out) == 1 and "0.3 s" in out[0]
    assert time.perf_counter() - t0 < 10


def test_limits_are_settings(tmp_path, monkeypatch):
    """The output limit follows the context (16 characters a position) or the setting."""
    template = "{% for i in range(3000) %}{{ 'abcdefghij' }}{% endfor %}"  # 30,000 chars
    m = isaforge.load(gguf_with(tmp_path, template), threads=1)  # ctx 16: limit 4096 chars
    with pytest.raises(ValueError, match="exceeds the limit of 4096"):
        m.render_chat(MSG)
    monkeypatch.setenv("ISAFORGE_TEMPLATE_MAX_CHARS", "40000")
    assert len(m.render_chat(MSG)) == 30000
    monkeypatch.setenv("ISAFORGE_TEMPLATE_MAX_CHARS", "lots")
    with pytest.raises(ValueError, match="ISAFORGE_TEMPLATE_MAX_CHARS"):
        m.render_chat(MSG)


def test_ordinary_templates_still_render(tmp_path):
    m = isaforge.load(gguf_with(tmp_path, seeds.TEMPLATE), threads=1)
    assert m.render_chat(MSG) == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"


def test_cli_hostile_template_exit_2_one_line(tmp_path, capsys):
    p = gguf_with(tmp_path, HOSTILE["nested loops"][0])
    assert cli.main(["run", str(p), "-n", "2", "hello"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "ISAFORGE_TEMPLATE_SECONDS" in err[0]


# ---- tokenizer ids and counts ----

def hf_with(tmp_path: Path, tokenizer: dict | bytes) -> Path:
    d = tmp_path / "hf"
    d.mkdir(exist_ok=True)
    for n, b in seeds.hf_files().items():
        (d / n).write_bytes(b)
    (d / "tokenizer.json").write_bytes(
        tokenizer if isinstance(tokenizer, bytes) else json.dumps(tokenizer).encode())
    return d


def tok_json() -> dict:
    return json.loads(seeds.hf_files()["tokenizer.json"])


@pytest.mark.parametrize("bad_id", [2**31, 5 * 10**7, seeds.C.vocab_size])
def test_tokenizer_json_id_beyond_the_vocabulary(tmp_path, bad_id):
    t = tok_json()
    t["model"]["vocab"]["<evil>"] = bad_id
    t0 = time.perf_counter()
    with pytest.raises(ModelFormatError, match=f"id {bad_id}.*vocabulary of 40"):
        isaforge.load(hf_with(tmp_path, t), threads=1)
    assert time.perf_counter() - t0 < 5


def test_rejected_tokenizer_keeps_memory_near_the_file_size(tmp_path):
    """An 800-byte tokenizer.json with one id of 2**31 must not allocate lists of 2**31
    entries: the peak RSS of loading it stays within 64 MiB of loading a good model."""
    t = tok_json()
    t["model"]["vocab"]["<evil>"] = 2**31
    (tmp_path / "bad").mkdir()
    (tmp_path / "good").mkdir()
    bad = hf_with(tmp_path / "bad", t)
    good = hf_with(tmp_path / "good", tok_json())
    code = ("import resource,sys,isaforge\ntry:\n isaforge.load(sys.argv[1], threads=1)\n"
            "except ValueError as e:\n print(e, file=sys.stderr)\n"
            "print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)")

    def peak(p):
        r = subprocess.run([sys.executable, "-c", code, str(p)], capture_output=True,
                           text=True, timeout=120)
        return int(r.stdout.split()[-1]), r.stderr
    kb_good, _ = peak(good)
    kb_bad, err = peak(bad)
    assert "2147483648" in err and kb_bad < kb_good + 64 * 1024


def test_gguf_tokenizer_counts_and_types(tmp_path):
    import gguf

    from isaforge.text.hf import load_tokenizer

    md = {"tokenizer.ggml.model": "gpt2", "tokenizer.ggml.tokens": ["a", "b", "ab"],
          "tokenizer.ggml.merges": ["a b"], "tokenizer.ggml.token_type": [1, 1, 1]}
    load_tokenizer(md, "t.gguf", 3)
    with pytest.raises(ModelFormatError, match="3 entries, more than the model's vocabulary"):
        load_tokenizer(md, "t.gguf", 2)
    with pytest.raises(ModelFormatError, match="merges is empty"):
        load_tokenizer({**md, "tokenizer.ggml.merges": []}, "t.gguf", 3)
    with pytest.raises(ModelFormatError, match=r"token_type\[1\] = 9"):
        load_tokenizer({**md, "tokenizer.ggml.token_type": [1, 9, 1]}, "t.gguf", 3)
    assert gguf  # the package writes the real files in the fuzz seeds
