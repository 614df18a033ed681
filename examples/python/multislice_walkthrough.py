"""The guide's host-centric snippet on two TPU slices at once, written for
Ray with only the import changed (real slices, or simulated ones made with
`shoal dev fake-tpu --name`): both slices reserved by topology as one
group, one task per host holding its chips, each given the MEGASCALE
variables that join the slices, reporting the device count JAX would see.
The C++ version is examples/multislice_walkthrough.cc.

  PYTHONPATH=build/python /usr/bin/python3 examples/python/multislice_walkthrough.py
"""

import os

import shoal as ray
from shoal.util import tpu
from shoal.util.scheduling_strategies import PlacementGroupSchedulingStrategy

MEGASCALE = ("MEGASCALE_SLICE_ID", "MEGASCALE_NUM_SLICES",
             "MEGASCALE_COORDINATOR_ADDRESS", "MEGASCALE_PORT")


@ray.remote(num_cpus=0)
def host_centric(megascale):
    """On one host: the MEGASCALE variables set as a program sets them
    before jax.distributed.initialize(), and the slice's device count as
    jax.device_count() gives it (this host's chips times its slice's
    hosts; with JAX installed, JAX's own count)."""
    os.environ.update(megascale)
    try:
        import jax
        devices = jax.device_count()
    except ImportError:
        devices = (tpu.get_num_tpu_chips_on_node() *
                   (tpu.get_current_pod_worker_count() or 1))
    return (f"slice {os.environ.get('TPU_NAME')} worker "
            f"{os.environ.get('TPU_WORKER_ID')}: device_count() = {devices}"
            + "".join(f"  {k}={os.environ.get(k, '')}" for k in MEGASCALE))


def main():
    ray.init()
    slices = tpu.slice_placement_group(topology="2x2x2",
                                       accelerator_version="v5p",
                                       num_slices=2)
    ray.get(slices.placement_group.ready(), timeout=60)
    print(f"Reserved {slices.num_slices} x v5p 2x2x2 as one group: "
          f"{', '.join(slices.slice_names)}")
    # Worker 0 of slice 0 coordinates the slices.
    first = slices.placement_group.bundle_nodes()[0]
    coordinator = next(n["NodeManagerAddress"] for n in ray.nodes()
                       if n["NodeID"] == first)
    hosts_per_slice = slices.num_hosts // slices.num_slices
    refs = [
        host_centric.options(
            resources={"TPU": slices.chips_per_host},
            scheduling_strategy=PlacementGroupSchedulingStrategy(
                slices.placement_group, placement_group_bundle_index=i),
        ).remote(tpu.get_tpu_coordinator_env_vars(
            coordinator, slices.num_slices, i // hosts_per_slice))
        for i in range(slices.num_bundles)
    ]
    for line in ray.get(refs):
        print(" ", line)
    slices.shutdown()


if __name__ == "__main__":
    main()
