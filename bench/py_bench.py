"""Figures for the Python frontend, printed as `name value unit` lines like
shoal_bench's. Run from the source folder after a build:

    PYTHONPATH=build/python /usr/bin/python3 bench/py_bench.py

It starts a local cluster of its own (2 CPUs) in a fresh temp dir. Today it
measures objects; task and actor figures come with remote functions
(docs/design/python.md).
"""

import os
import tempfile
import time

import numpy as np

import shoal

SIZE = 256 << 20  # bytes per object, as the goal table says
ROUNDS = 5


def best_rate(fn, nbytes, rounds=ROUNDS):  # memcpy's ceiling
    """The best of `rounds` runs of fn(), in GB/s of `nbytes`."""
    best = float("inf")
    for _ in range(rounds):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return nbytes / best / 1e9


def main():
    os.environ["SHOAL_TEMP_DIR"] = tempfile.mkdtemp(prefix="shoal-pybench-")
    os.environ.pop("SHOAL_ADDRESS", None)
    shoal.init(num_cpus=2)
    array = np.random.default_rng(0).integers(
        0, 255, SIZE, dtype=np.uint8)
    target = np.empty_like(array)

    memcpy = best_rate(lambda: np.copyto(target, array), SIZE)
    # As shoal_bench's object rounds: put, get, read, then the ref goes (its
    # store pages are reused by the next round's put once it is deleted).
    put = get = read = 0.0
    for i in range(ROUNDS):
        start = time.perf_counter()
        ref = shoal.put(array)
        put_s = time.perf_counter() - start
        print(f"# round {i}: put {SIZE / put_s / 1e9:.2f} GB/s" +
              (" (store pages touched for the first time)" if i == 0 else ""))
        put = max(put, SIZE / put_s / 1e9)
        start = time.perf_counter()
        back = shoal.get(ref)
        get = max(get, SIZE / (time.perf_counter() - start) / 1e9)
        start = time.perf_counter()
        total = int(back.sum(dtype=np.uint64))
        read = max(read, SIZE / (time.perf_counter() - start) / 1e9)
        assert total == int(array.sum(dtype=np.uint64))
        del back, ref

    small = [shoal.put(i) for i in range(2000)]
    start = time.perf_counter()
    for _ in range(3):
        small = [shoal.put(i) for i in range(2000)]
    puts_per_s = 6000 / (time.perf_counter() - start)
    start = time.perf_counter()
    for _ in range(3):
        shoal.get(small)
    gets_per_s = 6000 / (time.perf_counter() - start)

    print(f"# numpy uint8 array of {SIZE >> 20} MiB; best of {ROUNDS}")
    print(f"py_put_GBps {put:.2f} GB/s")
    print(f"py_get_GBps {get:.1f} GB/s")
    print(f"py_get_and_read_GBps {read:.2f} GB/s")
    print(f"py_memcpy_GBps {memcpy:.2f} GB/s")
    print(f"py_put_vs_memcpy {put / memcpy:.2f} x")
    print(f"py_put_calls_per_s {puts_per_s:.0f} calls/s")
    print(f"py_get_calls_per_s {gets_per_s:.0f} calls/s")
    shoal.shutdown()


if __name__ == "__main__":
    main()
