#include "npy.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "error.h"

static const char npy_magic[6] = {'\x93', 'N', 'U', 'M', 'P', 'Y'};

static int host_is_little_endian(void)
{
    const uint16_t one = 1;
    return *(const unsigned char *)&one == 1;
}

int npy_path(char *path, size_t size, const char *dir, const char *name)
{
    int length = snprintf(path, size, "%s/%s.npy", dir, name);
    if (length < 0 || (size_t)length >= size) /* a shortened path would name another file */
        return gdn_set_error("%.40s.../%s.npy: the path is longer than %zu bytes", dir, name, size - 1);
    return 0;
}

int npy_present(const char *path, int *present)
{
    struct stat status;
    *present = lstat(path, &status) == 0; /* a link counts even where it leads nowhere: reading it names the fault */
    if (!*present && errno != ENOENT)
        return gdn_set_error("%s: cannot look for it: %s", path, strerror(errno));
    return 0;
}

/* The file for reading, if it is a regular file: the open does not wait (a FIFO would block it
 * until a writer came), and a folder or a device is refused by name. */
static FILE *open_regular(const char *path)
{
    int descriptor = open(path, O_RDONLY | O_NONBLOCK);
    if (descriptor < 0) {
        gdn_set_error("%s: cannot open: %s", path, strerror(errno));
        return NULL;
    }
    struct stat status;
    FILE *file = NULL;
    if (fstat(descriptor, &status) != 0)
        gdn_set_error("%s: cannot read its status: %s", path, strerror(errno));
    else if (!S_ISREG(status.st_mode))
        gdn_set_error("%s: not a regular file", path);
    else if (!(file = fdopen(descriptor, "rb")))
        gdn_set_error("%s: cannot open: %s", path, strerror(errno));
    if (!file)
        close(descriptor);
    return file;
}

const char *npy_shape_text(size_t ndim, const size_t *shape, char *buffer, size_t size)
{
    size_t used = (size_t)snprintf(buffer, size, "(");
    for (size_t d = 0; d < ndim && used < size; d++)
        used += (size_t)snprintf(buffer + used, size - used, d ? ", %zu" : "%zu", shape[d]);
    if (used < size)
        snprintf(buffer + used, size - used, ndim == 1 ? ",)" : ")");
    return buffer;
}

/* Find 'key': in the header dict and return a pointer just past the colon and spaces. */
static const char *skip_spaces(const char *at)
{
    while (*at == ' ')
        at++;
    return at;
}

/* shape's tuple from at (just past its '('): the dimensions into out, *rest just past ')' */
static int parse_shape(const char *path, const char *at, npy_array *out, const char **rest)
{
    out->ndim = 0;
    out->count = 1;
    for (;;) {
        at = skip_spaces(at);
        if (*at == ')')
            break;
        if (!isdigit((unsigned char)*at))
            return gdn_set_error("%s: malformed header (bad number in 'shape')", path);
        if (out->ndim == NPY_MAX_DIMS)
            return gdn_set_error("%s: more than %d dimensions", path, NPY_MAX_DIMS);
        errno = 0;
        char *end;
        unsigned long long dim = strtoull(at, &end, 10);
        if (errno == ERANGE || dim > SIZE_MAX)
            return gdn_set_error("%s: a dimension in 'shape' is too large", path);
        out->shape[out->ndim++] = (size_t)dim;
        if (dim != 0 && out->count > SIZE_MAX / 8 / dim)
            return gdn_set_error("%s: shape is too large to address", path);
        out->count *= (size_t)dim;
        at = skip_spaces(end);
        if (*at == ',')
            at++;
        else if (*at != ')')
            return gdn_set_error("%s: malformed header (bad separator in 'shape')", path);
    }
    *rest = at + 1;
    return 0;
}

/* Parse the dict of a .npy header: dtype size (4 or 8), whether it is an integer type
 * ('<i4', '<i8': only when integers is set), and shape. The whole dict is read, as NumPy
 * reads it: exactly the keys 'descr', 'fortran_order' and 'shape', each once, then '}' and
 * nothing but the padding's spaces and newline. A key given twice, a word that only starts
 * with False, or text after the dict is malformed, not guessed at. */
