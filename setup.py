"""The wheel carries the schema: `sql/` and `migrations/` are copied into the package as
better_compute/schema/ (migrate.py reads them there when installed, and from the checkout in
development). Everything else about the package is in pyproject.toml."""

from pathlib import Path
import shutil

from setuptools import setup
from setuptools.command.build_py import build_py

SCHEMA_DIRS = ("sql", "migrations")


class BuildWithSchema(build_py):
    def run(self) -> None:
        super().run()
        if getattr(self, "editable_mode", False):
            return  # an editable install reads the checkout's own folders
        for name in SCHEMA_DIRS:
            target = Path(self.build_lib) / "better_compute" / "schema" / name
            shutil.rmtree(target, ignore_errors=True)
            shutil.copytree(Path(__file__).parent / name, target)


setup(cmdclass={"build_py": BuildWithSchema})
