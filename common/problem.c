#include "problem.h"

#include <errno.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "error.h"
#include "half.h"
#include "npy.h"
#include "random.h"

int gdn_multiply_sizes(size_t *product, size_t count, const size_t *factors)
{
    size_t result = 1;
    for (size_t i = 0; i < count; i++) {
        if (factors[i] != 0 && result > SIZE_MAX / factors[i]) {
            *product = 0;
            return gdn_set_error("sizes overflow a 64-bit byte count");
        }
        result *= factors[i];
    }
    *product = result;
    return 0;
}

int gdn_layout_bytes(const gdn_layout *l, size_t *bytes)
{
    /* values: q, k per key token (2 K); v, o, g and beta per value token (2 V + 2); h0 and ht
     * per state (2 K V) */
    const size_t HV = l->HV ? l->HV : l->H, N = l->lengths ? l->sequences : l->B;
    size_t key_tokens, value_tokens, heads, key_values, value_values, state_values;
    size_t key_sizes[3] = {l->B, l->T, l->H}, value_sizes[3] = {l->B, l->T, HV}, head_sizes[2] = {N, HV};
    if (gdn_multiply_sizes(&key_tokens, 3, key_sizes) || gdn_multiply_sizes(&value_tokens, 3, value_sizes) ||
        gdn_multiply_sizes(&heads, 2, head_sizes))
        return -1;
    if (l->K > SIZE_MAX / 8 || l->V > SIZE_MAX / 8)
        return gdn_set_error("sizes overflow a 64-bit byte count");
    size_t key_factors[2] = {key_tokens, 2 * l->K}, value_factors[2] = {value_tokens, 2 * l->V + 2};
    size_t state_factors[4] = {heads, l->K, l->V, l->with_h0 ? 2 : 1};
    if (gdn_multiply_sizes(&key_values, 2, key_factors) || gdn_multiply_sizes(&value_values, 2, value_factors) ||
        gdn_multiply_sizes(&state_values, 4, state_factors))
        return -1;
    const size_t limit = SIZE_MAX / sizeof(real_t); /* each sum checked before it is formed */
    if (key_values > limit || value_values > limit - key_values || state_values > limit - key_values - value_values)
        return gdn_set_error("sizes overflow a 64-bit byte count");
    *bytes = (key_values + value_values + state_values) * sizeof(real_t);
    return 0;
}

int gdn_problem_bytes(size_t B, size_t T, size_t H, size_t K, size_t V, int with_h0, size_t *bytes)
{
    const gdn_layout l = {.B = B, .T = T, .H = H, .K = K, .V = V, .with_h0 = with_h0};
    return gdn_layout_bytes(&l, bytes);
}

int gdn_memory_check(size_t bytes, const char *what)
{
    long pages = sysconf(_SC_PHYS_PAGES), page_size = sysconf(_SC_PAGE_SIZE);
    if (pages <= 0 || page_size <= 0)
        return 0; /* unknown: let malloc decide */
    size_t memory = (size_t)pages * (size_t)page_size;
    if (bytes > memory)
        return gdn_set_error("%s needs %zu bytes (%.1f GiB), more than this machine's memory of %zu bytes (%.1f GiB)",
                             what, bytes, bytes / 1073741824.0, memory, memory / 1073741824.0);
    return 0;
}

static real_t *alloc_values(size_t count, const char *name)
{
    real_t *values = calloc(count ? count : 1, sizeof(real_t));
    if (!values)
        gdn_set_error("out of memory allocating %s (%zu bytes)", name, count * sizeof(real_t));
    return values;
}

/* What a layout must be: positive sizes, HV a multiple of H, and for a packed batch B = 1,
 * lengths of at least one token each, summing to T. */