static int parse_header(const char *path, const char *header, int integers, size_t *item_size, int *integer,
                        npy_array *out)
{
    static const char *const keys[3] = {"descr", "fortran_order", "shape"};
    char dtype[16] = "";
    int seen[3] = {0, 0, 0}, fortran = 0;
    const char *at = skip_spaces(header);
    if (*at != '{')
        return gdn_set_error("%s: malformed header (needs a dict with 'descr', 'fortran_order' and 'shape')", path);
    at = skip_spaces(at + 1);
    while (*at != '}') {
        char key[32];
        int length = 0, which = -1;
        if (*at != '\'' || sscanf(at, "'%31[^']'%n", key, &length) != 1 || length == 0)
            return gdn_set_error("%s: malformed header (a key of the dict is not a quoted name)", path);
        for (int k = 0; k < 3; k++)
            if (strcmp(key, keys[k]) == 0)
                which = k;
        if (which < 0 || seen[which]++)
            return gdn_set_error("%s: malformed header (key '%s' %s)", path, key, which < 0 ? "unknown" : "given twice");
        at = skip_spaces(at + length);
        if (*at != ':')
            return gdn_set_error("%s: malformed header (no ':' after '%s')", path, key);
        at = skip_spaces(at + 1);
        if (which == 0) {
            if (*at != '\'' || sscanf(at, "'%15[^']'%n", dtype, &length) != 1 || length == 0)
                return gdn_set_error("%s: malformed header ('descr' must be a quoted dtype)", path);
            at += length;
        } else if (which == 1) {
            const int is_true = strncmp(at, "True", 4) == 0, is_false = strncmp(at, "False", 5) == 0;
            const char *after = at + (is_true ? 4 : 5);
            if ((!is_true && !is_false) || isalnum((unsigned char)*after) || *after == '_')
                return gdn_set_error("%s: malformed header ('fortran_order' must be True or False)", path);
            fortran = is_true;
            at = after;
        } else {
            if (*at != '(')
                return gdn_set_error("%s: malformed header ('shape' must be a tuple)", path);
            if (parse_shape(path, at + 1, out, &at))
                return -1;
        }
        at = skip_spaces(at);
        if (*at == ',')
            at = skip_spaces(at + 1);
        else if (*at != '}')
            return gdn_set_error("%s: malformed header (no ',' or '}' after '%s')", path, key);
    }
    for (at++; *at == ' ' || *at == '\n'; at++)
        ;
    if (*at != '\0')
        return gdn_set_error("%s: malformed header (text after the dict)", path);
    if (!seen[0] || !seen[1] || !seen[2])
        return gdn_set_error("%s: malformed header (needs a dict with 'descr', 'fortran_order' and 'shape')", path);

    const char *wanted = integers ? "<i" : "<f";
    if (strncmp(dtype, wanted, 2) == 0 && (dtype[2] == '4' || dtype[2] == '8') && dtype[3] == '\0') {
        *item_size = dtype[2] == '4' ? 4 : 8;
        *integer = integers;
    } else {
        return gdn_set_error("%s: dtype '%s' is not supported (want %s, little-endian)", path, dtype,
                             integers ? "'<i4' int32 or '<i8' int64" : "'<f4' float32 or '<f8' float64");
    }
    if (fortran)
        return gdn_set_error("%s: Fortran order is not supported (save a C-ordered array: np.ascontiguousarray)", path);
    return 0;
}

