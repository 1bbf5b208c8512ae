#!/bin/sh
# diffs.sh -- the lesson of each stage as a diff against the stage before it.
#   diffs.sh write OUT STAGE...   OUT/NN_from_MM.diff for each consecutive pair of stages
#   diffs.sh show FROM TO         print the diff of steps/FROM/*.c against steps/TO/*.c
# The diffs compare each stage's source file (steps/NN_name/name.c); docs/ chapters include
# them through common/refresh_docs.sh, so the text shown there is always the code's.
set -eu
source_of() { echo "steps/$1/$(echo "$1" | sed 's/^[0-9]*_//').c"; }
show() {
    # diff exits 1 when the files differ, which is the point; labels without timestamps
    diff -u --label "$(source_of "$1")" --label "$(source_of "$2")" "$(source_of "$1")" "$(source_of "$2")" || true
}
case "${1:-}" in
write)
    out=$2
    shift 2
    mkdir -p "$out"
    previous=""
    for stage in "$@"; do
        if [ -n "$previous" ]; then
            file="$out/$(echo "$stage" | cut -c1-2)_from_$(echo "$previous" | cut -c1-2).diff"
            show "$previous" "$stage" >"$file"
            echo "wrote $file: +$(grep -c '^+[^+]' "$file") -$(grep -c '^-[^-]' "$file") lines"
        fi
        previous=$stage
    done
    ;;
show) show "$2" "$3" ;;
*) echo "usage: diffs.sh write OUT STAGE... | diffs.sh show FROM TO" >&2; exit 2 ;;
esac
