"""The command line at its edges: bytes that are not UTF-8 in argv or on
stdin, closed stdin/stdout, a reader that leaves (SIGPIPE), Ctrl-C at any moment, files that
are not regular files, errors without a reason. Each ends quietly with the conventional
status (a one-line reason on stderr where there is one), never a traceback."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest

import isaforge
from isaforge import cli
from isaforge.runtime.generate import GenerationConfig
from isaforge.text.llama2c import safe_piece
from test_isaf import TINY, write_tiny_gguf

ISAFORGE = [sys.executable, "-m", "isaforge"]
TEMPLATE = ("{% for m in messages %}<s>{{ m.role }}{{ m.content }}<|im_end|>{% endfor %}"
            "{% if add_generation_prompt %}<s>assistant{% endif %}")


def run(args, *, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, env=None, shell_redirect="",
        input=None, timeout=120) -> subprocess.CompletedProcess:
    """`python -m isaforge ARGS` (bytes arguments kept as they are), optionally through bash
    for a redirection such as `>&-`."""
    cmd = [*ISAFORGE, *args]
    if shell_redirect:
        cmd = ["bash", "-c", f'"$@" {shell_redirect}', "_", *cmd]
    io = {"stdin": stdin} if input is None else {"input": input}
    return subprocess.run(cmd, **io, stdout=stdout, stderr=subprocess.PIPE, env=env,
                          timeout=timeout)


def c_locale() -> dict:
    return {**os.environ, "LC_ALL": "C", "LANG": "C"}


def quiet(r, *codes: int) -> None:
    """Ended with one of `codes`, and stderr holds no traceback or ignored exception."""
    err = r.stderr.decode(errors="replace")
    assert r.returncode in codes, (r.returncode, err)
    assert "Traceback" not in err and "Exception ignored" not in err, err


def one_line(r, needle: str) -> None:
    err = r.stderr.decode(errors="replace").strip()
    assert r.returncode == 2 and "\n" not in err and needle in err, (r.returncode, err)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    """A tiny random GGUF with a chat template (fast)."""
    return write_tiny_gguf(tmp_path_factory.mktemp("edges") / "tiny.gguf",
                           replace(TINY, seq_len=256), template=TEMPLATE, seed=5)


@pytest.fixture(scope="module")
def v0(stories) -> Path:
    return stories / "stories260K.bin"


# -- bytes that are not UTF-8 ---------------------------------------------------------------


def runc_output(model, prompt: bytes, steps: int) -> bytes:
    """What `isaforge run` prints for a llama2.c model: run.c's pieces of the prompt's bytes."""
    config = GenerationConfig(None, steps, 0.0, 0.9, 1, 1.0, echo=True,
                              stop_ids=model.profile.run_stop_ids)
    return b"".join(safe_piece(model.tokenizer.decode(p, n))
                    for p, n in model.pairs(model.encode(prompt), config)) + b"\n"


@pytest.mark.parametrize(("prompt", "byte_ids"), [
    (b"\xff\xfeOnce upon", [0xff + 3, 0xfe + 3]), (b"\x80", [0x80 + 3]),
    (b"Once \xc3 upon a \xe2\x82", [0xc3 + 3, 0xe2 + 3, 0x82 + 3])])
def test_argv_bytes_not_utf8_reach_a_llama2c_tokenizer_as_bytes(stories, v0, prompt, byte_ids):
    """run.c encodes the prompt's bytes: an invalid byte is its <0xXX> token (id byte + 3)."""
    model = isaforge.load(v0, stories / "tok512.bin")
    ids = model.encode(prompt)
    assert [t for t in ids if t in byte_ids] == byte_ids
    want = runc_output(model, prompt, 40)
    assert want != runc_output(model, prompt.decode(errors="replace").encode(), 40)
    for env in (c_locale(), {**os.environ, "LC_ALL": "C.UTF-8"}):
        r = run([b"run", os.fsencode(str(v0)), b"-t", b"0", b"--steps", b"40", b"-i", prompt],
                env=env)
        quiet(r, 0)
        assert r.stdout == want


def test_argv_and_stdin_bytes_not_utf8_are_replacement_characters_for_other_tokenizers(tiny):
    bad, good = b"ab\xffcd\xe2\x82", "ab\ufffdcd\ufffd"
    r = run([b"run", os.fsencode(str(tiny)), b"-t", b"0", b"-n", b"12", bad], env=c_locale())
    quiet(r, 0)
    m = isaforge.load(tiny)
    want = m.chat([{"role": "user", "content": good}], temperature=0, max_new_tokens=12)
    assert r.stdout.decode() == want + "\n"
    r2 = run(["chat", str(tiny), "-t", "0", "-n", "12"], env=c_locale(), input=bad + b"\n/exit\n")
    quiet(r2, 0)
    assert r2.stdout.decode() == want + "\n"
    assert m.encode(bad) == m.encode(good)  # the API reads bytes the same way


