"""The old import path of `isaforge.runtime.engine`, kept for the kernel tests that import it
(tests/test_tiers.py, test_native.py, test_selection.py, test_attention.py): the same module
object, so its state (select_kernel's default) is one."""

import sys

from .runtime import engine

sys.modules[__name__] = engine
