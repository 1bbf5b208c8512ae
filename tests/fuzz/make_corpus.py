#!/usr/bin/env python3
"""make_corpus.py -- write the seed corpus of the fuzz targets (tests/fuzz/corpus/).

Valid files NumPy writes and broken ones, by hand: every refusal the reader knows, so the
fuzzer starts from inputs that reach each branch. Deterministic; the files are committed and
tests/test_fuzz_corpus.c reads every one of them in `make test`.
    python3 tests/fuzz/make_corpus.py
"""
import os
import struct

here = os.path.dirname(os.path.abspath(__file__))
npy_dir, cli_dir = os.path.join(here, "corpus", "npy"), os.path.join(here, "corpus", "cli")


def npy(name, header, data=b"", major=1, magic=b"\x93NUMPY"):
    header = header.encode() if isinstance(header, str) else header
    prefix = magic + bytes([major, 0])
    size = struct.pack("<H", len(header)) if major == 1 else struct.pack("<I", len(header))
    with open(os.path.join(npy_dir, name), "wb") as f:
        f.write(prefix + size + header + data)


def padded(d, major=1):
    text = str(d) if isinstance(d, str) else d
    fixed = 10 if major == 1 else 12
    total = (fixed + len(text) + 1 + 63) // 64 * 64
    return text + " " * (total - fixed - len(text) - 1) + "\n"


f4 = struct.pack("<6f", 1, 2, 3, 4, 5, 6)
f8 = struct.pack("<6d", 1, 2, 3, 4, 5, 6)
npy("valid_f4_v1.npy", padded("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }"), f4)
npy("valid_f8_v2.npy", padded("{'descr': '<f8', 'fortran_order': False, 'shape': (6,), }", 2), f8, major=2)
npy("valid_f4_v3.npy", padded("{'descr': '<f4', 'fortran_order': False, 'shape': (1, 2, 3), }", 3), f4, major=3)
npy("valid_scalar.npy", padded("{'descr': '<f4', 'fortran_order': False, 'shape': (), }"), f4[:4])
npy("valid_empty.npy", padded("{'descr': '<f4', 'fortran_order': False, 'shape': (0, 3), }"))
npy("bad_magic.npy", padded("{'descr': '<f4', 'fortran_order': False, 'shape': (6,), }"), f4, magic=b"\x93NUMPZ")
npy("bad_version.npy", padded("{'descr': '<f4', 'fortran_order': False, 'shape': (6,), }"), f4, major=4)
npy("int_dtype.npy", padded("{'descr': '<i4', 'fortran_order': False, 'shape': (6,), }"), f4)
npy("big_endian.npy", padded("{'descr': '>f4', 'fortran_order': False, 'shape': (6,), }"), f4)
npy("fortran.npy", padded("{'descr': '<f4', 'fortran_order': True, 'shape': (2, 3), }"), f4)
npy("truncated.npy", padded("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 4), }"), f4)
npy("too_long.npy", padded("{'descr': '<f4', 'fortran_order': False, 'shape': (5,), }"), f4)
npy("huge_shape.npy", padded("{'descr': '<f8', 'fortran_order': False, 'shape': (4294967296, 4294967296), }"), f8)
npy("nine_dims.npy", padded("{'descr': '<f4', 'fortran_order': False, 'shape': (1,1,1,1,1,1,1,1,6), }"), f4)
npy("negative_dim.npy", padded("{'descr': '<f4', 'fortran_order': False, 'shape': (-6,), }"), f4)
npy("no_shape.npy", padded("{'descr': '<f4', 'fortran_order': False, }"), f4)
npy("not_a_dict.npy", padded("['descr', '<f4']"), f4)
npy("unterminated.npy", "{'descr': '<f4', 'fortran_order': False, 'shape': (6,", f4)
npy("header_claims_more.npy", b"{'descr'", b"", major=2)
with open(os.path.join(npy_dir, "empty_file.npy"), "wb") as f:
    pass
with open(os.path.join(npy_dir, "magic_only.npy"), "wb") as f:
    f.write(b"\x93NUMPY\x01")

for name, args in {
    "sizes": ["--B", "2", "--T", "77", "--H", "3", "--K", "16", "--V", "8", "--h0"],
    "in_out": ["--in", "/nonexistent", "--out", "/tmp/x", "--check-against", "oracle"],
    "chunk_segments": ["--chunk", "64", "--segments", "7", "--reps", "3", "--threads", "2"],
    "bad_number": ["--T", "1e3"],
    "huge": ["--T", "99999999999999999999"],
    "seed_scale": ["--seed", "18446744073709551615", "--scale", "0.125"],
    "help": ["--help"],
    "missing_value": ["--K"],
    "stray": ["extra"],
    "no_input_check": ["--no-input-check"],
    "twice": ["--check-against", "oracle", "--check-against", "oracle"],
}.items():
    with open(os.path.join(cli_dir, name), "wb") as f:
        f.write(b"\0".join(a.encode() for a in args))