# -- closed descriptors, a reader that leaves ------------------------------------------------


def test_closed_stdout_is_one_line_and_status_1(v0):
    for args in (["run", str(v0), "-t", "0", "-n", "5"], ["info"], ["run", "/nonexistent.bin"]):
        r = run(args, stdout=None, shell_redirect=">&-")
        quiet(r, 1)
        assert r.stderr.decode().strip() == "isaforge: error: standard output is closed"


def test_closed_stdin_chat_ends_quietly_run_does_not_need_it(tiny, v0):
    r = run(["chat", str(tiny), "-t", "0"], stdin=None, shell_redirect="<&-")
    quiet(r, 0)
    assert r.stdout == b""
    want = run(["run", str(v0), "-t", "0", "-n", "20", "-i", "Once"])
    r = run(["run", str(v0), "-t", "0", "-n", "20", "-i", "Once"], stdin=None,
            shell_redirect="<&-")
    quiet(r, 0)
    assert r.stdout == want.stdout and want.returncode == 0 and len(want.stdout) > 20


def test_closed_stderr_still_runs(v0):
    r = run(["run", str(v0), "-t", "0", "-n", "20", "-i", "Once"], shell_redirect="2>&-")
    assert r.returncode == 0 and r.stdout.startswith(b"Once")
    r = run(["run", "/nonexistent.bin", "hi"], shell_redirect="2>&-")
    assert r.returncode == 2 and r.stdout == b""  # the error goes nowhere, not to stdout


def test_a_reader_that_leaves_is_a_quiet_exit(v0, tiny):
    for args in (["run", str(v0), "-t", "0", "--steps", "0"], ["info"]):
        r = run(args, stdout=None, shell_redirect="| head -c 10; exit ${PIPESTATUS[0]}")
        quiet(r, 0, 141)
    rd, wr = os.pipe()  # a pipe whose reader is already gone
    os.close(rd)
    try:
        r = run(["run", str(v0), "-t", "0", "--steps", "0"], stdout=wr)
    finally:
        os.close(wr)
    quiet(r, 0, 141)
    assert r.stderr == b""
    r = run(["chat", str(tiny), "-t", "0"], input=b"hello\nagain\n", stdout=None,
            shell_redirect="| head -c 3; exit ${PIPESTATUS[0]}")
    quiet(r, 0, 141)


# -- Ctrl-C -------------------------------------------------------------------------------


INTERRUPT_AT = """\
import os, signal, runpy, sys
target = sys.argv[1]
class Interrupt:  # SIGINT just as `target` starts importing
    def find_spec(self, name, path=None, target_=None):
        if name == target:
            os.kill(os.getpid(), signal.SIGINT)
sys.meta_path.insert(0, Interrupt())
sys.argv = ["isaforge", *sys.argv[2:]]
runpy.run_module("isaforge", run_name="__main__", alter_sys=True)
"""


@pytest.mark.parametrize("module", ["isaforge.cli", "argparse", "tokenizers", "numpy",
                                    "isaforge._native", "isaforge.formats", "isaforge.model",
                                    "jinja2"])
def test_ctrl_c_while_importing_is_status_130(tiny, module):
    r = subprocess.run([sys.executable, "-c", INTERRUPT_AT, module, "run", str(tiny), "hi"],
                       capture_output=True, timeout=120)
    quiet(r, 130)
    assert r.stdout == b""


def test_run_does_not_import_the_benchmark_or_server_stacks(tiny):
    code = ("import sys; from isaforge.cli import main; rc = main(sys.argv[1:]); "
            "print(sorted(m for m in sys.modules if m.startswith(('isaforge.bench', "
            "'isaforge.serve')))); sys.exit(rc)")
    r = subprocess.run([sys.executable, "-c", code, "run", str(tiny), "-n", "1", "hi"],
                       capture_output=True, timeout=120)
    quiet(r, 0)
    assert r.stdout.decode().strip().splitlines()[-1] == "[]"