static int check_layout(const gdn_layout *l)
{
    const size_t HV = l->HV ? l->HV : l->H;
    if (l->B == 0 || l->T == 0 || l->H == 0 || l->K == 0 || l->V == 0)
        return gdn_set_error("sizes must be positive (B=%zu T=%zu H=%zu K=%zu V=%zu)", l->B, l->T, l->H, l->K, l->V);
    if (HV % l->H != 0)
        return gdn_set_error("HV=%zu value heads is not a multiple of H=%zu key heads", HV, l->H);
    if (!l->lengths)
        return 0;
    if (l->B != 1)
        return gdn_set_error("a packed batch is one row of tokens: B must be 1, got %zu", l->B);
    size_t sum = 0;
    for (size_t n = 0; n < l->sequences; n++) {
        if (l->lengths[n] == 0)
            return gdn_set_error("sequence %zu has no tokens (every length must be positive)", n);
        if (l->lengths[n] > SIZE_MAX - sum)
            return gdn_set_error("the lengths overflow a 64-bit count");
        sum += l->lengths[n];
    }
    if (l->sequences == 0 || sum != l->T)
        return gdn_set_error("the %zu lengths sum to %zu tokens, not T=%zu", l->sequences, sum, l->T);
    return 0;
}

int gdn_problem_alloc_layout(gdn_problem *p, const gdn_layout *l)
{
    memset(p, 0, sizeof *p);
    size_t bytes;
    if (check_layout(l) || gdn_layout_bytes(l, &bytes) || gdn_memory_check(bytes, "the problem"))
        return -1;
    *p = (gdn_problem){.B = l->B, .T = l->T, .H = l->H, .K = l->K, .V = l->V, .HV = l->HV ? l->HV : l->H,
                       .scale = 1.0 / sqrt((double)l->K)};
    if (l->lengths) {
        p->offsets = malloc((l->sequences + 1) * sizeof *p->offsets);
        if (!p->offsets)
            return gdn_set_error("out of memory allocating %zu offsets", l->sequences + 1);
        p->sequences = l->sequences;
        p->offsets[0] = 0;
        for (size_t n = 0; n < l->sequences; n++)
            p->offsets[n + 1] = p->offsets[n] + l->lengths[n];
    }
    size_t key_tokens = gdn_key_tokens(p), tokens = gdn_tokens(p);
    p->q = alloc_values(key_tokens * l->K, "q");
    p->k = p->q ? alloc_values(key_tokens * l->K, "k") : NULL;
    p->v = p->k ? alloc_values(tokens * l->V, "v") : NULL;
    p->g = p->v ? alloc_values(tokens, "g") : NULL;
    p->beta = p->g ? alloc_values(tokens, "beta") : NULL;
    if (p->beta && l->with_h0)
        p->h0 = alloc_values(gdn_state_count(p), "h0");
    if (!p->beta || (l->with_h0 && !p->h0)) {
        gdn_problem_free(p);
        return -1;
    }
    return 0;
}

int gdn_problem_alloc(gdn_problem *p, size_t B, size_t T, size_t H, size_t K, size_t V, int with_h0)
{
    const gdn_layout l = {.B = B, .T = T, .H = H, .K = K, .V = V, .with_h0 = with_h0};
    return gdn_problem_alloc_layout(p, &l);
}

void gdn_problem_free(gdn_problem *p)
{
    free(p->q);
    free(p->k);
    free(p->v);
    free(p->g);
    free(p->beta);
    free(p->h0);
    free(p->offsets);
    memset(p, 0, sizeof *p);
}

/* log(sigmoid(z)) without overflow: -log(1 + exp(-z)) for z > 0, z - log(1 + exp(z)) otherwise. */
static double log_sigmoid(double z) { return z > 0 ? -log1p(exp(-z)) : z - log1p(exp(z)); }

void gdn_problem_generate(gdn_problem *p, uint64_t seed) { gdn_problem_generate_slice(p, seed, p->T, 0); }