static int read_stream(FILE *file, const char *path, int integers, int header_only, npy_array *out)
{
    memset(out, 0, sizeof *out);
    if (!host_is_little_endian())
        return gdn_set_error("%s: this reader needs a little-endian host", path);
    int status = -1;
    char *header = NULL;
    unsigned char prefix[10];
    size_t prefix_size = fread(prefix, 1, 10, file);
    if (prefix_size < 10 || memcmp(prefix, npy_magic, 6) != 0) {
        gdn_set_error("%s: not a .npy file (no \\x93NUMPY magic)", path);
        goto done;
    }
    unsigned major = prefix[6];
    size_t header_size;
    long data_offset;
    if (major == 1) {
        header_size = (size_t)prefix[8] | (size_t)prefix[9] << 8;
        data_offset = 10;
    } else if (major == 2 || major == 3) {
        unsigned char extra[2];
        if (fread(extra, 1, 2, file) != 2) {
            gdn_set_error("%s: truncated header", path);
            goto done;
        }
        header_size = (size_t)prefix[8] | (size_t)prefix[9] << 8 | (size_t)extra[0] << 16 | (size_t)extra[1] << 24;
        data_offset = 12;
    } else {
        gdn_set_error("%s: .npy version %u is not supported (1, 2 or 3)", path, major);
        goto done;
    }
    if (header_size > (1u << 20)) {
        gdn_set_error("%s: malformed header (claims %zu bytes)", path, header_size);
        goto done;
    }
    header = malloc(header_size + 1);
    if (!header) {
        gdn_set_error("%s: out of memory for the header", path);
        goto done;
    }
    if (fread(header, 1, header_size, file) != header_size) {
        gdn_set_error("%s: truncated header", path);
        goto done;
    }
    header[header_size] = '\0';
    data_offset += (long)header_size;

    size_t item_size = 0;
    int integer = 0;
    if (parse_header(path, header, integers, &item_size, &integer, out) != 0)
        goto done;

    /* The file must hold exactly the data its shape says: no less (truncated), no more. */
    if (fseek(file, 0, SEEK_END) != 0) {
        gdn_set_error("%s: cannot seek: %s", path, strerror(errno));
        goto done;
    }
    long file_size = ftell(file);
    size_t data_bytes = out->count * item_size;
    size_t present = file_size > data_offset ? (size_t)(file_size - data_offset) : 0;
    if (present < data_bytes) {
        char text[128];
        gdn_set_error("%s: truncated: shape %s needs %zu data bytes, the file has %zu", path,
                      npy_shape_text(out->ndim, out->shape, text, sizeof text), data_bytes, present);
        goto done;
    }
    if (present > data_bytes) {
        gdn_set_error("%s: %zu bytes after the data its shape says", path, present - data_bytes);
        goto done;
    }
    if (header_only) { /* shape and count, checked against the file's size; no data */
        status = 0;
        goto done;
    }
    if (fseek(file, data_offset, SEEK_SET) != 0) {
        gdn_set_error("%s: cannot seek: %s", path, strerror(errno));
        goto done;
    }

    out->data = malloc(out->count ? out->count * sizeof(double) : 1);
    if (!out->data) {
        gdn_set_error("%s: out of memory (%zu bytes)", path, out->count * sizeof(double));
        goto done;
    }
    if (integer) {
        /* int32 or int64 in blocks, each value kept only where a double holds it exactly */
        unsigned char block[4096 * 8];
        for (size_t start = 0; start < out->count; start += 4096) {
            size_t n = out->count - start < 4096 ? out->count - start : 4096;
            if (fread(block, item_size, n, file) != n) {
                gdn_set_error("%s: read error", path);
                goto done;
            }
            for (size_t i = 0; i < n; i++) {
                int64_t value;
                int32_t narrow;
                if (item_size == 8)
                    memcpy(&value, block + 8 * i, 8);
                else
                    memcpy(&narrow, block + 4 * i, 4), value = narrow;
                if (value > ((int64_t)1 << 53) || value < -((int64_t)1 << 53)) {
                    gdn_set_error("%s: element %zu (%lld) is too large", path, start + i, (long long)value);
                    goto done;
                }
                out->data[start + i] = (double)value;
            }
        }
    } else if (item_size == 8) {
        if (fread(out->data, 8, out->count, file) != out->count) {
            gdn_set_error("%s: read error", path);
            goto done;
        }
    } else {
        /* read float32 in blocks and widen */
        float block[4096];
        for (size_t start = 0; start < out->count; start += 4096) {
            size_t n = out->count - start < 4096 ? out->count - start : 4096;
            if (fread(block, 4, n, file) != n) {
                gdn_set_error("%s: read error", path);
                goto done;
            }
            for (size_t i = 0; i < n; i++)
                out->data[start + i] = block[i];
        }
    }
    status = 0;
done:
    free(header);
    if (status != 0)
        npy_free(out);
    return status;
}

