#!/usr/bin/env python3
"""kernel_times.py -- the GPU chunked stages' kernels' times (05's GPU twin, 06, 07) from `ncu --csv --metrics gpu__time_duration.sum`.

    ncu --csv --metrics gpu__time_duration.sum BIN ARGS --reps 1 | python3 plots/kernel_times.py

Prints "prepare fold scan chain outputs" in microseconds, the first launch of each (the
warm-up pass); "-" for a kernel that did not run (P = 1 has no fold and no scan; where 06's
chain blocks have output warps, the chain makes o and kernel 3 does not run).
"""
import csv
import sys

SCALE = {"ns": 1e-3, "nsecond": 1e-3, "us": 1.0, "usecond": 1.0, "ms": 1e3, "msecond": 1e3}


def kind(name):
    if "prepare_chunks" in name:
        return "prepare"
    if "scan_summaries" in name or "scan_on_tensor_cores" in name:  # 04's scan kernel; 07's (and 08's)
        return "scan"
    if "chunk_states_outputs" in name:  # 06's chain block with output warps: the chain and kernel 3's work
        return "chain"
    if "chunk_outputs" in name:
        return "outputs"
    if "chunk_states" in name:  # 06 and 07: chunk_states_kernel<PRECISE, STAGED, Columns, NTILES>, chunk_states_from_values_kernel<STAGED, Columns, NTILES>; 05: <COLUMNS>
        return "fold" if "folded_columns" in name else "chain"
    return None


def main():
    rows = [row for row in csv.reader(sys.stdin) if row]
    header = next((row for row in rows if "Kernel Name" in row and "Metric Value" in row), None)
    first = {}
    if header:
        name, unit, value, metric = (header.index(c) for c in ("Kernel Name", "Metric Unit", "Metric Value", "Metric Name"))
        for row in rows:
            if len(row) == len(header) and row[metric] == "gpu__time_duration.sum" and kind(row[name]):
                first.setdefault(kind(row[name]), float(row[value].replace(",", "")) * SCALE.get(row[unit], 1.0))
    print(" ".join("%.1f" % first[k] if k in first else "-" for k in ("prepare", "fold", "scan", "chain", "outputs")))


if __name__ == "__main__":
    sys.exit(main())