void gdn_problem_generate_slice(gdn_problem *p, uint64_t seed, size_t T_global, size_t t_offset)
{
    /* Counter-based draws: each element is a function of its global index alone, so the loops
     * can run in any order and in parallel, and a slice gets exactly the values the whole
     * problem has there. q and k are drawn per key-head token, v, g and beta per value-head
     * token: with HV = H the two are the same token. A packed batch draws as the one row it is. */
    const size_t K = p->K, V = p->V, H = p->H, HV = gdn_value_heads(p);
    long long key_tokens = (long long)gdn_key_tokens(p), tokens = (long long)gdn_tokens(p);
#pragma omp parallel for schedule(static)
    for (long long token = 0; token < key_tokens; token++) {
        size_t b = (size_t)token / (p->T * H), t = (size_t)token / H % p->T, h = (size_t)token % H;
        size_t first_k = ((b * T_global + t_offset + t) * H + h) * K, local_k = (size_t)token * K;
        /* k: N(0, 1), normalised to unit length per token (in double, then rounded) */
        double squares = 0.0;
        for (size_t i = 0; i < K; i++) {
            double x = random_normal(seed, STREAM_K, first_k + i);
            squares += x * x;
        }
        double inverse_norm = 1.0 / sqrt(squares);
        for (size_t i = 0; i < K; i++) {
            p->q[local_k + i] = (real_t)random_normal(seed, STREAM_Q, first_k + i);
            p->k[local_k + i] = (real_t)(random_normal(seed, STREAM_K, first_k + i) * inverse_norm);
        }
    }
#pragma omp parallel for schedule(static)
    for (long long token = 0; token < tokens; token++) {
        size_t b = (size_t)token / (p->T * HV), t = (size_t)token / HV % p->T, h = (size_t)token % HV;
        size_t global = (b * T_global + t_offset + t) * HV + h, local_v = (size_t)token * V;
        for (size_t i = 0; i < V; i++)
            p->v[local_v + i] = (real_t)random_normal(seed, STREAM_V, global * V + i);
        p->g[token] = (real_t)log_sigmoid(random_normal(seed, STREAM_G, global));
        p->beta[token] = (real_t)(1.0 / (1.0 + exp(-random_normal(seed, STREAM_BETA, global))));
    }
    if (p->h0)
        for (size_t i = 0; i < gdn_state_count(p); i++)
            p->h0[i] = (real_t)random_normal(seed, STREAM_H0, i);
}

void gdn_problem_round_to_bf16(gdn_problem *p)
{
    real_t *tensors[3] = {p->q, p->k, p->v};
    size_t counts[3] = {gdn_key_tokens(p) * p->K, gdn_key_tokens(p) * p->K, gdn_tokens(p) * p->V};
    for (int i = 0; i < 3; i++)
        for (size_t j = 0; j < counts[i]; j++)
            tensors[i][j] = (real_t)bf16_to_float(float_to_bf16((float)tensors[i][j]));
}

/* Copy a .npy array (read as double) into a newly allocated real_t tensor. Two faults show only
 * before the rounding to real_t, so they are refused here, naming the file's own value: a finite
 * value past real_t's range (it would become Inf), and with `check`, a finite value outside [low,
 * high] that the rounding brings inside (g = 1e-50 or beta = 1 + 1e-12 in a '<f8' file, in float). */
static real_t *take_values(const npy_array *array, const char *path, double low, double high, int check)
{
    for (size_t i = 0; i < array->count; i++) {
        const double x = array->data[i];
        if (isfinite(x) && !isfinite((real_t)x)) {
            gdn_set_error("%s: element %zu is %g, beyond %s's range", path, i, x, REAL_NAME);
            return NULL;
        }
        const double rounded = (real_t)x; /* outside and rounded inside; the rest: gdn_problem_validate */
        if (check && isfinite(x) && (x < low || x > high) && rounded >= low && rounded <= high) {
            gdn_set_error("%s: element %zu is %.17g, outside [%g, %g]", path, i, x, low, high); /* the file's digits */
            return NULL;
        }
    }
    real_t *values = alloc_values(array->count, path);
    if (values)
        for (size_t i = 0; i < array->count; i++)
            values[i] = (real_t)array->data[i];
    return values;
}

static int expect_shape(const char *path, const npy_array *a, size_t ndim, const size_t *want, const char *how)
{
    int same = a->ndim == ndim;
    for (size_t d = 0; same && d < ndim; d++)
        same = a->shape[d] == want[d];
    if (!same) {
        char got_text[128], want_text[128];
        return gdn_set_error("%s: shape %s disagrees with the other tensors, which say %s %s", path,
                             npy_shape_text(a->ndim, a->shape, got_text, sizeof got_text),
                             npy_shape_text(ndim, want, want_text, sizeof want_text), how);
    }
    return 0;
}