def test_run_verbose_prints_each_start_up_phase(tiny):
    r = run(["run", str(tiny), "-n", "1", "-t", "0", "--verbose", "hi"])
    quiet(r, 0)
    block = [ln for ln in r.stderr.decode().splitlines() if ln.startswith("start-up (ms): ")]
    assert len(block) == 1, r.stderr
    names = [p.rsplit(" ", 1)[0] for p in block[0].split(": ", 1)[1].split("; ")[0].split(", ")]
    assert names[-6:] == ["imports", "resolve", "read", "engine", "tokenizer", "chat template"]


def test_ctrl_c_while_chat_waits_for_input_is_status_130(tiny):
    p = subprocess.Popen([*ISAFORGE, "chat", str(tiny), "-t", "0", "-n", "5"],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        p.stdin.write(b"hello\n")
        p.stdin.flush()
        assert p.stdout.readline().endswith(b"\n")  # the reply: it now waits for a line
        p.send_signal(signal.SIGINT)
        _, err = p.communicate(timeout=60)
    finally:
        p.kill() if p.poll() is None else None
    assert p.returncode == 130 and b"Traceback" not in err, err


def test_ctrl_c_during_generation_is_status_130(smollm2_gguf):
    p = subprocess.Popen([*ISAFORGE, "run", str(smollm2_gguf), "-t", "0", "-n", "400", "--raw",
                          "Once upon a time"], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert p.stdout.read(20)  # generating
        p.send_signal(signal.SIGINT)
        _, err = p.communicate(timeout=60)
    finally:
        p.kill() if p.poll() is None else None
    assert p.returncode == 130 and b"Traceback" not in err, err


def test_ctrl_c_at_any_moment_never_prints_a_traceback(v0):
    for delay in (0.3, 0.6, 0.9, 1.2, 1.6):  # importing, loading, generating or done
        p = subprocess.Popen([*ISAFORGE, "run", str(v0), "-t", "0", "--steps", "0"],
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        time.sleep(delay)
        p.send_signal(signal.SIGINT)
        _, err = p.communicate(timeout=60)
        # 0: it had finished; -SIGINT: Python's own start-up, before any isaforge code ran
        assert p.returncode in (0, 130, -signal.SIGINT), (delay, p.returncode, err)
        assert b"isaforge" not in err if p.returncode < 0 else b"Traceback" not in err, err


# -- files that are not regular files ---------------------------------------------------------


@pytest.fixture
def fifo(tmp_path) -> str:
    path = tmp_path / "model.bin"
    os.mkfifo(path)
    return str(path)


@pytest.mark.parametrize("args", [
    ["run", "{fifo}", "hi"], ["run", "-m", "{fifo}", "hi"], ["run", "{v0}", "-z", "{fifo}", "hi"],
    ["run", "{v0}", "-z", "/dev/zero", "hi"], ["run", "/dev/zero", "hi"], ["chat", "{fifo}"],
    ["info", "{fifo}"], ["info", "/dev/null"], ["convert", "{fifo}", "-o", "{out}"],
    ["convert", "{v0}", "-z", "{fifo}", "-o", "{out}"], ["quantize", "{fifo}", "-o", "{out}"],
    ["quantize", "/dev/zero", "-o", "{out}"]])
def test_fifos_and_devices_are_refused_before_they_are_opened(args, fifo, v0, tmp_path):
    out = tmp_path / "out.isaf"
    r = run([a.format(fifo=fifo, v0=v0, out=out) for a in args], timeout=60)
    one_line(r, "not a regular file")
    assert not out.exists()


# -- every error has a reason -----------------------------------------------------------------


@pytest.mark.parametrize(("exc", "needle"), [
    (MemoryError(), "out of memory"), (MemoryError("3 GB for the KV cache"), "3 GB"),
    (OSError(), "OSError"), (RuntimeError(""), "RuntimeError"), (ValueError(" "), "ValueError"),
    (isaforge.ModelFormatError("x.gguf: bad"), "x.gguf: bad"),
    (FileNotFoundError(2, "No such file or directory", "m.bin"), "m.bin")])
def test_every_error_message_says_something(monkeypatch, capsys, exc, needle):
    def boom(a):
        raise exc

    monkeypatch.setattr(cli, "_cmd_info", boom)
    assert cli.main(["info"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("isaforge: error: ") and err.count("\n") == 1
    assert len(err) > len("isaforge: error: \n") and needle in err, err


def test_ctrl_c_and_a_broken_pipe_in_process_are_quiet(monkeypatch, capsys):
    for exc, code in ((KeyboardInterrupt(), 130), (BrokenPipeError(), 0)):
        monkeypatch.setattr(cli, "_cmd_info", lambda a, e=exc: (_ for _ in ()).throw(e))
        assert cli.main(["info"]) == code
        assert capsys.readouterr().err == ""
