/* sme_abi.c - the SME support routines of the AAPCS64 (section "SME support routines"), for
 * runtimes that lack them (Zig's compiler_rt, libgcc before GCC 14). Code compiled with the ACLE
 * SME attributes calls them: a __arm_new("za") function commits a caller's pending lazy ZA save
 * with __arm_tpidr2_save, a __arm_locally_streaming function records the vector granule for the
 * unwinder with __arm_get_current_vg, and callers of private-ZA functions restore ZA with
 * __arm_tpidr2_restore.
 *
 * Build with the sme2 tier flags (-mcpu=generic+sme2), Linux/AArch64 only; on any other target
 * this file compiles to nothing. The routines are weak: a strong definition linked in from
 * elsewhere takes precedence, with no duplicate-symbol clash. They are assembly because they have special calling conventions: __arm_tpidr2_save,
 * __arm_tpidr2_restore and __arm_za_disable preserve X0-X13, X19-X29, SP, all Z and P registers
 * (and ZA); __arm_get_current_vg everything but X0 (and X16, X17); __arm_sme_state everything
 * but X0, X1 (and X16, X17). Here they use only X14-X17 as scratch (X0/X1 for results), and
 * make no calls except on the abort path.
 *
 * TPIDR2 block (pointed to by TPIDR2_EL0 while a lazy save is pending): bytes 0-7 the ZA save
 * buffer, bytes 8-9 num_za_save_slices, bytes 10-15 reserved, must be zero. */
#if defined(__aarch64__) && defined(__linux__)

#include <stdint.h>
#include <sys/auxv.h>

#ifndef AT_HWCAP2
#define AT_HWCAP2 26
#endif

/* bit 0: the thread may use SME (HWCAP2_SME); bit 1: SVE is implemented (HWCAP_SVE). Set by a
 * constructor, before main. */
__attribute__((visibility("hidden"))) uint64_t if_sme_abi_caps;

__attribute__((constructor)) static void if_sme_abi_init(void) {
    unsigned long h1 = getauxval(AT_HWCAP), h2 = getauxval(AT_HWCAP2);
    if_sme_abi_caps = ((h2 >> 23) & 1u) | (((h1 >> 22) & 1u) << 1);
}