int gdn_problem_set_offsets(gdn_problem *p, const int64_t *offsets, size_t count, const char *what)
{
    if (p->B != 1)
        return gdn_set_error("%s: a packed batch is one row of tokens, but q has B=%zu rows", what, p->B);
    if (count < 2)
        return gdn_set_error("%s: %zu offsets; N >= 1 sequences need N + 1", what, count);
    if (offsets[0] != 0)
        return gdn_set_error("%s: the first offset is %lld, not 0", what, (long long)offsets[0]);
    for (size_t i = 1; i < count; i++)
        if (offsets[i] <= offsets[i - 1])
            return gdn_set_error("%s: offsets not increasing: element %zu (%lld) after %lld (every sequence needs "
                                 "a token)", what, i, (long long)offsets[i], (long long)offsets[i - 1]);
    if (offsets[count - 1] != (int64_t)p->T)
        return gdn_set_error("%s: the last offset is %lld, not T=%zu (q's tokens)", what,
                             (long long)offsets[count - 1], p->T);
    size_t *copy = malloc(count * sizeof *copy);
    if (!copy)
        return gdn_set_error("%s: out of memory", what);
    for (size_t i = 0; i < count; i++)
        copy[i] = (size_t)offsets[i];
    free(p->offsets);
    p->offsets = copy, p->sequences = count - 1;
    return 0;
}

/* cu_seqlens.npy: one dimension, integers (npy_read_integers keeps them exact), then the checks
 * of gdn_problem_set_offsets. */
static int take_offsets(const char *path, const npy_array *a, gdn_problem *p)
{
    if (a->ndim != 1) {
        char text[128];
        return gdn_set_error("%s: shape %s should be (N + 1,): the offsets of N >= 1 sequences", path,
                             npy_shape_text(a->ndim, a->shape, text, sizeof text));
    }
    int64_t *offsets = malloc((a->count ? a->count : 1) * sizeof *offsets);
    if (!offsets)
        return gdn_set_error("%s: out of memory", path);
    for (size_t i = 0; i < a->count; i++)
        offsets[i] = (int64_t)a->data[i];
    int status = gdn_problem_set_offsets(p, offsets, a->count, path);
    free(offsets);
    return status;
}

