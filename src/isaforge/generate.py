"""The old import path of `isaforge.runtime.generate` (tests/test_tiers.py imports Sampler
from it): the same module object."""

import sys

from .runtime import generate

sys.modules[__name__] = generate
