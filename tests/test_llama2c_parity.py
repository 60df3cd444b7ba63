"""llama2.c parity by construction: for stories260K with "Once upon a time" at -t 0, isaforge's
logits equal the logits upstream run.c (fp32) and runq.c (the Q8 file `isaforge quantize
--group-size 4` writes) print at every one of the 200 positions, bit for bit, for every kernel
tier this machine runs and for prefill chunks of 1, 7 and 512 rows; and `isaforge run` on the
Q8 file prints exactly the text runq.c prints.

The references are ../shared/models/stories260K/runc_fp32_once_upon_a_time.npz and
runq_q8gs4_once_upon_a_time.npz (`tokens`: the token fed at each position, from BOS;
`logits`: what forward(token, pos) returned), made with upstream's run.c and runq.c built by
gcc -O3 with no -march, on x86-64 with glibc."""

from __future__ import annotations

import numpy as np
import pytest

from conftest import cli
from isaforge.formats.llama2c import read_llama2c
from isaforge.runtime.engine import Engine, runtime_info, select_kernel
from isaforge.text.llama2c import Llama2cTokenizer, safe_piece

PROMPT = "Once upon a time"
REFS = {"fp32": "runc_fp32_once_upon_a_time.npz", "q8": "runq_q8gs4_once_upon_a_time.npz"}
TIERS = [t["name"] for t in runtime_info()["tiers"] if t["supported"]]


def reference(stories, which: str) -> tuple[list[int], np.ndarray]:
    path = stories / REFS[which]
    if not path.is_file():
        pytest.skip(f"{path} not found")
    ref = np.load(path)
    return [int(t) for t in ref["tokens"]], ref["logits"]


@pytest.fixture(autouse=True)
def _auto_kernels():
    select_kernel(None)
    yield
    select_kernel(None)


def model_path(which: str, stories, stories_q8):
    return stories / "stories260K.bin" if which == "fp32" else stories_q8


def differing_positions(got: np.ndarray, want: np.ndarray) -> list[int]:
    assert got.shape == want.shape
    return np.flatnonzero((got.view(np.uint32) != want.view(np.uint32)).any(axis=1)).tolist()


@pytest.mark.parametrize("ubatch", [1, 7, 512])
@pytest.mark.parametrize("tier", TIERS)
@pytest.mark.parametrize("which", list(REFS))
def test_logits_equal_upstream_bit_for_bit(stories, stories_q8, which, tier, ubatch):
    tokens, want = reference(stories, which)
    select_kernel(tier)
    eng = Engine(read_llama2c(model_path(which, stories, stories_q8)), threads=2, ubatch=ubatch)
    got = eng.prefill(tokens, 0, all_logits=True)
    bad = differing_positions(got, want)
    assert not bad, (f"{which} {tier} ubatch {ubatch}: logits differ from upstream's at "
                     f"{len(bad)} of {len(tokens)} positions, the first {bad[0]}, max |diff| "
                     f"{float(np.abs(got - want).max()):.3g}")


@pytest.mark.parametrize("which", list(REFS))
def test_token_by_token_decode_equals_upstream(stories, stories_q8, which):
    """The decode path (one forward call per position, as run.c's loop) gives the same bits."""
    tokens, want = reference(stories, which)
    eng = Engine(read_llama2c(model_path(which, stories, stories_q8)), threads=1)
    got = np.stack([eng.forward(t, pos).copy() for pos, t in enumerate(tokens)])
    assert differing_positions(got, want) == []


def upstream_text(stories, tokens: list[int], logits: np.ndarray) -> bytes:
    """What run.c/runq.c printed for this run: the piece of every token after BOS (the last one
    the argmax of the last logits), as its generation loop prints them, then a newline."""
    tok = Llama2cTokenizer.load(stories / "tok512.bin", 512)
    shown = tokens[1:] + [int(np.argmax(logits[-1]))]
    out, prev = bytearray(), tokens[0]
    for t in shown:
        out += safe_piece(tok.decode(prev, t))
        prev = t
    return bytes(out) + b"\n"


def test_reference_text_reconstruction_matches_the_fp32_golden(stories):
    """The reconstruction of the printed text is right: for run.c's fp32 run it gives
    golden_t0_n200.txt, what run.c printed."""
    tokens, logits = reference(stories, "fp32")
    assert upstream_text(stories, tokens, logits) == (stories / "golden_t0_n200.txt").read_bytes()


def test_q8_run_prints_exactly_what_runq_prints(stories, stories_q8):
    tokens, logits = reference(stories, "q8")
    want = upstream_text(stories, tokens, logits)
    r = cli("run", str(stories_q8), "-z", str(stories / "tok512.bin"), "-t", "0", "--steps",
            str(len(tokens)), "-i", PROMPT)
    assert r.returncode == 0, r.stderr
    assert r.stdout == want