int gdn_problem_load(gdn_problem *p, const char *dir, int check_values)
{
    static const char *names[7] = {"q", "k", "v", "g", "beta", "h0", "cu_seqlens"};
    enum { Q, KEYS, VALUES, G, BETA, H0, OFFSETS };
    npy_array arrays[7] = {{0}};
    char paths[7][4096];
    int status = -1;
    memset(p, 0, sizeof *p);

    /* the memory first, from the headers: each value staged as a double and kept as a real_t
       (one line here, not the out-of-memory kill when the pages are touched) */
    int present[7];
    size_t values = 0;
    for (int i = 0; i < 7; i++) {
        present[i] = 1;
        if (npy_path(paths[i], sizeof paths[i], dir, names[i]) || (i >= H0 && npy_present(paths[i], &present[i])))
            goto done;
        if (present[i] && i != OFFSETS && npy_read_header(paths[i], &arrays[i]) != 0)
            goto done;
        values += i != OFFSETS && present[i] ? arrays[i].count : 0; /* each count below 2^61: no wrap in 7 */
    }
    char what[4200];
    snprintf(what, sizeof what, "reading %s", dir);
    if (gdn_memory_check(values > SIZE_MAX / 16 ? SIZE_MAX : values * (sizeof(double) + sizeof(real_t)), what))
        goto done;
    for (int i = 0; i < 7; i++) {
        if (!present[i])
            continue; /* h0 and cu_seqlens are optional */
        if ((i == OFFSETS ? npy_read_integers(paths[i], &arrays[i]) : npy_read(paths[i], &arrays[i])) != 0)
            goto done;
    }
    /* q fixes B, T, H, K; v fixes HV and V; cu_seqlens N; every other tensor must agree. */
    if (arrays[Q].ndim != 4) {
        char text[128];
        gdn_set_error("%s: shape %s should be [B, T, H, K]", paths[Q],
                      npy_shape_text(arrays[Q].ndim, arrays[Q].shape, text, sizeof text));
        goto done;
    }
    size_t B = arrays[Q].shape[0], T = arrays[Q].shape[1], H = arrays[Q].shape[2], K = arrays[Q].shape[3];
    size_t HV = arrays[VALUES].ndim == 4 ? arrays[VALUES].shape[2] : 0;
    size_t V = arrays[VALUES].ndim == 4 ? arrays[VALUES].shape[3] : 0;
    size_t qk_shape[4] = {B, T, H, K}, v_shape[4] = {B, T, HV, V}, gate_shape[3] = {B, T, HV};
    if (expect_shape(paths[KEYS], &arrays[KEYS], 4, qk_shape, "as q: [B, T, H, K]") ||
        expect_shape(paths[VALUES], &arrays[VALUES], 4, v_shape, "[B, T, HV, V] with B, T from q"))
        goto done;
    if (B == 0 || T == 0 || H == 0 || K == 0 || V == 0 || HV == 0) {
        gdn_set_error("%s: sizes must be positive (B=%zu T=%zu H=%zu HV=%zu K=%zu V=%zu)", dir, B, T, H, HV, K, V);
        goto done;
    }
    if (HV % H != 0) {
        gdn_set_error("%s: HV=%zu value heads is not a multiple of q's H=%zu key heads", paths[VALUES], HV, H);
        goto done;
    }
    if (expect_shape(paths[G], &arrays[G], 3, gate_shape, "[B, T, HV] from q and v") ||
        expect_shape(paths[BETA], &arrays[BETA], 3, gate_shape, "[B, T, HV] from q and v"))
        goto done;
    *p = (gdn_problem){.B = B, .T = T, .H = H, .K = K, .V = V, .HV = HV, .scale = 1.0 / sqrt((double)K)};
    if (arrays[OFFSETS].data && take_offsets(paths[OFFSETS], &arrays[OFFSETS], p))
        goto done;
    size_t h0_shape[4] = {gdn_sequences(p), HV, K, V};
    if (arrays[H0].data && expect_shape(paths[H0], &arrays[H0], 4, h0_shape,
                                        p->offsets ? "[N, HV, K, V]: N sequences from cu_seqlens"
                                                   : "[B, HV, K, V] from q and v"))
        goto done;
    real_t **tensors[6] = {&p->q, &p->k, &p->v, &p->g, &p->beta, &p->h0};
    const double lows[6] = {-INFINITY, -INFINITY, -INFINITY, -INFINITY, 0.0, -INFINITY};
    const double highs[6] = {INFINITY, INFINITY, INFINITY, 0.0, 1.0, INFINITY};
    for (int i = Q; i <= H0; i++)
        if (arrays[i].data && !(*tensors[i] = take_values(&arrays[i], paths[i], lows[i], highs[i], check_values)))
            goto done;
    status = check_values ? gdn_problem_validate(p, dir) : 0;
done:
    for (int i = 0; i < 7; i++)
        npy_free(&arrays[i]);
    if (status != 0)
        gdn_problem_free(p);
    return status;
}

int gdn_make_dir(const char *dir)
{
    if (mkdir(dir, 0777) != 0 && errno != EEXIST)
        return gdn_set_error("%s: cannot create folder: %s", dir, strerror(errno));
    return 0;
}

void gdn_remove_outputs(const char *dir, const char *const *names)
{
    char path[4096];
    for (; *names; names++)
        if (snprintf(path, sizeof path, "%s/%s.npy", dir, *names) < (int)sizeof path) /* never another file */
            unlink(path);                                                              /* never a folder */
}

int gdn_save_tensor(const char *dir, const char *name, const real_t *data, size_t ndim, const size_t *shape)
{
    char path[4096];
    return npy_path(path, sizeof path, dir, name) || npy_write(path, data, ndim, shape) ? -1 : 0;
}

/* dir/name.npy removed if it is there */
static int remove_stale(const char *dir, const char *name)
{
    char path[4096];
    if (npy_path(path, sizeof path, dir, name))
        return -1;
    if (remove(path) != 0 && errno != ENOENT)
        return gdn_set_error("%s: cannot remove it: %s", path, strerror(errno));
    return 0;
}

