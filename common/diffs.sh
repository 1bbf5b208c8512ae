#!/bin/sh
# diffs.sh OUT STAGE... -- the lesson of each stage as a diff against the stage before it:
# OUT/NN_from_MM.diff compares steps/MM_*/*.c with steps/NN_*/*.c (sources and headers).
set -eu
out=$1
shift
mkdir -p "$out"
previous=""
for stage in "$@"; do
    if [ -n "$previous" ]; then
        from=$(echo "$previous" | cut -c1-2)
        to=$(echo "$stage" | cut -c1-2)
        file="$out/${to}_from_${from}.diff"
        # diff exits 1 when files differ, which is the point
        diff -u -N "steps/$previous/$(echo "$previous" | sed 's/^[0-9]*_//').c" \
            "steps/$stage/$(echo "$stage" | sed 's/^[0-9]*_//').c" >"$file" || true
        echo "wrote $file ($(grep -c '^[-+][^-+]' "$file") changed lines)"
    fi
    previous=$stage
done
