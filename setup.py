"""`pip install .` at the repository root: the gdn_steps package (python/gdn_steps) with its
native libraries, built by `make lib` from the same sources as the stage binaries
(docs/python.md). Offline, or without setuptools from PyPI: pip install --no-build-isolation ."""
import os
import subprocess

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.dist import Distribution


class BuildWithLibrary(build_py):
    """Build the native libraries into python/gdn_steps/ before the package is copied."""

    def run(self):
        subprocess.check_call(["make", "--no-print-directory", "lib"], cwd=os.path.dirname(os.path.abspath(__file__)))
        super().run()


class NativeDistribution(Distribution):
    """The package holds compiled code: its wheel is tagged for this platform."""

    def has_ext_modules(self):
        return True


setup(
    name="gdn_steps",
    version="0.1.0",
    description="Gated DeltaNet, stage by stage: the course's stages called from PyTorch with FLA's signature",
    license="MIT",
    package_dir={"": "python"},
    packages=["gdn_steps"],
    # libgdn_steps_cuda.so where nvcc was found (CUDA tensors)
    package_data={"gdn_steps": ["libgdn_steps_*.so"]},
    python_requires=">=3.9",
    cmdclass={"build_py": BuildWithLibrary},
    distclass=NativeDistribution,
)
