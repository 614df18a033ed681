"""``python -m shoal.worker``: a worker process that a node agent starts
for a Python job (see shoal._worker). As ``ray.worker``, it also has
Ray's older ``get_resource_ids()``."""


def get_resource_ids():
    """The resources the current task or actor holds, as Ray's
    ``ray.worker.get_resource_ids()``: {name: [(id, amount), ...]}, with the
    GPU ids this worker was given, and placement-group resources by the
    group's names. {} in a driver."""
    from shoal import _shoal
    from shoal._worker import held_resources
    held = held_resources() or {}
    devices = _shoal.assigned_devices()
    out = {}
    for name, amount in held.items():
        if amount <= 0:
            continue
        if name == devices["kind"] and devices["ids"]:
            out[name] = [(int(i), 1.0) for i in devices["ids"]]
        else:
            out[name] = [(0, float(amount))]
    return out


if __name__ == "__main__":
    from shoal._worker import main

    main()
