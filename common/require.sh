#!/bin/sh
# require.sh WHAT -- make sure a fresh Debian machine has what `make WHAT` needs.
# Installs missing packages with apt-get (through sudo when not root), saying what it
# installs; where it cannot, stops with the exact command to run.
set -u
what=${1:-build}
missing=""

have_command() { command -v "$1" >/dev/null 2>&1; }
need_package() { missing="$missing $1"; }

have_command gcc || need_package gcc
# OpenMP comes with gcc (libgomp); check it links
if have_command gcc && ! printf 'int main(void){return 0;}\n' | gcc -fopenmp -x c - -o /dev/null 2>/dev/null; then
    need_package libgomp1
fi
case "$what" in
test)
    have_command pkg-config || need_package pkg-config
    pkg-config --exists check 2>/dev/null || need_package check
    # stage 08 and its tests run under Open MPI (skipped with a line where it is missing)
    { have_command mpicc && have_command mpirun; } || { need_package libopenmpi-dev; need_package openmpi-bin; }
    # the Python package's suite (tests/python/run.sh): PyTorch, pytest, and pip to install the package
    for python in python3 /usr/bin/python3; do
        have_command "$python" && "$python" -c 'import torch, pytest, setuptools, pip' >/dev/null 2>&1 && break
        python=""
    done
    [ -n "$python" ] || { need_package python3-torch; need_package python3-pytest; need_package python3-setuptools
                          need_package python3-pip; }
    ;;
plots) have_command gnuplot || need_package gnuplot-nox ;;
valgrind) have_command valgrind || need_package valgrind ;;
esac

[ -z "$missing" ] && exit 0

echo "gdn-steps needs:$missing -- installing with apt-get"
if [ "$(id -u)" = 0 ]; then
    sudo=""
elif have_command sudo && sudo -n true 2>/dev/null; then
    sudo="sudo"
else
    echo "error: cannot install as $(id -un) without a password; run:" >&2
    echo "    sudo apt-get update && sudo apt-get install -y$missing" >&2
    exit 1
fi
# a fresh image has no package lists: update once if the first try fails
if ! $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -q$missing >/dev/null 2>&1; then
    $sudo apt-get update -q >/dev/null 2>&1
    if ! $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -q$missing; then
        echo "error: apt-get could not install:$missing; run: sudo apt-get update && sudo apt-get install -y$missing" >&2
        exit 1
    fi
fi
echo "installed:$missing"
