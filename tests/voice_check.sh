#!/bin/sh
# voice_check.sh -- the project speaks of the software only, never of how it came to be.
# Prints every line of a tracked text file that tells history: work periods ("session"),
# run or issue numbers, the role of a machine instead of its name ("device machine"),
# ordinals of development steps ("the forty-sixth step"), "was slower", and exits 1 if
# there is one. `make test` runs it; run it alone with `sh tests/voice_check.sh`.
set -u
cd "$(dirname "$0")/.."
ordinal='(first|second|third|fourth|fifth|sixth|seventh|eighth|ninth|tenth|eleventh|twelfth|thirteenth|fourteenth|fifteenth|sixteenth|seventeenth|eighteenth|nineteenth|twentieth|thirtieth|fortieth|fiftieth|sixtieth)'
pattern="session|\\brun ?[0-9]+\\b|\\br[0-9]+\\b|\\bissues? #?[0-9]+|device machine|\\b(twenty|thirty|forty|fifty|sixty|seventy)-$ordinal\\b|\\b$ordinal (step|steps|session|run|trial)\\b|\\bsteps? [0-9]+\\b|\\bsteps? \\([0-9]+|(was|were) (slower|faster)|UNTESTED"
[ -d .git ] || { echo "voice_check: not a git checkout, nothing checked"; exit 0; }
hits=$(git ls-files -z | xargs -0 grep -I -n -i -E "$pattern" -- 2>/dev/null | grep -v '^tests/voice_check.sh:')
if [ -n "$hits" ]; then
    echo "$hits"
    echo "voice_check: $(echo "$hits" | wc -l) lines tell how the project was made (say what the code does and why)"
    exit 1
fi
echo "voice_check: clean"
