"""Build hook of the mooncake-go distribution (the rest is pyproject.toml):
installs compat/python/mooncake_go_guard.pth at the root of the wheel, i.e.
into site-packages, where Python runs it at start-up (see
compat/python/_mooncake_go_guard.py: it refuses a `mooncake` package mixed
with upstream Mooncake's wheel, whichever was installed last)."""

import os

from setuptools import setup
from setuptools.command.build_py import build_py

PTH = os.path.join("compat", "python", "mooncake_go_guard.pth")


class BuildPy(build_py):
    def run(self):
        super().run()
        self.copy_file(PTH, os.path.join(self.build_lib, os.path.basename(PTH)))

    def get_outputs(self, include_bytecode=True):
        return super().get_outputs(include_bytecode) + [os.path.join(self.build_lib, os.path.basename(PTH))]


setup(cmdclass={"build_py": BuildPy})
