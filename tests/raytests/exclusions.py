"""The tests of Ray's internals left out of the measure
(tests/raytests/excluded.txt), read by the harness and by `run`."""

import os

_EXCLUDED = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                         "excluded.txt")


def excluded_tests():
    """{(file, test or ""): why} from excluded.txt ("": the whole file)."""
    out = {}
    with open(_EXCLUDED) as f:
        for line in f:
            entry, _, why = line.partition("#")
            entry = entry.strip()
            if entry:
                path, _, name = entry.partition("::")
                out[(path, name)] = why.strip()
    return out
