"""Print the two tables of csrc/detmath.c from first principles (exact rational arithmetic):
if_exp2_tab[i] = bits of 2^(i/32) rounded to nearest double, minus i << 47, and
SC_INV_PIO4[i] = floor(4/pi * 2^(8i + 7)) mod 2^32. tests/test_detmath.py checks that the C
file holds exactly these values."""

from __future__ import annotations

import struct
from decimal import Decimal, getcontext
from fractions import Fraction


def exp2_tab() -> list[int]:
    getcontext().prec = 60
    out = []
    for i in range(32):
        # 2^(i/32) to 60 digits, then rounded once to double by Fraction -> float
        x = float(Fraction(Decimal(2) ** (Decimal(i) / Decimal(32))))
        bits = struct.unpack("<Q", struct.pack("<d", x))[0]
        out.append((bits - (i << 47)) % 2**64)
    return out


def pi_fraction(digits: int = 120) -> Fraction:
    """pi to `digits` decimal digits by Machin's formula."""
    getcontext().prec = digits + 10

    def arctan_inv(n: int) -> Decimal:
        x, total, term, k, sign = Decimal(n), Decimal(0), 1 / Decimal(n), 1, 1
        while term > Decimal(10) ** -(digits + 5):
            total += sign * term / k
            term /= x * x
            k, sign = k + 2, -sign
        return total

    return Fraction(16 * arctan_inv(5) - 4 * arctan_inv(239))


def inv_pio4_tab() -> list[int]:
    four_over_pi = 4 / pi_fraction()
    return [int(four_over_pi * 2 ** (8 * i + 7)) % 2**32 for i in range(24)]


if __name__ == "__main__":
    print("if_exp2_tab:", ", ".join(f"0x{v:016x}" for v in exp2_tab()))
    print("SC_INV_PIO4:", ", ".join(f"0x{v:x}" for v in inv_pio4_tab()))
