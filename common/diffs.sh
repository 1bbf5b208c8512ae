#!/bin/sh
# diffs.sh -- the lesson of each stage as a diff against the stage before it.
#   diffs.sh write OUT STAGE...   OUT/NN_from_MM.diff for each stage and the one it builds on
#   diffs.sh show FROM TO         print the diff of FROM's source against TO's
#   diffs.sh markdown FROM TO     the same as a Markdown block for docs/: fenced as a diff (so
#                                 that its +, - and # lines are not read as lists and headings),
#                                 and folded under a summary line when it is long
#   diffs.sh steps OUT LIST       stage 06's steps, each a commit (LIST: "step commit" lines):
#                                 OUT/NN_from_MM.diff, each step's change to the stage's source,
#                                 the CUDA headers it includes from common/ and stage 07 (which
#                                 includes 06 and follows its launches; needs a git clone with
#                                 its history)
# A stage's source is steps/NN_name/name.c, or name.cu for a stage that runs only on the GPU
# (06 on); a sub-stage NNx_name (06a_tensor_cores) is name.cu in stage NN's folder. A source
# that includes headers of its own folder ("chain.cuh") is read with them in place (text_of),
# so a stage cut into files is compared as the compiler reads it; so are the headers it takes
# from the folder of the stage it is compared with (06a's "../05_wy_chunked/wy_chunked_solve.cuh"
# against 05, which reads the same file as its own). Each stage is compared with
# the stage before it that has the same kind of source: a CUDA-only stage with the previous
# GPU stage (06a against 05's wy_chunked.cu, 06 against 06a), a C stage with the previous C
# stage (08 against 05). A stage that includes the one before it (07 includes 06's
# warp_specialized.cuh) shows its whole text as the lesson; so does a C stage's GPU twin that
# includes the previous GPU stage (08's context_parallel.cu, NN_cuda_from_MM.diff). docs/
# chapters include the diffs through common/refresh_docs.sh, so the text shown there is
# always the code's.
set -eu
name_of() { echo "$1" | sed 's/^[0-9]*[a-z]*_//'; }
# a stage's folder: steps/NN_name, or for a sub-stage NNx_name (06a_tensor_cores) the folder
# of stage NN, which holds its name.cu beside the stage's own files
folder_of() {
    if [ -d "steps/$1" ]; then echo "steps/$1"; else
        for folder in steps/"$(echo "$1" | cut -c1-2)"_*; do echo "$folder"; done | head -1
    fi
}
gpu_only() { [ ! -f "$(folder_of "$1")/$(name_of "$1").c" ]; }
source_of() { # STAGE KIND (c or cu)
    echo "$(folder_of "$1")/$(name_of "$1").$2"
}
kind_of() { if gpu_only "$1"; then echo cu; else echo c; fi; }
# text_of FILE [FOLDER]: the file, and after each line that includes a header of the same
# folder ("name.cuh"), that header's text, so that a stage cut into files reads as one, in the
# order the compiler reads it; with FOLDER (steps/NN_name), also the headers it includes from
# that folder ("../NN_name/name.cuh"): the stage compared against reads those as its own, and
# code both compile is no lesson of the diff
text_of() {
    while IFS= read -r line || [ -n "$line" ]; do
        printf '%s\n' "$line"
        header=$(printf '%s' "$line" | sed -n 's/^#include "\([a-z_]*\.cuh\)".*/\1/p')
        # the folder from $1 each time: sh has no local variables, and a nested call's would stay
        if [ -n "$header" ] && [ -f "$(dirname "$1")/$header" ]; then
            text_of "$(dirname "$1")/$header" "${2:-}"
        elif [ -n "${2:-}" ]; then
            header=$(printf '%s' "$line" | sed -n "s|^#include \"\.\./$(basename "$2")/\([a-z_]*\.cuh\)\".*|\1|p")
            if [ -n "$header" ] && [ -f "$2/$header" ]; then
                text_of "$2/$header" "$2"
            fi
        fi
    done <"$1"
}
# builds_on STAGE FILE...: one of the files includes STAGE's own source or its header of the
# same name (07 includes 06's warp_specialized.cuh), not merely a header it shares (06 and 05
# share 05's wy_chunked_solve.cuh)
builds_on() {
    base=$1
    shift
    grep -q -E "#include \"../$(basename "$(folder_of "$base")")/$(name_of "$base")\.(c|cu|cuh)\"" "$@"
}
show() { # FROM TO [KIND]: TO's source of KIND (c or cu; default: TO's own kind) against FROM's
    show_kind=${3:-$(kind_of "$2")}
    to=$(source_of "$2" "$show_kind")
    # a stage whose files include the previous stage's builds on it instead of copying it
    # (07 includes 06's headers): its lesson is its whole text, shown as new
    if [ "$(folder_of "$1")" != "$(folder_of "$2")" ] && builds_on "$1" "$(folder_of "$2")"/*."$show_kind"*; then
        text_of "$to" | diff -u --label /dev/null --label "$to" /dev/null - || true
        return
    fi
    # diff exits 1 when the files differ, which is the point; labels without timestamps
    from_text=$(mktemp)
    text_of "$(source_of "$1" "$show_kind")" >"$from_text"
    text_of "$to" "$(folder_of "$1")" | diff -u --label "$(source_of "$1" "$show_kind")" --label "$to" "$from_text" - || true
    rm -f "$from_text"
}
# Diffs longer than this many lines are folded (<details>) in the docs: 06's is two thousand
# lines, which a reader opens on purpose rather than scrolls past
FOLD_LINES=400
markdown() { # FROM TO
    text=$(show "$1" "$2")
    lines=$(printf '%s\n' "$text" | wc -l)
    added=$(printf '%s\n' "$text" | grep -c '^+[^+]' || true)
    removed=$(printf '%s\n' "$text" | grep -c '^-[^-]' || true)
    if [ "$lines" -gt "$FOLD_LINES" ]; then
        printf '<details>\n<summary>The diff: %s lines added, %s removed (click to unfold)</summary>\n\n' "$added" "$removed"
    fi
    # four backticks: a fence the code's own text cannot close
    printf '````diff\n%s\n````\n' "$text"
    if [ "$lines" -gt "$FOLD_LINES" ]; then
        printf '\n</details>\n'
    fi
}
case "${1:-}" in
write)
    out=$2
    shift 2
    mkdir -p "$out"
    previous_c=""
    previous_cu=""
    first_c=""
    previous_backward=""
    for stage in "$@"; do
        kind=$(kind_of "$stage")
        if [ "$kind" = c ]; then previous=$previous_c; else previous=$previous_cu; fi
        # a backward stage builds on the backward stage before it; the first on the forward
        # loop it differentiates (09_backward_loop on 01_naive_loop)
        case "$stage" in *_backward_*) previous=${previous_backward:-$first_c} ;; esac
        if [ -n "$previous" ]; then
            file="$out/${stage%%_*}_from_${previous%%_*}.diff"
            show "$previous" "$stage" >"$file"
            echo "wrote $file: +$(grep -c '^+[^+]' "$file") -$(grep -c '^-[^-]' "$file") lines"
        fi
        # a C stage's GPU twin built on the previous GPU stage (08's context_parallel.cu
        # includes 07's file): its lesson too, NN_cuda_from_MM.diff
        twin=$(source_of "$stage" cu)
        if [ "$kind" = c ] && [ -f "$twin" ] && [ -n "$previous_cu" ] &&
            builds_on "$previous_cu" "$twin"; then
            file="$out/${stage%%_*}_cuda_from_${previous_cu%%_*}.diff"
            show "$previous_cu" "$stage" cu >"$file"
            echo "wrote $file: +$(grep -c '^+[^+]' "$file") -$(grep -c '^-[^-]' "$file") lines"
        fi
        # the stage a later stage of each kind builds on
        case "$stage" in *_backward_*) previous_backward=$stage ;; esac
        if [ "$kind" = c ]; then previous_c=$stage; fi
        [ -n "$first_c" ] || [ "$kind" != c ] || first_c=$stage
        if [ -f "$(source_of "$stage" cu)" ]; then previous_cu=$stage; fi
    done
    ;;
steps)
    out=$2
    list=$3
    git rev-parse --git-dir >/dev/null 2>&1 || { echo "diffs.sh steps: needs a git clone (each step is a commit)" >&2; exit 1; }
    mkdir -p "$out"
    previous=""
    # shellcheck disable=SC2034 # `step` and `commit` are read from each line
    grep -v '^#' "$list" | while read -r step commit; do
        [ -n "$commit" ] || continue
        git cat-file -e "$commit^{commit}" 2>/dev/null ||
            { echo "diffs.sh steps: commit $commit (step $step) is not in this clone (a shallow clone? git fetch --unshallow)" >&2; exit 1; }
        if [ -n "$previous" ]; then
            file=$(printf '%s/%02d_from_%02d.diff' "$out" "$step" "${previous% *}")
            git diff --no-color "${previous#* }" "$commit" -- steps/06_warp_specialized 'common/*.cuh' steps/07_sequence_parallel >"$file"
            echo "wrote $file: +$(grep -c '^+[^+]' "$file") -$(grep -c '^-[^-]' "$file") lines"
        fi
        previous="$step $commit"
    done
    ;;
show) show "$2" "$3" ;;
markdown) markdown "$2" "$3" ;;
*) echo "usage: diffs.sh write OUT STAGE... | diffs.sh show FROM TO | diffs.sh markdown FROM TO | diffs.sh steps OUT LIST" >&2; exit 2 ;;
esac
