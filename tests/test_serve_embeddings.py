"""POST /v1/embeddings through the real `openai` client against `isaforge serve` on
stories260K: shape, unit norm, the same bits for a text alone, in a batch and as its token
ids, base64 equal to the float list, the Python API's Model.embed equal to the server's, and
each bad field a 400 naming it."""

from __future__ import annotations

import base64

import numpy as np
import pytest

from serve_helper import serve

TEXTS = ["Once upon a time", "The cat sat on the mat.", "Lily", "Once upon a time"]


@pytest.fixture(scope="module")
def srv(stories):
    with serve(stories / "stories260K.bin", "--parallel", "2") as s:
        yield s


def vec(item) -> np.ndarray:
    return np.array(item.embedding, np.float32)


def test_embeddings_shape_norm_and_batch_identity(srv, stories):
    c = srv.client()
    one = c.embeddings.create(model="stories260K", input="Once upon a time",
                              encoding_format="float")
    assert one.object == "list" and one.model == "stories260K" and len(one.data) == 1
    v = vec(one.data[0])
    assert v.shape == (64,) and abs(float(np.linalg.norm(v.astype(np.float64))) - 1) < 1e-6
    # "Once upon a time" is BOS + 4 tokens in tok512
    assert (one.usage.prompt_tokens, one.usage.total_tokens) == (5, 5)
    batch = c.embeddings.create(model="stories260K", input=TEXTS, encoding_format="float")
    assert [d.index for d in batch.data] == [0, 1, 2, 3]
    vs = [vec(d) for d in batch.data]
    assert vs[0].tobytes() == v.tobytes() == vs[3].tobytes()
    assert vs[1].tobytes() != vs[0].tobytes()
    for text, w in zip(TEXTS[1:3], vs[1:3], strict=True):  # each alone: the same bits
        alone = c.embeddings.create(model="stories260K", input=text, encoding_format="float")
        assert vec(alone.data[0]).tobytes() == w.tobytes()
    # token ids, one list and a list of lists
    ids = [1, 403, 407, 261, 378]
    by_ids = c.embeddings.create(model="stories260K", input=ids, encoding_format="float")
    assert vec(by_ids.data[0]).tobytes() == v.tobytes()
    many = c.embeddings.create(model="stories260K", input=[ids, [1, 29]],
                               encoding_format="float")
    assert vec(many.data[0]).tobytes() == v.tobytes() and many.usage.prompt_tokens == 7
    # the Python API pools the same hidden states the same way
    import isaforge

    m = isaforge.load(stories / "stories260K.bin", threads=1)
    assert m.embed("Once upon a time").tobytes() == v.tobytes()


def test_embeddings_base64_decodes_to_the_floats(srv):
    st, _, raw = srv.post("/v1/embeddings", {"input": TEXTS[:2], "encoding_format": "base64"})
    assert st == 200
    st, _, flt = srv.post("/v1/embeddings", {"input": TEXTS[:2]})
    assert st == 200
    for b, f in zip(raw["data"], flt["data"], strict=True):
        got = np.frombuffer(base64.b64decode(b["embedding"]), "<f4")
        assert got.tolist() == f["embedding"]
    # the openai client's default asks for base64 and decodes it itself
    d = srv.client().embeddings.create(model="stories260K", input=TEXTS[1])
    assert vec(d.data[0]).tolist() == flt["data"][1]["embedding"]


@pytest.mark.parametrize("body, param, text", [
    ({"input": []}, "input", "'input' must be"),
    ({"input": [1, "a"]}, "input", "'input' must be"),
    ({"input": [[1, 2], []]}, "input", "'input' must be"),
    ({"input": [5000]}, "input", "token ids must be in [0, 512)"),
    ({"input": "a", "encoding_format": "int8"}, "encoding_format", "'encoding_format' must"),
    ({"input": "a", "dimensions": 32}, "dimensions", "the model's 64"),
    ({"input": "once " * 600}, "input", "the context holds 512"),
    ({"input": [[1, 2], [1] * 513]}, "input", "input[1] is 513 tokens; the context holds 512"),
])
def test_embeddings_bad_fields(srv, body, param, text):
    st, _, out = srv.post("/v1/embeddings", body)
    assert st == 400, out
    assert out["error"]["param"] == param and text in out["error"]["message"], out


def test_embeddings_dimensions_equal_to_dim_accepted(srv):
    st, _, out = srv.post("/v1/embeddings", {"input": "Lily", "dimensions": 64})
    assert st == 200 and len(out["data"][0]["embedding"]) == 64


def test_embeddings_while_generating(srv):
    """An embedding runs between generation steps and changes nothing of a generation."""
    c = srv.client()
    alone = c.completions.create(model="stories260K", prompt="Once upon a time",
                                 max_tokens=40, temperature=0).choices[0].text
    stream = c.completions.create(model="stories260K", prompt="Once upon a time",
                                  max_tokens=40, temperature=0, stream=True)
    first = next(iter(stream))
    e = c.embeddings.create(model="stories260K", input=TEXTS[0], encoding_format="float")
    rest = "".join(ch.choices[0].text for ch in stream)
    assert first.choices[0].text + rest == alone
    assert abs(float(np.linalg.norm(vec(e.data[0]).astype(np.float64))) - 1) < 1e-6
