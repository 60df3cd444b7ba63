"""Energy from Linux RAPL (/sys/class/powercap/intel-rapl*): joules per token over decode
windows, or "n/a" with the reason the counters cannot be read."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

POWERCAP = Path("/sys/class/powercap")


@dataclass
class Rapl:
    """Package-level RAPL counters (energy_uj, microjoules, wrapping at max_energy_range_uj)."""

    domains: list[Path] = field(default_factory=list)
    ranges: list[int] = field(default_factory=list)
    reason: str = ""

    @classmethod
    def probe(cls, root: Path = POWERCAP) -> Rapl:
        if not root.is_dir():
            return cls(reason=f"{root} does not exist (no RAPL interface exposed, e.g. a VM "
                              "or a non-Intel/AMD-RAPL kernel)")
        # package domains only (intel-rapl:0, not the sub-domains intel-rapl:0:0)
        dirs = sorted(d for d in root.glob("intel-rapl*") if d.name.count(":") == 1)
        if not dirs:
            return cls(reason=f"no intel-rapl package domain under {root}")
        domains, ranges = [], []
        for d in dirs:
            try:
                (d / "energy_uj").read_text()
                rng = int((d / "max_energy_range_uj").read_text())
            except (OSError, ValueError) as e:
                return cls(reason=f"{d / 'energy_uj'} is not readable ({e.__class__.__name__}: "
                                  f"{e}); reading RAPL usually needs root")
            domains.append(d / "energy_uj")
            ranges.append(rng)
        return cls(domains, ranges)

    @property
    def available(self) -> bool:
        return bool(self.domains)

    def read(self) -> list[int]:
        return [int(p.read_text()) for p in self.domains]

    def joules(self, before: list[int], after: list[int]) -> float:
        """Energy between two readings, all packages, handling counter wrap-around."""
        total = 0
        for b, a, rng in zip(before, after, self.ranges, strict=True):
            total += a - b if a >= b else a + rng - b
        return total / 1e6

    def status(self) -> dict:
        return {"available": self.available, "source": ",".join(map(str, self.domains)) or None,
                "reason": self.reason or None}
