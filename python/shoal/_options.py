"""The types and values each option of ``@shoal.remote`` and
``.options()`` takes, checked where the option is given, with Ray's
messages (a TypeError for a value of the wrong type, a ValueError for one
out of range). What an option does is the business of the code that reads
it (shoal._remote)."""

import math

_NONE = type(None)
_NUMBER = (int, float, _NONE)


def _at_least(low):
    return lambda v: v is None or v >= low


def _retries(v):
    return v is None or v >= -1


def _returns(v):
    if v is None or v in ("dynamic", "streaming"):
        return True
    return isinstance(v, int) and not isinstance(v, bool) and v >= 0


class Option:
    """One keyword: the types it takes and, optionally, a value check."""

    def __init__(self, types, check=None, message=None, in_options=True):
        self.types = types
        self.check = check
        self.message = message
        self.in_options = in_options  # may be changed by .options()

    def validate(self, name, value):
        if not isinstance(value, self.types):
            raise TypeError(f"The type of keyword '{name}' must be "
                            f"{self.types}, but received type {type(value)}")
        if self.check is not None and not self.check(value):
            raise ValueError(self.message.format(name, value=value))


_RETRIES = ("The keyword '{}' only accepts None, 0, -1 or a positive "
            "integer, where -1 represents infinity.")
_QUANTITY = "The keyword '{}' only accepts None, 0 or a positive number"

_COMMON = {
    "num_cpus": Option(_NUMBER, _at_least(0), _QUANTITY),
    "num_gpus": Option(_NUMBER, _at_least(0), _QUANTITY),
    "memory": Option(_NUMBER, _at_least(0), _QUANTITY),
    "object_store_memory": Option(_NUMBER, _at_least(0), _QUANTITY),
    "resources": Option((dict, _NONE)),
    "accelerator_type": Option((str, _NONE)),
    "name": Option((str, _NONE)),
    "placement_group": Option(object),
    # Ray's words for a bad index ("bundle index N is invalid").
    "placement_group_bundle_index": Option(int, _at_least(-1),
                                           "placement group bundle index "
                                           "{value} is invalid ('{}' takes "
                                           "-1 for any bundle, or a "
                                           "bundle's index)"),
    "placement_group_capture_child_tasks": Option((bool, _NONE)),
    "scheduling_strategy": Option(object),
    "runtime_env": Option((dict, _NONE)),
    "label_selector": Option((dict, _NONE)),
    "enable_task_events": Option(bool),
    "_metadata": Option((dict, _NONE)),
}

TASK_OPTIONS = {
    **_COMMON,
    "max_calls": Option((int, _NONE), _at_least(0),
                        "The keyword '{}' only accepts None, 0 or a positive "
                        "integer", in_options=False),
    "max_retries": Option((int, _NONE), _retries, _RETRIES),
    "num_returns": Option((int, str, _NONE), _returns,
                          "The keyword '{}' only accepts None, a "
                          'non-negative integer, or "dynamic" (or '
                          '"streaming" for a generator)'),
    "retry_exceptions": Option((bool, list, tuple)),
}

ACTOR_OPTIONS = {
    **_COMMON,
    "max_restarts": Option((int, _NONE), _retries, _RETRIES),
    "max_task_retries": Option((int, _NONE), _retries, _RETRIES),
    "max_concurrency": Option((int, _NONE), _at_least(1),
                              "The keyword '{}' only accepts None or a "
                              "positive integer"),
    "max_pending_calls": Option(int, _at_least(-1),
                                "The keyword '{}' only accepts -1 (no "
                                "bound) or a positive integer"),
    "lifetime": Option((str, _NONE),
                       lambda v: v in (None, "detached", "non_detached"),
                       "The keyword '{}' only accepts None, \"detached\" "
                       "or \"non_detached\""),
    "namespace": Option((str, _NONE)),
    "get_if_exists": Option(bool),
    "concurrency_groups": Option((dict, list, _NONE), in_options=False),
    "allow_out_of_order_execution": Option(bool),
}

METHOD_OPTIONS = {
    "num_returns": TASK_OPTIONS["num_returns"],
    "name": Option((str, _NONE)),
    "concurrency_group": Option((str, _NONE)),
    "max_task_retries": ACTOR_OPTIONS["max_task_retries"],
    "retry_exceptions": TASK_OPTIONS["retry_exceptions"],
    "enable_task_events": Option(bool),
    "_metadata": Option((dict, _NONE)),
}


def _check_precision(name, value):
    # Ray's resource unit is 1/10000: finer fractions cannot be honoured.
    if isinstance(value, float) and math.isfinite(value) and value != round(
            value, 4):
        raise ValueError(f"The precision of the fractional quantity of "
                         f"resource {name} cannot go beyond 0.0001")


def validate(options, table, what, in_options=False):
    """Checks every option against ``table`` (TASK_OPTIONS, ACTOR_OPTIONS
    or METHOD_OPTIONS); ``in_options``: given to ``.options()``, which
    cannot change some of them."""
    unknown = sorted(set(options) - set(table))
    if unknown:
        raise ValueError(f"Invalid option keyword {unknown[0]} for {what}. "
                         f"Valid ones are {sorted(table)}.")
    for name, value in options.items():
        option = table[name]
        if in_options and not option.in_options:
            raise ValueError(
                f"Setting '{name}' is not supported in '.options()'.")
        option.validate(name, value)
    for name in ("num_cpus", "num_gpus", "memory"):
        if options.get(name) is not None:
            _check_precision(name, options[name])
    resources = options.get("resources") or {}
    for name in ("CPU", "GPU"):
        if name in resources:
            raise ValueError(
                "Use the 'num_cpus' and 'num_gpus' keyword instead of 'CPU' "
                "and 'GPU' in 'resources' keyword")
    for name, value in resources.items():
        if not isinstance(value, (int, float)) or value < 0:
            raise ValueError(f"resource {name} must be a number of 0 or "
                             f"more, not {value!r}")
        _check_precision(name, value)
