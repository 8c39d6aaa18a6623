/*
 * Fused decoding step of one pre-norm Weird-attention block (weirdnet).
 *
 * One call advances B sequences by one token through
 *     x = x + W_O scan_step(W_A LN1(x) + b_A, W_V LN1(x) + b_V) + b_O
 *     x = x + W_2 act(W_1 LN2(x) + b_1) + b_2
 * in place on the residual stream x (B, D).  The scan step is the scan's own decoding
 * code (scan_extend of weird_scan.c, compiled into this library), so the mixer's
 * output is bitwise that of the full causal pass given the same A and V.
 *
 * Compiled at first use by weirdnet/ops/block_step/cpu.py (with the scan's csrc/ on the
 * include path) and called through ctypes.  Why a fused step: at decoding widths
 * (D ~ 100s) every separate PyTorch op costs more in dispatch than in arithmetic; here
 * the whole block is five matrix-vector products, two LayerNorms, one activation and
 * one scan step, with no allocation but one workspace.
 *
 * Arithmetic: built with -ffp-contract=off; a dot product keeps DOT_LANES partial sums
 * and adds them pairwise in a fixed order, so a value does not depend on vectorisation
 * (it does differ, in the last bits, from PyTorch's GEMM, which sums in its own order).
 */
#include "weird_scan.c"

#define DOT_LANES 16

/* Activation codes, as cpu.py passes them. */
#define ACT_GELU 0
#define ACT_LEAKY_RELU 1

#define BS_T float
#define BS_NAME(x) x##_f32
#define BS_SQRT sqrtf
#define BS_ERF erff
#define BS_SCAN_EXTEND scan_extend_f32
#include "block_step_impl.h"
#undef BS_T
#undef BS_NAME
#undef BS_SQRT
#undef BS_ERF
#undef BS_SCAN_EXTEND

#define BS_T double
#define BS_NAME(x) x##_f64
#define BS_SQRT sqrt
#define BS_ERF erf
#define BS_SCAN_EXTEND scan_extend_f64
#include "block_step_impl.h"
#undef BS_T
#undef BS_NAME
#undef BS_SQRT
#undef BS_ERF
#undef BS_SCAN_EXTEND