static int save_problem_files(const gdn_problem *p, const char *dir)
{
    const size_t HV = gdn_value_heads(p);
    size_t qk[4] = {p->B, p->T, p->H, p->K}, v[4] = {p->B, p->T, HV, p->V}, gate[3] = {p->B, p->T, HV};
    size_t state[4] = {gdn_sequences(p), HV, p->K, p->V};
    if (gdn_make_dir(dir) || gdn_save_tensor(dir, "q", p->q, 4, qk) || gdn_save_tensor(dir, "k", p->k, 4, qk) ||
        gdn_save_tensor(dir, "v", p->v, 4, v) || gdn_save_tensor(dir, "g", p->g, 3, gate) ||
        gdn_save_tensor(dir, "beta", p->beta, 3, gate) || (p->h0 && gdn_save_tensor(dir, "h0", p->h0, 4, state)))
        return -1;
    /* an optional file this problem does not have goes: left from an earlier problem in the same
       folder, it would give the next --in an h0 or sequences this one lacks */
    if ((!p->h0 && remove_stale(dir, "h0")) || (!p->offsets && remove_stale(dir, "cu_seqlens")))
        return -1;
    if (p->offsets) {
        int64_t *offsets = malloc((p->sequences + 1) * sizeof *offsets);
        char path[4096];
        if (!offsets)
            return gdn_set_error("out of memory");
        for (size_t n = 0; n <= p->sequences; n++)
            offsets[n] = (int64_t)p->offsets[n];
        int status = npy_path(path, sizeof path, dir, "cu_seqlens") || npy_write_int64(path, offsets, p->sequences + 1) ? -1 : 0;
        free(offsets);
        return status;
    }
    return 0;
}

/* On a failed write (a full disk, say) the files written before it go too: a folder never
 * holds part of a problem that a later --in would read as a whole one. */
int gdn_problem_save(const gdn_problem *p, const char *dir)
{
    static const char *const inputs[] = {"q", "k", "v", "g", "beta", "h0", "cu_seqlens", NULL};
    if (save_problem_files(p, dir) == 0)
        return 0;
    gdn_remove_outputs(dir, inputs);
    return -1;
}

/* Values of one tensor must be finite and within [low, high]; a bad one is named by its file,
 * its flat index and, for per-token tensors, its (b, t, h). */
static int check_values(const gdn_problem *p, const char *dir, const char *name, const real_t *values, size_t count,
                        size_t per_token, size_t heads, double low, double high)
{
    for (size_t i = 0; i < count; i++) {
        double x = values[i];
        if (isfinite(x) && x >= low && x <= high)
            continue;
        char where[96] = "";
        if (per_token) {
            size_t token = i / per_token;
            snprintf(where, sizeof where, " (b=%zu, t=%zu, h=%zu)", token / (p->T * heads), token / heads % p->T,
                     token % heads);
        }
        if (!isfinite(x))
            return gdn_set_error("%s%s%s.npy: element %zu%s is %g; inputs must be finite", dir ? dir : "",
                                 dir ? "/" : "", name, i, where, x);
        return gdn_set_error("%s%s%s.npy: element %zu%s is %.*g, outside [%g, %g]", dir ? dir : "", dir ? "/" : "",
                             name, i, where, REAL_DIGITS, x, low, high);
    }
    return 0;
}

int gdn_problem_validate(const gdn_problem *p, const char *dir)
{
    const size_t key_tokens = gdn_key_tokens(p), tokens = gdn_tokens(p), H = p->H, HV = gdn_value_heads(p);
    if (check_values(p, dir, "q", p->q, key_tokens * p->K, p->K, H, -INFINITY, INFINITY) ||
        check_values(p, dir, "k", p->k, key_tokens * p->K, p->K, H, -INFINITY, INFINITY) ||
        check_values(p, dir, "v", p->v, tokens * p->V, p->V, HV, -INFINITY, INFINITY) ||
        check_values(p, dir, "g", p->g, tokens, 1, HV, -INFINITY, 0.0) ||
        check_values(p, dir, "beta", p->beta, tokens, 1, HV, 0.0, 1.0) ||
        (p->h0 && check_values(p, dir, "h0", p->h0, gdn_state_count(p), 0, 0, -INFINITY, INFINITY)))
        return -1;
    return 0;
}

