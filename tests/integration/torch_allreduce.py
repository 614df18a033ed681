"""A real torch.distributed program (Gloo) for `shoal launch`.

--per-device: reads what torchrun sets (RANK, WORLD_SIZE, MASTER_ADDR, ...)
through init_method="env://". --per-host: reads only Shoal's host-centric
variables (process id and count, coordinator address). Every rank
all-reduces its rank and prints the sum.
"""
import os
import sys

import torch
import torch.distributed as dist

mode = sys.argv[1]
if mode == "per-device":
    dist.init_process_group("gloo", init_method="env://")
else:
    dist.init_process_group(
        "gloo",
        init_method="tcp://" + os.environ["SHOAL_COORDINATOR_ADDRESS"],
        rank=int(os.environ["SHOAL_PROCESS_ID"]),
        world_size=int(os.environ["SHOAL_NUM_PROCESSES"]),
    )
value = torch.tensor([float(dist.get_rank())])
dist.all_reduce(value)
print(f"rank {dist.get_rank()} of {dist.get_world_size()} sum {int(value.item())}",
      flush=True)
dist.destroy_process_group()
