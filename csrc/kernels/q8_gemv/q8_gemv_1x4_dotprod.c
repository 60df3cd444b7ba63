/* Q8 GEMV, Armv8.2 dotprod (-mcpu=generic+dotprod): the decode kernel of the dotprod and i8mm
 * tiers. Tile: 1 activation row x 4 weight rows (one float32x4_t accumulator, lane = output
 * row). Per 16 bytes and weight row one SDOT into an int32x4 partial sum, with two independent
 * accumulator chains per row (even / odd 16-byte chunks, 8 chains in flight) to hide the SDOT
 * latency; an ADDP tree turns the 4 rows' partials into one int32x4 of isums (lane = row).
 * gs = 4: one SDOT per row gives the 4 groups' isums, then a 4x4 transpose; gs = 8: two SDOTs
 * + ADDP + transpose. The 4 rows' scales are transposed 4 groups at a time and each lane adds
 * ((float)isum * ws) * xs in group order (FMUL, FMUL, FADD, never fused), exactly as
 * q8_gemv_1x1_scalar. gs % 4 != 0 falls back to the scalar kernel.
 * Code: q8_gemv_1x4_neon.c's loop with the dotprod integer part (../q8_neon_common.h). */
#define Q8_ISA Q8_ISA_DOT
#define Q8_GEMV_FN if_q8_gemv_1x4_dotprod
#define Q8_GEMV_DESC if_k_q8_gemv_1x4_dotprod
#define Q8_GEMV_NAME "q8_gemv_1x4_dotprod"
#define Q8_GEMV_REQUIRES (IF_FEAT_ASIMD | IF_FEAT_ASIMDDP)
#include "q8_gemv_1x4_neon.c"