void gdn_initial_state(const gdn_problem *p, size_t head, real_t *S)
{
    size_t count = p->K * p->V;
    if (p->h0)
        memcpy(S, p->h0 + head * count, count * sizeof(real_t));
    else
        memset(S, 0, count * sizeof(real_t));
}

int gdn_result_alloc(gdn_result *r, const gdn_problem *p)
{
    r->o = alloc_values(gdn_tokens(p) * p->V, "o");
    r->ht = r->o ? alloc_values(gdn_state_count(p), "ht") : NULL;
    if (!r->ht) {
        gdn_result_free(r);
        return -1;
    }
    return 0;
}

void gdn_result_free(gdn_result *r)
{
    free(r->o);
    free(r->ht);
    r->o = r->ht = NULL;
}

void gdn_result_poison(gdn_result *r, const gdn_problem *p)
{
    for (size_t i = 0; i < gdn_tokens(p) * p->V; i++)
        r->o[i] = (real_t)NAN;
    for (size_t i = 0; i < gdn_state_count(p); i++)
        r->ht[i] = (real_t)NAN;
}

int gdn_result_save(const gdn_result *r, const gdn_problem *p, const char *dir)
{
    const size_t HV = gdn_value_heads(p);
    size_t o_shape[4] = {p->B, p->T, HV, p->V}, state[4] = {gdn_sequences(p), HV, p->K, p->V};
    if (gdn_make_dir(dir))
        return -1;
    if (gdn_save_tensor(dir, "o", r->o, 4, o_shape) || gdn_save_tensor(dir, "ht", r->ht, 4, state)) {
        /* npy_write removed the file it failed on; o.npy may be whole, but alone */
        gdn_remove_outputs(dir, (const char *const[]){"o", "ht", NULL});
        return -1;
    }
    return 0;
}

gdn_input_extremes gdn_problem_extremes(const gdn_problem *p)
{
    gdn_input_extremes e = {0, 0, 0, 0};
    const real_t *tensors[4] = {p->q, p->k, p->v, p->h0};
    size_t counts[4] = {gdn_key_tokens(p) * p->K, gdn_key_tokens(p) * p->K, gdn_tokens(p) * p->V,
                        p->h0 ? gdn_state_count(p) : 0};
    for (int t = 0; t < 4; t++)
        for (size_t i = 0; i < counts[t]; i++) {
            double x = fabs((double)tensors[t][i]);
            if (!isfinite(x))
                e.non_finite = 1;
            else if (x > e.largest)
                e.largest = x;
        }
    for (size_t token = 0; token < gdn_tokens(p); token++) {
        if (isnan(p->g[token]) || p->g[token] == INFINITY || !isfinite(p->beta[token])) /* g = -inf: alpha = 0 */
            e.non_finite = 1;
        if (p->g[token] == -INFINITY)
            e.gate_minus_inf = 1;
        const real_t *k = p->k + gdn_key_token(p, token / gdn_value_heads(p), token % gdn_value_heads(p)) * p->K;
        double norm = 0; /* |k|^2 in double: a float key of 1e20 squares past float's range */
        for (size_t c = 0; c < p->K; c++)
            norm += (double)k[c] * k[c];
        double gain = (double)p->beta[token] * norm;
        if (gain > e.key_gain) /* NaN never is; Inf, from finite double keys past 1e154, is */
            e.key_gain = gain;
    }
    return e;
}

uint64_t gdn_result_first_non_finite(const gdn_problem *p, const gdn_result *r, size_t first_token, size_t T_whole,
                                     int with_ht)
{
    const size_t o_count = gdn_tokens(p) * p->V, states = gdn_state_count(p), HV = gdn_value_heads(p);
    for (size_t i = 0; i < o_count; i++)
        if (!isfinite(r->o[i])) {
            size_t token = i / p->V, b = token / (p->T * HV), t = token / HV % p->T, h = token % HV;
            return (((uint64_t)b * T_whole + first_token + t) * HV + h) * p->V + i % p->V;
        }
    for (size_t i = 0; with_ht && i < states; i++)
        if (!isfinite(r->ht[i]))
            return (uint64_t)p->B * T_whole * HV * p->V + i;
    return GDN_ALL_FINITE;
}

