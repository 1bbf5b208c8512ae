/* npy.h -- NumPy .npy files, the format every problem and result is stored in.
 *
 * Format (numpy.lib.format, versions 1.0, 2.0 and 3.0): the magic "\x93NUMPY", two
 * version bytes, a little-endian header length (2 bytes in 1.0, 4 in 2.0 and 3.0), a
 * Python dict literal {'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }
 * padded with spaces and a newline, then the raw data in C (row-major) order.
 *
 * Read: '<f4' (float32) and '<f8' (float64), C order only; the file must hold exactly
 * the bytes its shape says. Anything else is refused with one line naming the file and
 * the fault (gdn_last_error). Write: the build's precision ('<f4' in float builds,
 * '<f8' in double builds), version 1.0, header padded to 64 bytes as NumPy does.
 * Integer tensors (a packed batch's offsets, cu_seqlens.npy) have their own pair:
 * npy_read_integers reads '<i4' or '<i8', npy_write_int64 writes '<i8'.
 * The host must be little-endian (x86-64 and AArch64 are); npy.c checks at run time.
 */
#ifndef GDN_NPY_H
#define GDN_NPY_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "real.h"

#define NPY_MAX_DIMS 8

typedef struct {
    size_t ndim;
    size_t shape[NPY_MAX_DIMS];
    size_t count;  /* product of shape */
    double *data;  /* values converted to double, count of them; free with npy_free */
} npy_array;

int npy_read(const char *path, npy_array *out);
/* DIR/NAME.npy into path (size bytes), or -1 with gdn_last_error where it does not fit: never a
 * shortened path, which would read or write another file. */
int npy_path(char *path, size_t size, const char *dir, const char *name);
/* Whether an optional file is there (*present): 0, or -1 where the folder cannot be searched.
 * A link that leads nowhere counts as there, so that reading it names the fault. */
int npy_present(const char *path, int *present);
/* The same from an open stream (seekable: fmemopen works); path only names it in messages.
 * The fuzz target (tests/fuzz/) reads from memory this way. */
int npy_read_stream(FILE *file, const char *path, npy_array *out);
void npy_free(npy_array *array);
/* npy_read without the data: shape and count, the header and the file's size checked as npy_read
 * checks them (data stays NULL), so that a reader can count the memory a load will take first. */
int npy_read_header(const char *path, npy_array *out);
/* npy_read, then the shape checked against the problem's `shape` (ndim dimensions): a file of
 * another shape is freed and refused with one line, "PATH: shape (..) does not match the
 * problem's (..) (MEANING)", MEANING saying which tensor's shape it should have been. */
int npy_read_shaped(const char *path, size_t ndim, const size_t *shape, const char *meaning, npy_array *out);
int npy_write(const char *path, const real_t *data, size_t ndim, const size_t *shape);
/* '<i4' or '<i8' only (a float file is refused), each value converted to double: exact, since a
 * value beyond 2^53 in magnitude is refused. */
int npy_read_integers(const char *path, npy_array *out);
/* A one-dimensional '<i8' file of count values. */
int npy_write_int64(const char *path, const int64_t *data, size_t count);
/* The bytes npy_write puts before the data (magic, version, length, padded dict), into
 * bytes[NPY_HEADER_MAX]; returns how many: the data starts at that offset. Stage 08's
 * processes write one file together (MPI-IO) at offsets counted from it. */
#define NPY_HEADER_MAX 512
size_t npy_header(unsigned char *bytes, size_t ndim, const size_t *shape);

/* "(2, 3, 4)" into buffer, for messages. */
const char *npy_shape_text(size_t ndim, const size_t *shape, char *buffer, size_t size);

#endif