int npy_read_stream(FILE *file, const char *path, npy_array *out) { return read_stream(file, path, 0, 0, out); }

/* the file at path, opened as a regular file only, read by read_stream */
static int read_path(const char *path, int integers, int header_only, npy_array *out)
{
    memset(out, 0, sizeof *out);
    FILE *file = open_regular(path);
    if (!file)
        return -1;
    int status = read_stream(file, path, integers, header_only, out);
    fclose(file);
    return status;
}

int npy_read(const char *path, npy_array *out) { return read_path(path, 0, 0, out); }
int npy_read_header(const char *path, npy_array *out) { return read_path(path, 0, 1, out); }
int npy_read_integers(const char *path, npy_array *out) { return read_path(path, 1, 0, out); }

void npy_free(npy_array *array)
{
    free(array->data);
    array->data = NULL;
}

static size_t header_of(const char *descr, unsigned char *bytes, size_t ndim, const size_t *shape)
{
    char shape_text[256];
    npy_shape_text(ndim, shape, shape_text, sizeof shape_text);
    char *header = (char *)bytes + 10;
    int length = snprintf(header, NPY_HEADER_MAX - 10, "{'descr': '%s', 'fortran_order': False, 'shape': %s, }",
                          descr, shape_text);
    /* NumPy pads magic + version + length + header + '\n' to a multiple of 64 bytes */
    size_t total = 10 + (size_t)length + 1;
    size_t padded = (total + 63) / 64 * 64;
    size_t header_size = padded - 10;
    memset(header + length, ' ', header_size - (size_t)length - 1);
    header[header_size - 1] = '\n';
    const unsigned char prefix[10] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, (unsigned char)(header_size & 0xff),
                                      (unsigned char)(header_size >> 8)};
    memcpy(bytes, prefix, 10);
    return padded;
}

size_t npy_header(unsigned char *bytes, size_t ndim, const size_t *shape)
{
    return header_of(sizeof(real_t) == 4 ? "<f4" : "<f8", bytes, ndim, shape);
}

static int write_file(const char *path, const char *descr, const void *data, size_t item_size, size_t ndim,
                      const size_t *shape)
{
    unsigned char header[NPY_HEADER_MAX];
    size_t header_bytes = header_of(descr, header, ndim, shape);
    size_t count = 1;
    for (size_t d = 0; d < ndim; d++)
        count *= shape[d];

    FILE *file = fopen(path, "wb");
    if (!file)
        return gdn_set_error("%s: cannot create: %s", path, strerror(errno));
    int ok = fwrite(header, 1, header_bytes, file) == header_bytes && fwrite(data, item_size, count, file) == count;
    if (fclose(file) != 0)
        ok = 0;
    if (!ok) { /* no partial file is left behind to pass for a result */
        gdn_set_error("%s: write failed: %s", path, strerror(errno));
        remove(path);
        return -1;
    }
    return 0;
}

int npy_write(const char *path, const real_t *data, size_t ndim, const size_t *shape)
{
    return write_file(path, sizeof(real_t) == 4 ? "<f4" : "<f8", data, sizeof(real_t), ndim, shape);
}

int npy_write_int64(const char *path, const int64_t *data, size_t count)
{
    return write_file(path, "<i8", data, sizeof(int64_t), 1, &count);
}

int npy_read_shaped(const char *path, size_t ndim, const size_t *shape, const char *meaning, npy_array *out)
{
    if (npy_read(path, out))
        return -1;
    int same = out->ndim == ndim;
    for (size_t d = 0; same && d < ndim; d++)
        same = out->shape[d] == shape[d];
    if (!same) {
        char got[128], want[128];
        gdn_set_error("%s: shape %s does not match the problem's %s (%s)", path,
                      npy_shape_text(out->ndim, out->shape, got, sizeof got), npy_shape_text(ndim, shape, want, sizeof want),
                      meaning);
        npy_free(out);
        return -1;
    }
    return 0;
}
