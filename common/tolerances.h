/* tolerances.h -- every tolerance the project checks against, with the reason for its value.
 *
 * All are bounds on the relative L2 error ||x - ref|| / ||ref|| of a whole tensor (o and
 * ht judged separately, the worse one counts). NaN or Inf never passes, whatever the bound.
 *
 * Why these numbers: a float stage rounds every multiply-add at 2^-24 = 6e-8. Each state
 * entry is a dot product of K terms updated every token, but the state map is a contraction
 * (alpha <= 1, I - beta k k^T has eigenvalues in [1 - beta, 1]), so rounding errors do not
 * grow with T: they settle at a few times K * 2^-24 in the worst direction and far less
 * on average. Measured: over every point of `make bench` (the files in plots/data, T up to 65536,
 * K up to 128) the largest float error against the oracle is 6e-7. A bound of 1e-4 leaves
 * more than 100x headroom for unlucky seeds and longer sequences, and is still 1000x below
 * what any algebra mistake (wrong order, missing decay, off-by-one token) produces, which
 * is an error of order 1e-1 to 1 (the operand-order tests assert exactly that).
 */
#ifndef GDN_TOLERANCES_H
#define GDN_TOLERANCES_H

#include "real.h"

#ifdef GDN_DOUBLE
/* Double builds: stage pairs computing the same algebra agree to rounding at 2^-53 = 1e-16,
 * times the same growth factor as above: at most 1e-15 measured (T = 2000, K = 32, V = 48,
 * every stage). 1e-10 is the bound that proves two stages compute the same thing: far above
 * that rounding, far below any algebra mistake (docs/contract.md). */
#define GDN_TOLERANCE_VS_ORACLE 1e-10
#define GDN_TOLERANCE_VS_STAGE 1e-10
#else
/* Float builds: see above. Against the previous stage the two errors can add: 2e-4. */
#define GDN_TOLERANCE_VS_ORACLE 1e-4
#define GDN_TOLERANCE_VS_STAGE 2e-4
#endif

/* The backward stages (09 on) against the fp64 backward oracle, each of o, ht and the
 * gradients: the same bounds, for the same reason. dS runs back through A_t^T = A_t = alpha_t
 * (I - beta_t k_t k_t^T), symmetric and, for unit keys, of norm at most 1 like the forward's
 * map, so its rounding errors settle instead of growing with T; each gradient of a token is a
 * few sums of K V products of such values. Measured (plots/data/backward_cpu.dat, T = 4096, K = V = 64
 * and 128, and the tests' grids): at most 1.2e-6 in float, dg or dbeta the worst; 09 and 10
 * agree with the oracle to 1e-14 in double. */
#ifdef GDN_DOUBLE
#define GDN_TOLERANCE_BACKWARD_VS_ORACLE 1e-10
#define GDN_TOLERANCE_BACKWARD_VS_STAGE 1e-10
#else
#define GDN_TOLERANCE_BACKWARD_VS_ORACLE 1e-4
#define GDN_TOLERANCE_BACKWARD_VS_STAGE 2e-4
#endif

/* Stages on bf16 inputs (gdn_stage.bf16_inputs: stage 06 and after) multiply in bf16, 8
 * significant bits, with fp32 sums: their products carry relative errors near 2^-9 = 2e-3
 * each, and the state enters some of them rounded too. They are compared with the oracle
 * run on the same bf16-rounded inputs, so the input rounding itself is not counted, and
 * with 5e-3, the bound FLA's own tests use for its bf16 kernels. */
#define GDN_TOLERANCE_BF16 5e-3
/* Two such stages against each other (07 against 06): each carries errors up to that bound,
 * made in different places (07's fold and scan; and where stage 06's chain_from_values_pays
 * answers differently for 07's P than for 06's one segment, a differently rounded chunk step),
 * so against each other the two errors can add, as for float stages above: 1e-2. Each is
 * still held to 5e-3 against the oracle. Measured on an NVIDIA H200 (docs/06_warp_specialized.md,
 * 07 against 06; slow gates, T = 4196, K = V = 64, P = 64): 07 3.4e-3 and 06 4.4e-3 from the
 * oracle, 5.2e-3 from each other; at K = V = 128 with the same form, 4.0e-3 and 4.1e-3,
 * 3.8e-3 apart. A stage against an fp32 one (06 against 05's GPU twin) keeps the single
 * bound: the fp32 side's error is far below it. */
#define GDN_TOLERANCE_BF16_VS_STAGE 1e-2

/* Backward stages on bf16 inputs (gdn_backward_stage.bf16_inputs: stage 11) multiply in bf16
 * with fp32 sums, as the forward ones do, and each gradient is a few such products deep: their
 * tensors are held, each against the fp64 backward oracle on the same bf16-rounded inputs and
 * against another stage on them, to the bounds FLA's tests hold its chunk backward to, tensor
 * by tensor: fla-org/flash-linear-attention, tests/ops/test_gated_delta.py, test_chunk, lines
 * 162-169 at commit 189b286fb036b53e7ff2bd16f9d7b801848c49d7 (the file's last version under
 * that name; tests/ops/test_gdn.py after it, lines 193-200 at bc3b101dcb713ddc5bd8924b66754eb68b5ccf89,
 * the same values): assert_close('o' and 'ht', 0.005), ('dq', 'dk', 'dv' and 'dh0', 0.008),
 * ('db' and 'dg', 0.02). Their metric, get_err_ratio in fla/utils (fla/utils/_testing.py, lines
 * 22-25 at bc3b101d), is RMS(ref - x) / RMS(ref), which is ||x - ref|| / ||ref||, the relative
 * L2 error above. FLA's test runs fp16 inputs (11 significant bits) against an fp32 autograd
 * reference, and passes a tensor whose largest difference is at most 1e-6; here bf16 (8 bits)
 * against fp64, every tensor judged: the same bounds, held more strictly. A tensor of a few
 * values (one token of one head: dbeta and dg are one number, a sum whose terms cancel) has the
 * relative error of that one sum, which these bounds do not cover: the tests give every tensor
 * several heads or tokens (tests/gpu/test_gpu_backward.c). */
#define GDN_TOLERANCE_BF16_BACKWARD_O 5e-3     /* o, ht */
#define GDN_TOLERANCE_BF16_BACKWARD_GRAD 8e-3  /* dq, dk, dv, dh0 */
#define GDN_TOLERANCE_BF16_BACKWARD_GATES 2e-2 /* dg, dbeta */

#endif
