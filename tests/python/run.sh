#!/bin/sh
# run.sh -- the Python package's pytest suite (tests/python/), on the package as `pip install .`
# installs it: into build/python/, offline (--no-build-isolation: the system's setuptools), then
# pytest with that folder first on the path.
#
# It needs a python3 with torch, pytest, setuptools and pip. Where there is none, it says so in
# one line, with the command that installs them, and exits 0: the Check suites are the project's
# test, and this one checks the package on top of them.
#
#     sh tests/python/run.sh      (make test runs it; make test-python alone)
set -u
cd "$(dirname "$0")/../.."
python=""
for candidate in python3 /usr/bin/python3; do
    if command -v "$candidate" >/dev/null 2>&1 &&
        "$candidate" -c 'import torch, pytest, setuptools, pip' >/dev/null 2>&1; then
        python=$candidate
        break
    fi
done
if [ -z "$python" ]; then
    echo "python suite skipped: no python3 with torch, pytest, setuptools and pip (Debian: sudo apt-get install" \
        "python3-torch python3-pytest python3-setuptools python3-pip)"
    exit 0
fi
echo "== Python suite ($($python -c 'import sys, torch; print("python", sys.version.split()[0], "torch", torch.__version__)')) =="
target=build/python
mkdir -p build
rm -rf "$target" python/gdn_steps.egg-info
# Debian marks its python as externally managed; --target installs into our folder, not the system's
if ! PIP_BREAK_SYSTEM_PACKAGES=1 "$python" -m pip install --no-build-isolation --no-deps --no-index --quiet \
    --target "$target" . > build/python_install.log 2>&1; then
    cat build/python_install.log
    echo "pip install . failed (log above)"
    exit 1
fi
PYTHONPATH="$PWD/$target" "$python" -c 'import gdn_steps; print("installed:", gdn_steps.__file__)'
PYTHONPATH="$PWD/$target" OMP_NUM_THREADS="${OMP_NUM_THREADS:-2}" "$python" -m pytest -q -p no:cacheprovider tests/python
