/* i8_attn_16x64_amx_emulated.c - test-only (the _bench module and the test drivers, never the
 * runtime): the AMX attention body (attn_i8_matrix_body.h) with its tile operations emulated
 * in plain C (scalar flags, runs anywhere), the "amx_emulated" table's int8 attention, so the
 * packed layouts, tile shapes and readout order of the AMX kernel are tested on machines
 * without AMX. */
#define ATTN_AMX_EMULATE 1
#define ATTN_AMX_FN if_i8_attn_16x64_amx_emulated
#include "../kernels/attention/attn_i8_matrix_body.h"
#include "testing.h"

const if_attn_kernel if_k_i8_attn_16x64_amx_emulated = {.name = "i8_attn_16x64_amx_emulated",
    .mr = IF_ATTN_Q_TILE, .nr = IF_ATTN_KEY_BLOCK, .run = if_i8_attn_16x64_amx_emulated};
