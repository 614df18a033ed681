"""``import ray`` in a process a test starts (a driver script run with
``python``, on the PYTHONPATH that tests/raytests/run sets): Shoal, under
the harness's alias (ray_alias.py)."""

import sys

import ray_alias  # noqa: F401 - installs the alias
import shoal

sys.modules["ray"] = shoal  # what `import ray` gives, as in the harness
