"""CPU scaling of solutions.translate.train from 1 to 2 gloo processes (issue 19), on the synthetic corpus.

Every run takes the same optimizer steps over the same batches: 2 batches of at most 1,500 tokens a step,
either one process accumulating both (accumulate 2) or two processes with one each (DistributedDataParallel).
Throughput: target tokens of the steps / wall time of train() (the tiny validation at the end included).
Writes one JSON line per run to stdout; benchmarks/distributed_cpu.md has the numbers.

Usage: python benchmarks/distributed_cpu.py [steps] [repeats] [runs]    (or: ... allreduce)
  runs: a comma list of PROCESSESxTHREADS, default 1x1,1x2,2x1 (in turns, repeats times: the load moves)
"""
import dataclasses
import json
import os
import re
import socket
import sys
import time

import torch
import torch.multiprocessing as mp

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from solutions import distributed  # noqa: E402
from solutions.data import load_synthetic  # noqa: E402
from solutions.translate import config_for, prepare_data, train  # noqa: E402


def timed_train(config, data):
    t0 = time.time()
    _, history = train(config, data, progress=False)
    seconds = time.time() - t0
    return {"steps": history["steps"], "target_tokens": history["target_tokens"], "seconds": seconds,
            "tokens_per_s": history["target_tokens"] / seconds}


def _worker(rank, world, port, config, data, queue):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(world),
                      LOCAL_RANK=str(rank))
    torch.set_num_threads(1)
    distributed.init_from_env("cpu")
    try:
        result = timed_train(config, data)
        if rank == 0:
            queue.put(result)
    finally:
        distributed.close()


def _allreduce_worker(rank, world, port, numel, repeats, queue):
    """Seconds of one all_reduce of `numel` float32 numbers over gloo: the gradient exchange of one step
    alone."""
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(world),
                      LOCAL_RANK=str(rank))
    torch.set_num_threads(1)
    distributed.init_from_env("cpu")
    try:
        t = torch.ones(numel)
        torch.distributed.all_reduce(t)  # the first one sets the connection up
        t0 = time.time()
        for _ in range(repeats):
            torch.distributed.all_reduce(t)
        if rank == 0:
            queue.put((time.time() - t0) / repeats)
    finally:
        distributed.close()


def allreduce(numel=6_044_624, repeats=20):
    """One JSON line: the mean time of one gloo all_reduce of numel float32 (default: the gradients of the
    model above) between 2 processes. Usage: python benchmarks/distributed_cpu.py allreduce"""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    queue = mp.get_context("spawn").SimpleQueue()
    mp.spawn(_allreduce_worker, args=(2, port, numel, repeats, queue), nprocs=2, join=True)
    print(json.dumps({"run": "gloo all_reduce, 2 processes", "numel": numel, "MB": numel * 4 / 1e6,
                      "seconds": queue.get(), "load_1min": os.getloadavg()[0]}), flush=True)


def main(steps=40, repeats=2, runs="1x1,1x2,2x1"):
    config = config_for("cpu", bpe_merges=2000, max_steps=steps, minutes=60)
    data = prepare_data(config, load_synthetic(5000, 100, 10, seed=0), progress=False)
    for repeat in range(repeats):
        for world, threads in (map(int, r.split("x")) for r in runs.split(",")):
            name = f"{world} process(es) x {threads} thread(s)" + (" (gloo, DDP)" if world > 1 else "")
            cfg = dataclasses.replace(config, accumulate=2 // world)  # 2 batches a step in every run
            if world == 1:
                torch.set_num_threads(threads)
                result = timed_train(cfg, data)
            else:
                with socket.socket() as s:
                    s.bind(("127.0.0.1", 0))
                    port = s.getsockname()[1]
                queue = mp.get_context("spawn").SimpleQueue()
                mp.spawn(_worker, args=(world, port, cfg, data, queue), nprocs=world, join=True)
                result = queue.get()
            print(json.dumps({"run": name, "repeat": repeat, "load_1min": os.getloadavg()[0], **result}),
                  flush=True)


def _runs(text: str) -> str:
    """An argument type: a comma list of PROCESSESxTHREADS, each at least 1 (e.g. 1x1,2x1)."""
    import argparse
    if not all(re.fullmatch(r"[1-9]\d*x[1-9]\d*", r) for r in text.split(",")):
        raise argparse.ArgumentTypeError(f"expected a comma list of PROCESSESxTHREADS such as 1x1,2x1, "
                                         f"got {text!r}")
    return text


def _arguments(argv):
    """main's arguments from the command line; a bad one is one line and exit status 2 (solutions.cli)."""
    from solutions.cli import Parser, number
    parser = Parser(prog="python benchmarks/distributed_cpu.py",
                    description="CPU scaling of training from 1 to 2 gloo processes (or: ... allreduce, the "
                    "time of one gloo all_reduce of the model's gradients)")
    parser.add_argument("steps", nargs="?", type=number(int, 1), default=40,
                        help="optimizer steps a run (default: 40)")
    parser.add_argument("repeats", nargs="?", type=number(int, 1), default=2,
                        help="times each run is repeated, in turns (default: 2)")
    parser.add_argument("runs", nargs="?", type=_runs, default="1x1,1x2,2x1",
                        help="a comma list of PROCESSESxTHREADS (default: 1x1,1x2,2x1)")
    args = parser.parse_args(argv)
    return args.steps, args.repeats, args.runs


if __name__ == "__main__":
    if sys.argv[1:] == ["allreduce"]:
        allreduce()
    else:
        main(*_arguments(sys.argv[1:]))
