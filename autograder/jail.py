"""The kernel launcher of `python -m autograder grade`: `python -m autograder.jail CONFIG -- KERNEL ARGV`.

It puts the kernel in its scratch folder with HOME (and TMPDIR, caches) inside it, limits its memory
(RLIMIT_AS, inherited by everything it starts), the size of the files it writes and core dumps, and
marks its environment with the notebook's token (so that the grade command can find and kill every
process it left behind). When the machine allows it (root with CAP_SYS_ADMIN, util-linux's unshare
and setpriv), the kernel also runs in its own mount and PID namespaces:

* every file system is read-only for it except its scratch folder (the course, solutions/, the other
  submissions and the grade command's own files included), /dev/shm is a private tmpfs;
* it sees and can signal only its own processes; when it dies, every process it forked dies with it;
* it keeps no capability (it cannot remount anything writable).

Nothing here limits the number of processes or threads, the CPU time (the grade command's timeouts
do), or the network.
"""
from __future__ import annotations

import json
import os
import resource
import shutil
import subprocess
import sys

SKIP_PREFIXES = ("/proc", "/sys", "/dev")


def _env(cfg) -> None:
    home = cfg["home"]
    for sub in ("tmp", ".cache", ".config", ".ipython", ".local"):
        os.makedirs(os.path.join(home, sub), exist_ok=True)
    threads = str(cfg.get("threads", 1))
    os.environ.update({
        "HOME": home, "TMPDIR": os.path.join(home, "tmp"), "XDG_CACHE_HOME": os.path.join(home, ".cache"),
        "XDG_CONFIG_HOME": os.path.join(home, ".config"), "IPYTHONDIR": os.path.join(home, ".ipython"),
        "MPLCONFIGDIR": os.path.join(home, ".config", "matplotlib"), "MPLBACKEND": "agg",
        "PYTHONDONTWRITEBYTECODE": "1", "AUTOGRADER_TOKEN": cfg["token"], "OMP_NUM_THREADS": threads,
        "MKL_NUM_THREADS": threads, "PYTHONNOUSERSITE": "1",
    })
    os.environ.pop("JPY_PARENT_PID", None)


def _limits(cfg) -> None:
    def set_limit(which, value):
        try:
            soft, hard = resource.getrlimit(which)
            value = value if hard == resource.RLIM_INFINITY else min(value, hard)
            resource.setrlimit(which, (value, value))
        except (ValueError, OSError):
            pass
    if cfg.get("memory"):
        set_limit(resource.RLIMIT_AS, int(cfg["memory"]))
    if cfg.get("file_size"):
        set_limit(resource.RLIMIT_FSIZE, int(cfg["file_size"]))
    set_limit(resource.RLIMIT_CORE, 0)


def isolation_available() -> bool:
    """Whether mount and PID namespaces can be made here (a quick probe, about 20 ms)."""
    if not hasattr(os, "geteuid") or os.geteuid() != 0 or not shutil.which("unshare") or not shutil.which("setpriv"):
        return False
    try:
        probe = subprocess.run(["unshare", "--mount", "--pid", "--fork", "--mount-proc", "--kill-child",
                                "sh", "-c", "mount --bind / / 2>/dev/null; mount -o remount,bind,ro / && "
                                "! touch /.autograder-probe 2>/dev/null"],
                               capture_output=True, timeout=20)
        return probe.returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False


def _mount_points() -> list[str]:
    points = []
    with open("/proc/self/mountinfo") as f:
        for line in f:
            fields = line.split()
            if len(fields) > 4:
                points.append(fields[4].replace("\\040", " "))
    return points


def _inside(cfg, argv) -> None:
    """PID 1 of the new namespaces: make everything but the scratch folder read-only, drop every
    capability, become the kernel."""
    def mount(*args):
        subprocess.run(["mount", *args], check=True, capture_output=True)
    writable = [os.path.realpath(p) for p in cfg["writable"]]
    for p in writable:
        mount("--bind", p, p)
    for point in sorted(set(_mount_points()), key=len, reverse=True):
        if point.startswith(SKIP_PREFIXES) or point in writable:
            continue
        try:
            mount("-o", "remount,bind,ro", point)
        except subprocess.CalledProcessError:
            pass
    try:
        mount("-t", "tmpfs", "-o", "size=256m,mode=1777", "tmpfs", "/dev/shm")
    except subprocess.CalledProcessError:
        pass
    for p in cfg.get("protected", []):
        if os.path.exists(p) and os.access(p, os.W_OK):
            probe = os.path.join(p, ".autograder-write-probe")
            try:
                open(probe, "w").close()
                os.unlink(probe)
                sys.stderr.write(f"autograder.jail: {p} is still writable\n")
                os._exit(70)
            except OSError:
                pass
    _limits(cfg)
    os.chdir(cfg["work"])
    os.execvp("setpriv", ["setpriv", "--bounding-set=-all", "--inh-caps=-all", "--no-new-privs", "--", *argv])


def main(args) -> None:
    cfg_path, rest = args[0], args[1:]
    inside = False
    if rest and rest[0] == "--inside":
        inside, rest = True, rest[1:]
    if rest and rest[0] == "--":
        rest = rest[1:]
    with open(cfg_path) as f:
        cfg = json.load(f)
    if inside:
        _inside(cfg, rest)
        return
    _env(cfg)
    os.chdir(cfg["work"])
    if cfg.get("isolate"):
        os.execvp("unshare", ["unshare", "--mount", "--pid", "--fork", "--kill-child", "--mount-proc",
                              sys.executable, "-m", "autograder.jail", cfg_path, "--inside", "--", *rest])
    _limits(cfg)
    os.execvp(rest[0], rest)


if __name__ == "__main__":
    main(sys.argv[1:])
