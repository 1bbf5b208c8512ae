/* error.h -- one place that remembers why the last operation failed.
 *
 * Library functions in common/ return 0 on success and non-zero on failure, after
 * calling gdn_set_error() with a one-line reason ("q.npy: Fortran order is not
 * supported"). The command-line driver prints it as "error: <reason>" and exits
 * non-zero; the tests assert on the text. Errors only happen during set-up, which
 * is single-threaded, so one static buffer is enough.
 */
#ifndef GDN_ERROR_H
#define GDN_ERROR_H

#if defined(__GNUC__)
#define GDN_PRINTF(f, a) __attribute__((format(printf, f, a)))
#else
#define GDN_PRINTF(f, a)
#endif

#ifdef __cplusplus /* included by the GPU stages (.cu, compiled as C++) */
extern "C" {
#endif

/* Record the reason for a failure; always returns -1 so callers can `return gdn_set_error(...)`. */
int gdn_set_error(const char *format, ...) GDN_PRINTF(1, 2);
const char *gdn_last_error(void);

#ifdef __cplusplus
}
#endif

#endif
