/* problem.h -- one Gated DeltaNet forward problem: sizes, inputs, results.
 *
 * Layout is FLA's (docs/contract.md section 1), row-major:
 *   q, k [B, T, H, K]   v, o [B, T, HV, V]   g, beta [B, T, HV]   h0, ht [N, HV, K, V]
 * HV value heads (HV = H unless grouped, a multiple of H): value head h reads key head
 * h / (HV / H), so HV / H neighbouring value heads share one key head (grouped value heads).
 * N sequences: the B rows, each T tokens long; or, for a packed batch (B = 1), the spans
 * offsets[n] .. offsets[n + 1] - 1 of the one row (FLA's cu_seqlens), each with its own
 * state. A position is b T + t, a token's place along all B T of them.
 * The value-head token (position, h) has index gdn_value_token(); its v row starts at
 * v + index * V, its gate at g + index. Its keys are at k + gdn_key_token() * K. The state
 * of sequence n and value head h starts at h0 + gdn_head(p, n, h) * K * V: a K x V
 * row-major matrix.
 */
#ifndef GDN_PROBLEM_H
#define GDN_PROBLEM_H

#include <stddef.h>
#include <stdint.h>

#include "real.h"

#ifdef __cplusplus /* included by the GPU stages (.cu, compiled as C++) */
extern "C" {
#endif

typedef struct {
    size_t B, T, H, K, V;
    size_t HV;        /* value heads; 0 reads as H (gdn_value_heads), so a problem built field by field is ungrouped */
    double scale;     /* output scale, 1/sqrt(K) unless set */
    real_t *q, *k, *v, *g, *beta;
    real_t *h0;       /* NULL means a zero initial state */
    size_t *offsets;  /* NULL, or a packed batch's sequences + 1 token offsets: 0, ..., T (B = 1) */
    size_t sequences; /* with offsets: how many sequences */
} gdn_problem;

typedef struct {
    real_t *o;        /* [B, T, HV, V] */
    real_t *ht;       /* [N, HV, K, V] */
} gdn_result;

static inline size_t gdn_value_heads(const gdn_problem *p) { return p->HV ? p->HV : p->H; }
static inline size_t gdn_sequences(const gdn_problem *p) { return p->offsets ? p->sequences : p->B; }
/* Sequence n's first position and its length. */
static inline size_t gdn_sequence_start(const gdn_problem *p, size_t n) { return p->offsets ? p->offsets[n] : n * p->T; }
static inline size_t gdn_sequence_length(const gdn_problem *p, size_t n)
{
    return p->offsets ? p->offsets[n + 1] - p->offsets[n] : p->T;
}
/* The longest sequence's length: T, or the widest span of a packed batch. */
static inline size_t gdn_longest_sequence(const gdn_problem *p)
{
    size_t longest = 0;
    for (size_t n = 0; n < gdn_sequences(p); n++)
        longest = gdn_sequence_length(p, n) > longest ? gdn_sequence_length(p, n) : longest;
    return longest;
}
/* The value-head token at a position, and the row of its keys (key head h / (HV / H)). */
static inline size_t gdn_value_token(const gdn_problem *p, size_t position, size_t h)
{
    return position * gdn_value_heads(p) + h;
}
static inline size_t gdn_key_token(const gdn_problem *p, size_t position, size_t h)
{
    return position * p->H + h / (gdn_value_heads(p) / p->H);
}
/* Token (b, t, h) of an unpacked problem: gdn_value_token at position b T + t. */
static inline size_t gdn_token(const gdn_problem *p, size_t b, size_t t, size_t h)
{
    return gdn_value_token(p, b * p->T + t, h);
}
/* The state of sequence n (row b when not packed), value head h. */
static inline size_t gdn_head(const gdn_problem *p, size_t n, size_t h) { return n * gdn_value_heads(p) + h; }
/* Value-head tokens (rows of v, o, g, beta) and key-head tokens (rows of q, k). */
static inline size_t gdn_tokens(const gdn_problem *p) { return p->B * p->T * gdn_value_heads(p); }
static inline size_t gdn_key_tokens(const gdn_problem *p) { return p->B * p->T * p->H; }
static inline size_t gdn_state_count(const gdn_problem *p)
{
    return gdn_sequences(p) * gdn_value_heads(p) * p->K * p->V;
}

/* A problem's sizes: grouped value heads (HV) and a packed batch (lengths) are optional. */
typedef struct {
    size_t B, T, H, K, V;
    size_t HV;              /* 0: H */
    const size_t *lengths;  /* NULL, or each packed sequence's tokens: then B is 1 and T their sum */
    size_t sequences;       /* how many lengths */
    int with_h0;
} gdn_layout;

/* a * b * c ..., refusing size_t overflow: returns 0 and sets the error on overflow. */
int gdn_multiply_sizes(size_t *product, size_t count, const size_t *factors);

/* Bytes of inputs plus results for these sizes (overflow-checked). */
int gdn_problem_bytes(size_t B, size_t T, size_t H, size_t K, size_t V, int with_h0, size_t *bytes);
int gdn_layout_bytes(const gdn_layout *l, size_t *bytes);
/* Refuse, with the number of bytes, a request larger than this machine's memory. */
int gdn_memory_check(size_t bytes, const char *what);

/* Allocate (zeroed) inputs for these sizes; scale is set to 1/sqrt(K). A layout that is not
 * one (HV not a multiple of H, a length of 0, B > 1 or a T other than their sum with lengths)
 * is refused with one line. */
int gdn_problem_alloc(gdn_problem *p, size_t B, size_t T, size_t H, size_t K, size_t V, int with_h0);
int gdn_problem_alloc_layout(gdn_problem *p, const gdn_layout *l);
void gdn_problem_free(gdn_problem *p);
/* Draw the inputs from the seeded generator exactly as docs/contract.md section 3 says. */
void gdn_problem_generate(gdn_problem *p, uint64_t seed);

/* Round q, k and v in place to the nearest bf16 values (half.h), for stages on bf16 inputs. */
void gdn_problem_round_to_bf16(gdn_problem *p);
/* The same draws for tokens t_offset .. t_offset + p->T - 1 of a problem T_global long
 * (stage 08: each process draws only its slice of the sequence). */
void gdn_problem_generate_slice(gdn_problem *p, uint64_t seed, size_t T_global, size_t t_offset);
/* Read q k v g beta [h0] [cu_seqlens] .npy from a folder; sizes come from the files (HV from
 * v, a packed batch's offsets from cu_seqlens.npy, int32 or int64). With check_values,
 * every value is then validated (gdn_problem_validate): one pass, refused with the tensor
 * and the first bad element named. */
int gdn_problem_load(gdn_problem *p, const char *dir, int check_values);
/* Make p (B = 1, T set) a packed batch with these count offsets (FLA's cu_seqlens): 0 first,
 * each above the one before, T last; a copy is kept. -1 and one line starting with `what`
 * (the file or argument they came from) where they are not. */
int gdn_problem_set_offsets(gdn_problem *p, const int64_t *offsets, size_t count, const char *what);
int gdn_problem_save(const gdn_problem *p, const char *dir);
/* Check what the contract requires of the values: finite, g <= 0, 0 <= beta <= 1.
 * dir (or NULL) prefixes the file names in the message. */
int gdn_problem_validate(const gdn_problem *p, const char *dir);

/* The state head (n, h) starts from (gdn_head): a copy of its h0, or zeros when there is no h0. */
void gdn_initial_state(const gdn_problem *p, size_t head, real_t *S);

int gdn_result_alloc(gdn_result *r, const gdn_problem *p);
void gdn_result_free(gdn_result *r);
/* Fill the outputs with NaN, so that an output a stage forgets to write fails the check. */
void gdn_result_poison(gdn_result *r, const gdn_problem *p);
/* Write o.npy and ht.npy into dir (created if missing); on a failed write neither file is
 * left behind, so a folder never holds a partial result that looks whole. */
int gdn_result_save(const gdn_result *r, const gdn_problem *p, const char *dir);
/* The folder dir, created when missing; dir/name.npy written from data (npy_write). */
int gdn_make_dir(const char *dir);
int gdn_save_tensor(const char *dir, const char *name, const real_t *data, size_t ndim, const size_t *shape);
/* Removes DIR/NAME.npy for each name of the NULL-ended list (what a failed save leaves): no
 * folder that holds part of the outputs and looks whole. Keeps gdn_last_error. */
void gdn_remove_outputs(const char *dir, const char *const *names);

/* Outputs that are not finite. Every binary checks o and ht after its checked run, before it
 * compares or writes anything: a NaN or Inf there is an error (a state that overflowed, or a
 * fault of the stage), never a result. */

/* What the inputs say about such an output: the largest |value| of q, k, v and h0; the largest
 * beta |k|^2 of a token (above 2, I - beta k k^T has an eigenvalue below -1 and the state can
 * grow every token); 1 when an input is NaN or Inf where the inputs' check refuses it (g may be
 * -inf: alpha = 0), which only --no-input-check lets in; 1 when a g is -inf (the loops read it as
 * alpha = 0, the chunked forms' differences of cumulative gates make it NaN).
 * All doubles, so that stage 08 takes each one's maximum over its ranks in one MPI_Allreduce. */
typedef struct {
    double largest, key_gain, non_finite, gate_minus_inf;
} gdn_input_extremes;
gdn_input_extremes gdn_problem_extremes(const gdn_problem *p);

/* The place of the first value that is not finite in the whole outputs (o's B T H V values in
 * memory order, then ht's), or GDN_ALL_FINITE. p and r may hold a slice of the sequence whose
 * tokens start at first_token of T_whole (stage 08's ranks); with_ht 0 skips ht (a rank whose
 * final state is not the output's). */
#define GDN_ALL_FINITE UINT64_MAX
uint64_t gdn_result_first_non_finite(const gdn_problem *p, const gdn_result *r, size_t first_token, size_t T_whole,
                                     int with_ht);
/* gdn_set_error, one line: the output and index (b, t, h, column) of the value at position (it
 * must lie in p's part), the value, and its likely cause from e. Returns -1. */
int gdn_non_finite_error(const gdn_problem *p, const gdn_result *r, size_t first_token, size_t T_whole,
                         uint64_t position, gdn_input_extremes e);
/* The three above for a whole problem in one process: 0 when o and ht are finite, else -1
 * with the error set. */
int gdn_result_check_finite(const gdn_problem *p, const gdn_result *r);

#ifdef __cplusplus
}
#endif

#endif