int gdn_non_finite_error(const gdn_problem *p, const gdn_result *r, size_t first_token, size_t T_whole,
                         uint64_t position, gdn_input_extremes e)
{
    const uint64_t HV = gdn_value_heads(p), o_whole = (uint64_t)p->B * T_whole * HV * p->V;
    char where[128], cause[256];
    double value;
    if (position < o_whole) {
        uint64_t token = position / p->V, column = position % p->V, h = token % HV, t = token / HV % T_whole,
                 b = token / HV / T_whole;
        value = r->o[((b * p->T + (t - first_token)) * HV + h) * p->V + column];
        snprintf(where, sizeof where, "o at (b=%llu, t=%llu, h=%llu, column %llu)", (unsigned long long)b,
                 (unsigned long long)t, (unsigned long long)h, (unsigned long long)column);
    } else {
        uint64_t i = position - o_whole, column = i % p->V, row = i / p->V % p->K, head = i / p->V / p->K;
        value = r->ht[i];
        snprintf(where, sizeof where, "ht at (%s=%llu, h=%llu, row %llu, column %llu)", p->offsets ? "n" : "b",
                 (unsigned long long)(head / HV), (unsigned long long)(head % HV), (unsigned long long)row,
                 (unsigned long long)column);
    }
    /* The causes, most certain first. Where every beta |k|^2 <= 2, each I - beta k k^T has its
     * eigenvalues in [-1, 1] and alpha <= 1: the state grows by at most beta |k| |v| <= sqrt(2) |v|
     * a token, and for inputs of magnitude at most L >= 1, |o| = scale |h^T q| stays below
     * 2 scale L^2 (T + 1) K V (the bound below, times 2). Only near it can finite inputs overflow
     * a correct stage; a 16th of the range leaves room for a stage's intermediate sums. */
    double largest = e.largest > 1 ? e.largest * e.largest : e.largest;
    double bound = largest * (double)(T_whole + 1) * (double)p->K * (double)p->V * (p->scale > 1 ? p->scale : 1);
    const double real_max = sizeof(real_t) == sizeof(float) ? FLT_MAX : DBL_MAX;
    if (e.non_finite > 0)
        snprintf(cause, sizeof cause, "an input is NaN or Inf itself (--no-input-check skipped the check that "
                                      "refuses it)");
    else if (e.gate_minus_inf > 0)
        snprintf(cause, sizeof cause, "a gate g is -inf (--no-input-check skipped the check that refuses it): the "
                                      "chunked forms subtract cumulative gates, and -inf - (-inf) is NaN");
    else if (e.key_gain > 2)
        snprintf(cause, sizeof cause, "from finite inputs: beta |k|^2 reaches %.1e > 2, so I - beta k k^T grows the "
                                      "state every token until %s overflows; keys are meant to have unit length: "
                                      "scale k down", e.key_gain, REAL_NAME);
    else if (bound > real_max / 16)
        snprintf(cause, sizeof cause, "from finite inputs: values as large as %.1e overflow the %s state: scale q, "
                                      "k, v down", e.largest, REAL_NAME);
    else
        snprintf(cause, sizeof cause, "from finite inputs of moderate size (largest |value| %.1e, beta |k|^2 at most "
                                      "%.2g): a fault of the stage, not of its inputs", e.largest, e.key_gain);
    return gdn_set_error("%s is %s, %s", where, isnan(value) ? "NaN" : value > 0 ? "Inf" : "-Inf", cause);
}

int gdn_result_check_finite(const gdn_problem *p, const gdn_result *r)
{
    uint64_t position = gdn_result_first_non_finite(p, r, 0, p->T, 1);
    if (position == GDN_ALL_FINITE)
        return 0;
    return gdn_non_finite_error(p, r, 0, p->T, position, gdn_problem_extremes(p));
}
