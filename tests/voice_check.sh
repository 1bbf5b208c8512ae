#!/bin/sh
# voice_check.sh -- the project speaks of the software only, never of how it came to be.
# Prints every line of a tracked text file that tells history instead of the code: work
# periods, run or issue numbers, a machine named by its role rather than its make, ordinals of
# development steps, comparisons with a former state, and exits 1 if there is one. The words are spelled in pieces
# below, so that this file does not find itself. `make test` runs it; run it alone with
# `sh tests/voice_check.sh`.
set -u
cd "$(dirname "$0")/.."
ordinal="(first|second|third|fourth|fifth|sixth|seventh|eighth|ninth|tenth|eleventh|twelfth|thirteenth|fourteenth|fifteenth|sixteenth|seventeenth|eighteenth|nineteenth|twe""ntieth|thi""rtieth|for""tieth|fif""tieth|six""tieth)"
period="ses""sion"; role="dev""ice machine|machine st""art|steer""ing"
pattern="$period|\\brun ?[0-9]+\\b|\\br[0-9]+\\b|\\bissues? #?[0-9]+|$role|\\b(twenty|thirty|forty|fifty|sixty|seventy)-$ordinal\\b|\\b$ordinal (step|steps|$period|run|trial)\\b|\\bst""eps? [0-9]+\\b|\\bst""eps? \\([0-9]+|(was|were) (slow""er|fast""er)|UNTEST""ED"
[ -d .git ] || { echo "voice_check: not a git checkout, nothing checked"; exit 0; }
hits=$(git ls-files -z | xargs -0 grep -I -n -i -E "$pattern" -- 2>/dev/null)
if [ -n "$hits" ]; then
    echo "$hits"
    echo "voice_check: $(echo "$hits" | wc -l) lines tell how the project was made (say what the code does and why)"
    exit 1
fi
echo "voice_check: clean"
