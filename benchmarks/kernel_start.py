"""What a graded notebook's kernel costs to start, and what a kernel forked from a warm process would cost.

    python benchmarks/kernel_start.py [--runs 3]

Each run starts a kernel two ways and runs the same first cell in it (import torch, one backward pass, as
every lesson's first graded cell does), then shuts it down:
- cold: `python -m ipykernel_launcher`, as the grade command, nbval and nbgrader start every kernel today;
- forked: a child of one process that imported torch and ipykernel (and ran a backward pass) once.
It prints each kernel process's CPU seconds (os.wait4) and wall seconds, and the ratio. Neither kernel is
jailed: this measures what a pre-imported kernel (issue 20's remaining lever for the suite's time and for
instructors' batches) could save, not the jail's own cost. Nothing of the course is imported in the warm
process.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

from _args import Parser, whole  # not solutions.cli: see _args.py
from jupyter_client import BlockingKernelClient
from jupyter_client.connect import write_connection_file

FIRST_CELL = ("import torch\nx = torch.ones(3, requires_grad=True)\n(x * 2).sum().backward()\n"
              "assert x.grad.tolist() == [2.0] * 3")


def run_first_cell(connection_file: str) -> None:
    client = BlockingKernelClient(connection_file=connection_file)
    client.load_connection_file()
    client.start_channels()
    try:
        client.wait_for_ready(timeout=120)
        reply = client.execute_interactive(FIRST_CELL, timeout=120, output_hook=lambda msg: None)
        assert reply["content"]["status"] == "ok", reply["content"]
        client.shutdown()
    finally:
        client.stop_channels()


def new_connection_file() -> str:
    path, _ = write_connection_file(os.path.join(tempfile.mkdtemp(prefix="kernel-start-"), "kernel.json"))
    return path


def remove(connection_file: str) -> None:
    shutil.rmtree(os.path.dirname(connection_file), ignore_errors=True)


def cold() -> tuple[float, float]:
    """(wall s, CPU s of the kernel process) for a fresh `python -m ipykernel_launcher`."""
    conn = new_connection_file()
    start = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "ipykernel_launcher", "-f", conn],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    run_first_cell(conn)
    _, _, usage = os.wait4(proc.pid, 0)
    remove(conn)
    return time.perf_counter() - start, usage.ru_utime + usage.ru_stime


def warm_server(requests: int, replies: int) -> None:
    """The warm process: imports once, then forks one kernel per connection file it reads, and answers each
    kernel's CPU seconds once the kernel has exited."""
    import ipykernel.ipkernel  # noqa: F401
    import ipykernel.kernelapp  # noqa: F401
    import torch
    x = torch.ones(1, requires_grad=True)
    (x * 2).sum().backward()  # the first backward pass imports more of torch
    os.write(replies, b"ready\n")
    with os.fdopen(requests, "r") as lines:
        for line in lines:
            pid = os.fork()
            if pid == 0:
                quiet = os.open(os.devnull, os.O_WRONLY)  # as the cold kernel's output goes to DEVNULL
                os.dup2(quiet, 1)
                os.dup2(quiet, 2)
                from ipykernel.kernelapp import IPKernelApp
                IPKernelApp.launch_instance(argv=["-f", line.strip()])
                os._exit(0)
            _, _, usage = os.wait4(pid, 0)
            os.write(replies, (json.dumps(usage.ru_utime + usage.ru_stime) + "\n").encode())
    os._exit(0)


def main() -> None:
    parser = Parser(prog="python benchmarks/kernel_start.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=whole(1), default=3,
                        help="kernels started each way (default: 3)")
    args = parser.parse_args()
    request_read, request_write = os.pipe()   # connection files, to the warm process
    reply_read, reply_write = os.pipe()       # its kernels' CPU seconds, back
    server = os.fork()
    if server == 0:
        os.close(request_write)
        os.close(reply_read)
        warm_server(request_read, reply_write)
    os.close(request_read)
    os.close(reply_write)
    answers = os.fdopen(reply_read, "r")
    assert answers.readline().strip() == "ready"
    print(f"{'run':>3}  {'cold wall s':>11}  {'cold CPU s':>10}  {'forked wall s':>13}  "
          f"{'forked CPU s':>12}  CPU ratio")
    for run in range(1, args.runs + 1):  # in turns, so that a change in the machine's speed hits both
        cold_wall, cold_cpu = cold()
        conn = new_connection_file()
        start = time.perf_counter()
        os.write(request_write, (conn + "\n").encode())
        run_first_cell(conn)
        forked_cpu = json.loads(answers.readline())
        forked_wall = time.perf_counter() - start
        remove(conn)
        print(f"{run:>3}  {cold_wall:11.2f}  {cold_cpu:10.2f}  {forked_wall:13.2f}  {forked_cpu:12.2f}  "
              f"{cold_cpu / forked_cpu:.1f}x")
    os.close(request_write)
    os.waitpid(server, 0)


if __name__ == "__main__":
    main()
