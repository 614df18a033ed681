"""Calling registered C++ functions from Python (Ray's cross-language
calls): shoal.cpp_function(name) runs in the workers of the program given
as shoal.init(cpp_program=...), with msgpack arguments and results."""

import os

import pytest

import shoal

PROGRAM = os.environ.get("SHOAL_TEST_CPP_PROGRAM", "")

pytestmark = pytest.mark.skipif(
    not os.path.exists(PROGRAM),
    reason="SHOAL_TEST_CPP_PROGRAM (build/bin/py_cpp_functions) is not built")


@pytest.fixture
def with_cpp(two_nodes, monkeypatch):
    monkeypatch.setenv("SHOAL_TEMP_DIR", two_nodes.head_dir)
    monkeypatch.delenv("SHOAL_ADDRESS", raising=False)
    shoal.init(cpp_program=PROGRAM)
    try:
        yield two_nodes
    finally:
        shoal.shutdown()


def test_cpp_functions_run_with_msgpack_values(with_cpp):
    add = shoal.cpp_function("Add")
    assert shoal.get(add.remote(1, 2)) == 3
    assert shoal.get(shoal.cpp_function("Greet").remote("shoal")) == \
        "hello, shoal"
    assert shoal.get(shoal.cpp_function("Mean").remote([1.0, 2.0, 6.0])) == 3
    # A C++ result as another C++ call's argument, resolved on the way.
    assert shoal.get(add.remote(add.remote(1, 2), 10)) == 13
    # Many at once, on both nodes, beside Python tasks of the same job.
    refs = [add.remote(i, i) for i in range(200)]
    assert shoal.get(refs) == [2 * i for i in range(200)]
    where = shoal.get([shoal.cpp_function("WhereAmI").options(
        resources={"slot": 1}).remote()])
    slot_node = [n["NodeID"] for n in shoal.nodes()
                 if n["Resources"].get("slot")]
    assert where == slot_node

    @shoal.remote
    def python_side(x):
        return x + 1

    # A C++ value as a Python task's argument.
    assert shoal.get(python_side.remote(add.remote(2, 3))) == 6


def test_cpp_errors_are_clear(with_cpp):
    with pytest.raises(shoal.TaskError, match="Mean of nothing"):
        shoal.get(shoal.cpp_function("Mean").options(max_retries=0)
                  .remote([]))
    with pytest.raises(shoal.TaskError, match="no remote function named"):
        shoal.get(shoal.cpp_function("NoSuchFunction").remote())
    with pytest.raises(TypeError, match="no msgpack form"):
        shoal.cpp_function("Add").remote(object(), 1)
    with pytest.raises(TypeError, match="positional"):
        shoal.cpp_function("Add").remote(a=1, b=2)


def test_without_a_cpp_program_the_error_says_what_to_do(connected):
    with pytest.raises(shoal.ShoalError, match="cpp_program"):
        shoal.cpp_function("Add").remote(1, 2)
