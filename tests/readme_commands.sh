#!/bin/sh
# readme_commands.sh -- run the README's example commands, so that they cannot drift from the code.
#
# A runnable block in README.md is a fenced block whose opening line comes right after a line
# `<!-- readme-commands -->`. Every other line of such a block is one command, run in order
# from the repository root with `sh -c`, as a reader pasting it would; blank lines and lines
# starting with # are skipped. The first command that fails stops the script: it prints that
# command and its output and exits 1. On success it prints one line. Blocks that need a GPU are
# left unmarked in the README and are not run here.
#
# Before the first command, problem/, result/, grads/, packed/ and packed_result/ (the folders
# the examples write, ignored by git) are removed, so each run starts as a fresh clone does
# after `make`. A command that starts with mpirun is skipped, with a note in the summary line,
# where mpirun is not installed; as root, Open MPI's consent variables are set so that mpirun
# agrees to start.
#
#     make && sh tests/readme_commands.sh
set -u
cd "$(dirname "$0")/.."
readme=README.md
[ -f "$readme" ] || { echo "readme_commands: no $readme in $(pwd)"; exit 1; }

# The marked blocks' command lines, one a line, in README order.
commands=$(awk '
    /^<!-- readme-commands -->[ \t]*$/ { marked = 1; next }
    marked && /^```/ { marked = 0; inside = 1; next }
    marked && !/^[ \t]*$/ { marked = 0 }
    inside && /^```/ { inside = 0; next }
    inside && !/^[ \t]*(#|$)/ { print }
' "$readme")
[ -n "$commands" ] || { echo "readme_commands: no marked block (<!-- readme-commands -->) in $readme"; exit 1; }

if [ "$(id -u)" = 0 ]; then
    export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fi
have_mpirun=0
command -v mpirun >/dev/null 2>&1 && have_mpirun=1

rm -rf problem result grads packed packed_result
output=$(mktemp)
trap 'rm -f "$output"' EXIT INT TERM
ran=0 skipped=0
# The commands come from a here-document, not a pipe, so the counters survive the loop.
while IFS= read -r command; do
    case "$command" in
    mpirun\ *)
        if [ "$have_mpirun" = 0 ]; then
            skipped=$((skipped + 1))
            continue
        fi
        ;;
    esac
    # stdin from /dev/null: mpirun forwards its stdin to rank 0 and would eat the lines below
    sh -c "$command" <"/dev/null" >"$output" 2>&1
    status=$?
    if [ "$status" != 0 ]; then
        echo "readme_commands: this command of $readme failed (exit status $status):"
        echo "  $command"
        sed 's/^/  | /' "$output"
        exit 1
    fi
    ran=$((ran + 1))
done <<EOF
$commands
EOF

note=""
[ "$skipped" = 0 ] || note=" ($skipped mpirun command(s) skipped: mpirun is not installed)"
echo "readme_commands: $ran commands of $readme ran and passed$note"
