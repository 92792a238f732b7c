"""Training past one process, on PyTorch's own engines: `torchrun` starts the processes and sets their
environment (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT), `torch.distributed` joins them into
one group (NCCL between GPUs, gloo between CPU processes), and DistributedDataParallel averages the
gradients during backward. Nothing here launches a process or sends a gradient by hand.

What the course adds is only bookkeeping around them, used by `solutions.translate.train`:
which batches each rank takes (`rank_share`), one number summed over the ranks (`all_sum`), and the random
states every rank needs to resume exactly (`rng_states` / `set_rng_state`).

Example: torchrun --nproc_per_node 2 -m solutions.translate train --data synthetic --steps 100 --out runs/ddp
         (each process: init_from_env() -> (rank, 2, device); rank 0 alone logs, evaluates and writes files)
"""
from __future__ import annotations

import os

import torch
import torch.distributed as dist


def rank_and_world() -> tuple[int, int]:
    """(this process's rank, the number of processes): (0, 1) when no process group is initialized."""
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def init_from_env(device: str | None = None) -> tuple[int, int, str]:
    """Join the process group that `torchrun` describes in the environment, as torchrun's own examples do
    (`init_process_group` reads MASTER_ADDR, MASTER_PORT, RANK and WORLD_SIZE: the "env://" method).
    Returns (rank, world size, device): NCCL and this process's own GPU ("cuda:LOCAL_RANK") for a CUDA
    device, gloo for a CPU. Without torchrun's variables (WORLD_SIZE unset or 1) it does nothing:
    (0, 1, device), so the same command trains in one process as before.

    Example: under torchrun --nproc_per_node 2 on a CPU:
             init_from_env("cpu") -> (1, 2, "cpu") in the second process
    """
    if device is None:
        device = "cuda" if torch.cuda.is_available() else "cpu"
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world <= 1:
        return 0, 1, device
    if not dist.is_initialized():
        cuda = str(device).startswith("cuda")
        if cuda:
            local_rank = int(os.environ.get("LOCAL_RANK", "0"))
            device = f"cuda:{local_rank}"
            torch.cuda.set_device(local_rank)
        dist.init_process_group(backend="nccl" if cuda else "gloo")
    elif str(device).startswith("cuda"):
        device = f"cuda:{torch.cuda.current_device()}"
    return dist.get_rank(), dist.get_world_size(), device


def close(meet: bool = True) -> None:
    """Leave the process group, if this process is in one. With `meet` (a run that ended well) over gloo
    (CPUs), the processes first wait for each other, as PyTorch's own distributed tests do before destroying a
    group: a rank that tore its group down while another was still in it aborted at exit now and then
    (SIGABRT, "terminate called without an active exception": 3 runs in about 100 of the torchrun test on this
    2-core machine under load), and torchrun then stopped the rank still scoring. NCCL's group is left at once
    (its barrier would time out while rank 0 decodes), and so is any group after an error (the others may be
    inside a collective that this rank will never join)."""
    if dist.is_available() and dist.is_initialized():
        if meet and dist.get_backend() == "gloo":
            dist.barrier()
        dist.destroy_process_group()


def rank_share(step_batches: list, rank: int, world: int) -> list:
    """This rank's micro-batches of one optimizer step. `step_batches` are the world * K batches of the step
    in the epoch's order (the same list on every rank); rank r takes the r-th run of K consecutive ones.
    Example: step_batches [b0, b1, b2, b3], world 2 (K = 2) -> rank 0: [b0, b1], rank 1: [b2, b3]"""
    k = len(step_batches) // world
    return step_batches[rank * k:(rank + 1) * k]


def all_sum(values: list[float], device) -> list[float]:
    """The sum over all ranks of each number in `values` (one all_reduce; the values unchanged in one
    process).
    Example: rank 0 [1.0, 0.0], rank 1 [2.0, 1.0] -> [3.0, 1.0] on both"""
    rank, world = rank_and_world()
    if world == 1:
        return list(values)
    # NCCL reduces tensors on the GPU only; gloo on the CPU. float64: token counts stay exact
    t = torch.tensor(values, dtype=torch.float64, device=device if str(device).startswith("cuda") else "cpu")
    dist.all_reduce(t, op=dist.ReduceOp.SUM)
    return t.tolist()


def _local_rng_state(device) -> dict:
    state = {"torch": torch.get_rng_state()}
    if str(device).startswith("cuda"):
        state["cuda"] = torch.cuda.get_rng_state(device)
    return state


def rng_states(device) -> list[dict]:
    """Every rank's random state (torch's CPU generator, and this rank's GPU's), in rank order: what dropout
    draws next. A collective: every rank calls it, every rank gets the whole list."""
    rank, world = rank_and_world()
    local = _local_rng_state(device)
    if world == 1:
        return [local]
    everyone = [None] * world
    dist.all_gather_object(everyone, {k: v.cpu() for k, v in local.items()})
    return everyone


def set_rng_state(states: list[dict], device) -> None:
    """Restore this rank's entry of rng_states(); a different number of ranks than was saved is an error
    (the data position and the dropout streams would not be those of the saved run)."""
    rank, world = rank_and_world()
    if len(states) != world:
        raise ValueError(f"the checkpoint holds the random states of {len(states)} processes, this run has "
                         f"{world}: resume with the same number of processes (torchrun --nproc_per_node "
                         f"{len(states)})")
    state = states[rank]
    torch.set_rng_state(state["torch"].cpu())
    if "cuda" in state and str(device).startswith("cuda"):
        torch.cuda.set_rng_state(state["cuda"].cpu(), device)
