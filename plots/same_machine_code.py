#!/usr/bin/env python3
"""same_machine_code.py -- do two builds of a CUDA file give each kernel the same machine code?

    nvcc -O3 -std=c++20 -arch=sm_90a -cubin FILE.cu -o before.cubin     (in the old tree)
    nvcc -O3 -std=c++20 -arch=sm_90a -cubin FILE.cu -o after.cubin      (in the new tree)
    python3 plots/same_machine_code.py before.cubin after.cubin

Prints, for each kernel of the first cubin, "same" where the second has the same bytes in the
kernel's .text section, else how many of its 16-byte instructions differ. A kernel whose name
the second cubin lacks (its template's parameters renamed) is matched by its bytes: "same as"
the second's kernel with those bytes, else "missing". Same
machine code runs at the same speed: a change meant for one kernel can be checked to leave the
others alone with no GPU at all (docs/06 checks kernel changes so). A cubin is an ELF file; this
reads its section headers and needs nothing else (no cuobjdump).
"""
import struct
import sys


def kernel_sections(path):
    """{kernel name: bytes of its .text section} of an ELF64 cubin"""
    data = open(path, "rb").read()
    if data[:4] != b"\x7fELF" or data[4] != 2:
        sys.exit("same_machine_code.py: %s is not a 64-bit ELF file (a cubin from nvcc -cubin)" % path)
    section_offset = struct.unpack_from("<Q", data, 0x28)[0]
    entry_size, count, names_index = struct.unpack_from("<HHH", data, 0x3A)
    headers = [struct.unpack_from("<IIQQQQIIQQ", data, section_offset + i * entry_size) for i in range(count)]
    names_at = headers[names_index][4]  # the section-name string table's file offset
    sections = {}
    for name_offset, _, _, _, offset, size, *_ in headers:
        start = names_at + name_offset
        name = data[start:data.index(b"\0", start)].decode()
        if name.startswith(".text."):
            sections[name[len(".text."):]] = data[offset:offset + size]
    return sections


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: same_machine_code.py BEFORE.cubin AFTER.cubin")
    before, after = kernel_sections(sys.argv[1]), kernel_sections(sys.argv[2])
    for name, code in before.items():
        other = after.get(name)
        if other is None:
            twins = [twin for twin, twin_code in after.items() if twin_code == code]
            verdict = "same as %s" % twins[0] if twins else "missing"
        elif other == code:
            verdict = "same"
        else:
            differing = sum(code[i:i + 16] != other[i:i + 16] for i in range(0, max(len(code), len(other)), 16))
            verdict = "differs: %d of %d instructions" % (differing, len(code) // 16)
        print("%s  %s" % (verdict, name))


if __name__ == "__main__":
    main()
