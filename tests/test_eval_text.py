"""The evaluation text of `isaforge eval`: a text asset pulled from a Debian package (pull.TEXTS,
apt-get download, the .deb read here) and checked like a model; the real one where set-up pulled
it (skipped otherwise, failed under ISAFORGE_REAL_MODEL_TESTS=1, as the model tests)."""

import gzip
import hashlib
import io
import lzma
import os
import tarfile
from pathlib import Path

import pytest

from isaforge import cli, pull
from isaforge.bench import evaluate

ROOT = Path(__file__).resolve().parent.parent
STORIES = ROOT.parent / "shared" / "models" / "stories260K" / "stories260K.bin"
TEXT = (b"00-database-short\n header\n\n              PREFACE\n\nIt was a dark and stormy "
        b"night; the rain fell in torrents, except at occasional intervals.\n")


def make_deb(members: dict[str, bytes], compress: str = "xz") -> bytes:
    """A minimal .deb: ar with debian-binary, control.tar.xz and data.tar.<compress>."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tf:
        for name, data in members.items():
            info = tarfile.TarInfo("./" + name)
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
    raw = buf.getvalue()
    data = {"xz": lzma.compress, "gz": gzip.compress, "zst": lambda b: b}[compress](raw)
    out = b"!<arch>\n"
    for name, body in (("debian-binary", b"2.0\n"), ("control.tar.xz", lzma.compress(b"")),
                       (f"data.tar.{compress}", data)):
        out += f"{name:<16}{0:<12}{0:<6}{0:<6}{100644:<8}{len(body):<10}`\n".encode() + body
        out += b"\n" * (len(body) & 1)
    return out


def spec_for(text: bytes, member="usr/share/dictd/t.dict.dz") -> pull.TextSpec:
    return pull.TextSpec("fake-text", "fake-text=1.0", member, "fake.txt",
                         hashlib.sha256(text).hexdigest(), len(text))


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("ISAFORGE_CACHE", str(tmp_path / "cache"))
    return tmp_path


def fake_apt(deb: bytes, calls: list):
    def download(requirement, dest):
        calls.append(requirement)
        (Path(dest) / "fake-text_1.0_all.deb").write_bytes(deb)
    return download


def test_text_pulled_from_deb_verified_and_cached(cache, monkeypatch):
    spec = spec_for(TEXT)
    monkeypatch.setitem(pull.TEXTS, "fake-text", spec)
    calls = []
    monkeypatch.setattr(pull, "download_deb", fake_apt(
        make_deb({spec.member: gzip.compress(TEXT), "usr/share/doc/x": b"doc"}), calls))
    path = pull.pull("fake-text", log=lambda s: None)
    assert path == cache / "cache" / "texts" / "fake.txt" and path.read_bytes() == TEXT
    assert calls == ["fake-text=1.0"]
    assert pull.ensure_model("fake-text") == path and calls == ["fake-text=1.0"]  # cached
    path.write_bytes(TEXT.replace(b"dark", b"DARK"))  # same size, changed: pulled again
    assert pull.ensure_model("fake-text") == path and path.read_bytes() == TEXT
    assert len(calls) == 2


@pytest.mark.parametrize("members,compress,needle", [
    ({"usr/share/dictd/t.dict.dz": gzip.compress(TEXT + b"x")}, "xz", "bytes, expected"),
    ({"usr/share/dictd/t.dict.dz": gzip.compress(TEXT[:-1] + b"?")}, "gz", "sha256"),
    ({"usr/share/dictd/other": gzip.compress(TEXT)}, "xz", "has no member"),
    ({"usr/share/dictd/t.dict.dz": TEXT}, "xz", "not valid gzip"),
    ({"usr/share/dictd/t.dict.dz": gzip.compress(TEXT)}, "zst", "unsupported compression"),
])
def test_bad_deb_leaves_nothing(cache, monkeypatch, members, compress, needle):
    spec = spec_for(TEXT)
    monkeypatch.setitem(pull.TEXTS, "fake-text", spec)
    monkeypatch.setattr(pull, "download_deb", fake_apt(make_deb(members, compress), []))
    with pytest.raises(pull.PullError, match=needle):
        pull.pull("fake-text", log=lambda s: None)
    assert not any((cache / "cache" / "texts").iterdir())


def test_not_a_deb_is_named(cache, monkeypatch):
    monkeypatch.setitem(pull.TEXTS, "fake-text", spec_for(TEXT))
    monkeypatch.setattr(pull, "download_deb", fake_apt(b"PK\x03\x04 not an ar file", []))
    with pytest.raises(pull.PullError, match="fake-text_1.0_all.deb: not a Debian package"):
        pull.pull("fake-text", log=lambda s: None)


def test_apt_is_told_a_pinned_version():
    assert pull.apt_command("dict-devil=1.0-13.1") == ["apt-get", "download", "-q",
                                                       "dict-devil=1.0-13.1"]
    with pytest.raises(pull.PullError, match="not pinned"):
        pull.apt_command("dict-devil")
    spec = pull.TEXTS["devils-dictionary"]
    assert spec.requirement == "dict-devil=1.0-13.1" and spec.size == 383656


def test_cli_pull_text_uses_the_hook(cache, monkeypatch, capsys):
    spec = spec_for(TEXT)
    monkeypatch.setitem(pull.TEXTS, "fake-text", spec)
    monkeypatch.setattr(pull, "download_deb", fake_apt(make_deb(
        {spec.member: gzip.compress(TEXT)}), []))
    assert cli.main(["pull", "fake-text"]) == 0
    assert "saved" in capsys.readouterr().err
    assert cli.main(["pull", "no-such-thing"]) == 2
    assert "known texts: " in capsys.readouterr().err


def test_clean_text_starts_at_the_preface():
    assert evaluate.clean_text(TEXT.decode()).startswith("              PREFACE\n\nIt was")
    with pytest.raises(ValueError, match="no PREFACE"):
        evaluate.clean_text("just some words")


def test_default_text_without_the_pull_is_a_clear_error(cache):
    with pytest.raises(FileNotFoundError, match="isaforge pull devils-dictionary"):
        evaluate.default_text(pull_missing=False)


@pytest.fixture(scope="session")
def eval_text() -> str:
    """The real default evaluation text as set-up pulls it (scripts/setup.sh)."""
    path = pull.model_path(evaluate.TEXT_NAME)
    if not path.is_file():
        if os.environ.get("ISAFORGE_REAL_MODEL_TESTS") == "1":
            pytest.fail(f"{path} missing: run `isaforge pull {evaluate.TEXT_NAME}` first")
        pytest.skip(f"the evaluation text is not in the cache ({path}); run "
                    f"`isaforge pull {evaluate.TEXT_NAME}`")
    return evaluate.default_text(pull_missing=False)


def test_real_text_checksum_and_length(eval_text, smollm2_gguf):
    spec = pull.TEXTS[evaluate.TEXT_NAME]
    assert pull.file_sha256(pull.model_path(spec.name)) == spec.sha256
    assert len(eval_text) == evaluate.DEFAULT_CHARS
    assert eval_text.lstrip().startswith("PREFACE")
    assert "public domain" not in eval_text[:2000].lower()  # the transcriber's notice dropped
    import isaforge
    n = len(isaforge.load(smollm2_gguf).encode(eval_text))
    assert n == 10047 and n >= 8000  # at least 8,000 tokens, for a stable score


@pytest.mark.skipif(not STORIES.exists(), reason="stories260K not in ../shared/models")
def test_eval_defaults_to_the_pulled_text(eval_text, tmp_path):
    out = tmp_path / "r.json"
    assert cli.main(["eval", str(STORIES), "--quant", "cq4-128", "--chars", "3000",
                     "--json", str(out)]) == 0
    import json
    (row,) = json.loads(out.read_text())
    assert row["text"] == "devils-dictionary" and row["chars"] == 3000
    assert row["kl_mean"] > 0 and row["positions"] > 500