/* TPIDR2_EL0 = S3_3_C13_C0_5, SVCR = S3_3_C4_C2_2 (spelled out for any assembler). */
__asm__(
    "	.text\n"
    "	.arch_extension sme\n"
    "	.arch_extension sve\n"

    /* Commit the lazy save described by the TPIDR2 block at x16 (nonzero): check the reserved
     * bytes, then store ZA array vectors 0 .. num_za_save_slices-1 to the buffer, one SVL-byte
     * vector each. Clobbers x14, x15, x17 and the flags. */
    "	.macro IF_SME_COMMIT_SAVE\n"
    "	ldr	x17, [x16, #8]\n"
    "	lsr	x15, x17, #16\n"
    "	cbnz	x15, if_sme_abi_abort\n"
    "	ands	x17, x17, #0xffff\n"
    "	b.eq	92f\n"
    "	ldr	x15, [x16]\n"
    "	mov	w14, wzr\n"
    "91:	str	za[w14, 0], [x15]\n"
    "	addsvl	x15, x15, #1\n"
    "	add	w14, w14, #1\n"
    "	cmp	w14, w17\n"
    "	b.lo	91b\n"
    "92:\n"
    "	.endm\n"

    /* void __arm_tpidr2_save(void): if TPIDR2_EL0 is nonnull, save ZA as the block says. ZA and
     * TPIDR2_EL0 are left as they are (the caller clears TPIDR2_EL0). */
    "	.p2align 2\n"
    "	.weak	__arm_tpidr2_save\n"
    "	.type	__arm_tpidr2_save, %function\n"
    "__arm_tpidr2_save:\n"
    "	mrs	x16, S3_3_C13_C0_5\n"
    "	cbz	x16, 1f\n"
    "	IF_SME_COMMIT_SAVE\n"
    "1:	ret\n"
    "	.size	__arm_tpidr2_save, . - __arm_tpidr2_save\n"

    /* void __arm_tpidr2_restore(const TPIDR2 block *x0): called with ZA on and TPIDR2_EL0
     * null; reload ZA array vectors 0 .. num_za_save_slices-1 from the block's buffer. */
    "	.p2align 2\n"
    "	.weak	__arm_tpidr2_restore\n"
    "	.type	__arm_tpidr2_restore, %function\n"
    "__arm_tpidr2_restore:\n"
    "	mrs	x16, S3_3_C13_C0_5\n"
    "	cbnz	x16, if_sme_abi_abort\n"
    "	ldr	x17, [x0, #8]\n"
    "	lsr	x15, x17, #16\n"
    "	cbnz	x15, if_sme_abi_abort\n"
    "	ands	x17, x17, #0xffff\n"
    "	b.eq	2f\n"
    "	ldr	x15, [x0]\n"
    "	mov	w14, wzr\n"
    "1:	ldr	za[w14, 0], [x15]\n"
    "	addsvl	x15, x15, #1\n"
    "	add	w14, w14, #1\n"
    "	cmp	w14, w17\n"
    "	b.lo	1b\n"
    "2:	ret\n"
    "	.size	__arm_tpidr2_restore, . - __arm_tpidr2_restore\n"

    /* void __arm_za_disable(void): without SME, nothing; else commit any pending lazy save,
     * set TPIDR2_EL0 to null and turn ZA off. */
    "	.p2align 2\n"
    "	.weak	__arm_za_disable\n"
    "	.type	__arm_za_disable, %function\n"
    "__arm_za_disable:\n"
    "	adrp	x16, if_sme_abi_caps\n"
    "	ldr	x16, [x16, :lo12:if_sme_abi_caps]\n"
    "	tbz	x16, #0, 2f\n"
    "	mrs	x16, S3_3_C13_C0_5\n"
    "	cbz	x16, 1f\n"
    "	IF_SME_COMMIT_SAVE\n"
    "	msr	S3_3_C13_C0_5, xzr\n"
    "1:	smstop	za\n"
    "2:	ret\n"
    "	.size	__arm_za_disable, . - __arm_za_disable\n"

    /* {x0, x1} __arm_sme_state(void): x0 bit 63 (and 62, TPIDR2_EL0 accessible) when the
     * thread may use SME, bits 0/1 = PSTATE.SM/ZA; x1 = TPIDR2_EL0. All zero without SME. */
    "	.p2align 2\n"
    "	.weak	__arm_sme_state\n"
    "	.type	__arm_sme_state, %function\n"
    "__arm_sme_state:\n"
    "	mov	x0, xzr\n"
    "	mov	x1, xzr\n"
    "	adrp	x16, if_sme_abi_caps\n"
    "	ldr	x16, [x16, :lo12:if_sme_abi_caps]\n"
    "	tbz	x16, #0, 1f\n"
    "	mrs	x17, S3_3_C4_C2_2\n"
    "	and	x0, x17, #3\n"
    "	orr	x0, x0, #0xc000000000000000\n"
    "	mrs	x1, S3_3_C13_C0_5\n"
    "1:	ret\n"
    "	.size	__arm_sme_state, . - __arm_sme_state\n"

    /* uint64_t __arm_get_current_vg(void): the vector granule (vector length / 64 bits) of
     * the current mode: streaming when PSTATE.SM is 1, else SVE's if SVE exists, else 0. */
    "	.p2align 2\n"
    "	.weak	__arm_get_current_vg\n"
    "	.type	__arm_get_current_vg, %function\n"
    "__arm_get_current_vg:\n"
    "	adrp	x16, if_sme_abi_caps\n"
    "	ldr	x16, [x16, :lo12:if_sme_abi_caps]\n"
    "	tbz	x16, #0, 1f\n"
    "	mrs	x17, S3_3_C4_C2_2\n"
    "	tbz	x17, #0, 1f\n"
    "	rdsvl	x0, #1\n" /* streaming: SVL bytes / 8 */
    "	lsr	x0, x0, #3\n"
    "	ret\n"
    "1:	mov	x0, xzr\n"
    "	tbz	x16, #1, 2f\n"
    "	cntd	x0\n" /* non-streaming with SVE: SVE's own granule */
    "2:	ret\n"
    "	.size	__arm_get_current_vg, . - __arm_get_current_vg\n"

    /* Broken TPIDR2 block or state: leave streaming mode (abort is an ordinary function; ZA
     * may stay on, abort does not return) and abort. */
    "	.p2align 2\n"
    "	.type	if_sme_abi_abort, %function\n"
    "if_sme_abi_abort:\n"
    "	stp	x29, x30, [sp, #-16]!\n"
    "	mov	x29, sp\n"
    "	smstop	sm\n"
    "	bl	abort\n"
    "	.size	if_sme_abi_abort, . - if_sme_abi_abort\n");

#else
typedef int if_sme_abi_unused; /* not Linux/AArch64: the platform runtime provides them */
#endif
