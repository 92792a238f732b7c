"""The kernel launcher of `python -m autograder grade`: `python -m autograder.jail CONFIG -- KERNEL ARGV`.

It puts the kernel in its scratch folder with HOME (and TMPDIR, caches) inside it, limits its memory
(RLIMIT_AS, inherited by everything it starts), the size of the files it writes and core dumps, and marks
its environment with the notebook's token (so that the grade command can find and kill what it left
behind). Where the machine allows it (root, util-linux's unshare and setpriv; `isolation_available`), the
kernel also runs:

* in its own mount, PID, network, IPC and UTS namespaces: it sees and can signal only its own processes,
  which all die with it; it has no network (it talks to the grader over Unix sockets in its connection
  folder); its System V and POSIX shared memory is its own;
* as the unprivileged user `nobody` (uid 65534), with no capability and no_new_privs;
* on a file system where everything is read-only but its scratch folders, /tmp, /var/tmp, the batch's
  folder, the course's folder and every folder that `nobody` could not enter (/root) are hidden behind
  empty tmpfs mounts, with only what the kernel needs shown again at the same paths (Python, its packages,
  the course's autograder/, its own scratch and connection folders): the course's .git, tests and lessons
  are not there; /proc/sys, /sys and /dev read-only, /dev/shm private;
* with the course's `solutions/` and `autograder/` replaced by views (autograder/views.py) in which the
  graded lesson's own stage and the later ones have their solutions cleared and their checks reduced to
  what the kernel's side needs, so that no answer can be borrowed from them.

Nothing here limits the number of processes or threads, or the CPU time (the grade command's time limits do).
The threat model is in autograder/GRADING.md.
"""
from __future__ import annotations

import json
import os
import resource
import shutil
import subprocess
import sys
import sysconfig

NOBODY = 65534
HIDDEN_ALWAYS = ("/tmp", "/var/tmp")
READ_ONLY_PROC = ("/proc/sys", "/proc/sysrq-trigger", "/proc/irq", "/proc/bus", "/proc/fs")


#: What the kernel keeps of the grade command's environment; everything else is dropped. The grader's
#: environment is not the learner's: it may hold secrets (a CI's tokens), and settings that name folders the
#: kernel cannot reach. One found in a full test run: importing torch._dynamo in the grader's own process sets
#: TORCHINDUCTOR_CACHE_DIR=/tmp/torchinductor_root, and a kernel that inherited it failed every import of
#: torch._dynamo (an optimizer's first step, meta tensors) with PermissionError, then "already registered".
KEPT_ENV = ("PATH", "LANG", "LANGUAGE", "TZ", "TERM", "PYTHONPATH", "PYTHONHASHSEED", "PYTHONIOENCODING",
            "JUPYTER_PATH", "VIRTUAL_ENV", "CONDA_PREFIX", "PYENV_VERSION")


def kernel_env(cfg, parent=None) -> dict:
    """The kernel's whole environment: KEPT_ENV and LC_* from `parent` (os.environ by default), then the
    kernel's own folders (HOME, TMPDIR, the caches of XDG, matplotlib and torch's compilers), one thread per
    library, and the grading token."""
    parent = os.environ if parent is None else parent
    home = cfg["home"]
    threads = str(cfg.get("threads", 1))
    cache = os.path.join(home, ".cache")
    env = {k: v for k, v in parent.items() if k in KEPT_ENV or k.startswith("LC_")}
    env.update({
        "HOME": home, "TMPDIR": os.path.join(home, "tmp"),
        "XDG_CACHE_HOME": cache, "XDG_CONFIG_HOME": os.path.join(home, ".config"),
        "IPYTHONDIR": os.path.join(home, ".ipython"), "MPLCONFIGDIR": os.path.join(home, ".config", "matplotlib"),
        "MPLBACKEND": "agg", "TORCHINDUCTOR_CACHE_DIR": os.path.join(cache, "torchinductor"),
        "TRITON_CACHE_DIR": os.path.join(cache, "triton"), "PYTHONDONTWRITEBYTECODE": "1",
        "AUTOGRADER_TOKEN": cfg["token"], "OMP_NUM_THREADS": threads, "MKL_NUM_THREADS": threads,
        "PYTHONNOUSERSITE": "1", "JUPYTER_RUNTIME_DIR": cfg.get("conn", home),
    })
    if cfg.get("isolate"):
        env.update(USER="nobody", LOGNAME="nobody")
    else:
        env.update({k: parent[k] for k in ("USER", "LOGNAME") if k in parent})
    return env


def _env(cfg) -> None:
    home = cfg["home"]
    for sub in ("tmp", ".cache", ".config", ".ipython", ".local"):
        os.makedirs(os.path.join(home, sub), exist_ok=True)
    env = kernel_env(cfg)
    os.environ.clear()
    os.environ.update(env)


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


def python_paths() -> list[str]:
    """The folders the kernel's Python needs: its prefixes and its package folders."""
    paths = {sys.prefix, sys.base_prefix, sys.exec_prefix, os.path.dirname(os.path.realpath(sys.executable))}
    for key in ("stdlib", "platstdlib", "purelib", "platlib"):
        p = sysconfig.get_paths().get(key)
        if p:
            paths.add(p)
    for p in sys.path:
        if p and os.path.isdir(p) and not p.startswith(("/tmp", "/var/tmp")):
            paths.add(p)
    return sorted({os.path.realpath(p) for p in paths if os.path.isdir(p)})


def isolation_available() -> bool:
    """Whether the kernels can be jailed here: root, unshare and setpriv, and a probe that starts this
    Python as `nobody` inside the namespaces with the file system arranged as for a kernel (about 1 s)."""
    if not hasattr(os, "geteuid") or os.geteuid() != 0 or not shutil.which("unshare") or not shutil.which("setpriv"):
        return False
    import tempfile
    root = tempfile.mkdtemp(prefix="autograder-probe-")
    try:
        work = os.path.join(root, "work")
        os.makedirs(work)
        os.chown(work, NOBODY, NOBODY)
        course = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        cfg = {"work": work, "home": work, "conn": work, "writable": [work], "token": "probe", "isolate": True,
               "hide": [root], "show": python_paths() + [course], "threads": 1}
        path = os.path.join(root, "jail.json")
        with open(path, "w") as f:
            json.dump(cfg, f)
        probe = ("import os, socket, sys, torch\n"
                 "assert os.getuid() == 65534, os.getuid()\n"
                 "assert not os.path.exists(sys.argv[1])\n"
                 "try:\n    open('/etc/autograder-probe', 'w')\nexcept OSError:\n    pass\nelse:\n    sys.exit(3)\n"
                 "try:\n    socket.create_connection(('127.0.0.1', 22), timeout=0.5)\nexcept OSError:\n    pass\n"
                 "open(os.path.join(os.getcwd(), 'ok'), 'w').write('ok')\n")
        out = subprocess.run([sys.executable, "-m", "autograder.jail", path, "--", sys.executable, "-c", probe,
                              os.path.join(root, "jail.json")], capture_output=True, timeout=120, cwd=course,
                             env=dict(os.environ, PYTHONPATH=course))
        if os.environ.get("AUTOGRADER_DEBUG"):
            sys.stderr.write(out.stdout.decode(errors="replace") + out.stderr.decode(errors="replace"))
        return out.returncode == 0 and os.path.exists(os.path.join(work, "ok"))
    except (OSError, subprocess.SubprocessError):
        return False
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _mount_points() -> list[str]:
    points = []
    with open("/proc/self/mountinfo") as f:
        for line in f:
            fields = line.split()
            if len(fields) > 4:
                points.append(fields[4].replace("\\040", " "))
    return points


def _mount(*args, fds=()) -> None:
    subprocess.run(["mount", *args], check=True, capture_output=True, pass_fds=fds)


def _under(path: str, top: str) -> bool:
    return path == top or path.startswith(top.rstrip("/") + "/")


def _hidden_tops(cfg, shown: list[str]) -> list[str]:
    """The folders to hide behind a tmpfs: /tmp, /var/tmp, the batch's folder, and every folder above
    something shown that `nobody` may not enter."""
    tops = {p for p in HIDDEN_ALWAYS if os.path.isdir(p)}
    tops |= {os.path.realpath(p) for p in cfg.get("hide", []) if os.path.isdir(p)}
    for path in shown:
        parts = path.strip("/").split("/")
        for i in range(1, len(parts) + 1):
            above = "/" + "/".join(parts[:i])
            try:
                if not os.stat(above).st_mode & 0o001:
                    tops.add(above)
                    break
            except OSError:
                break
    # the outermost only: what lies below a hidden folder is hidden with it
    return sorted(t for t in tops if not any(t != o and _under(t, o) for o in tops))


def _inside(cfg, argv) -> None:
    """PID 1 of the new namespaces: arrange the file system, drop to nobody, become the kernel."""
    writable = [os.path.realpath(p) for p in cfg["writable"]]
    shown = sorted({os.path.realpath(p) for p in cfg.get("show", [])} | set(writable), key=len)
    fds = {p: os.open(p, os.O_PATH | os.O_DIRECTORY) for p in shown if os.path.isdir(p)}
    views = {os.path.realpath(point): os.open(src, os.O_PATH | os.O_DIRECTORY)
             for point, src in (cfg.get("views") or {}).items()}
    tops = _hidden_tops(cfg, shown)
    for top in tops:
        _mount("-t", "tmpfs", "-o", "mode=0755,size=64m,nosuid,nodev", "tmpfs", top)
    for path, fd in fds.items():  # shown again at the same path, now that what was around it is hidden
        if any(_under(path, t) for t in tops):
            os.makedirs(path, exist_ok=True)
            _mount("--no-canonicalize", "--rbind", f"/proc/self/fd/{fd}", path, fds=(fd,))
    for point, fd in views.items():  # the course's solutions/ and autograder/ as the graded lesson may see them
        os.makedirs(point, exist_ok=True)
        _mount("--no-canonicalize", "--bind", f"/proc/self/fd/{fd}", point, fds=(fd,))
    for p in writable:
        _mount("--bind", p, p)
    for p in READ_ONLY_PROC:
        if os.path.exists(p):
            try:
                _mount("--bind", p, p)
            except subprocess.CalledProcessError:
                pass
    for point in sorted(set(_mount_points()), key=len, reverse=True):
        if point in writable or point == "/proc" or point in tops and point in HIDDEN_ALWAYS:
            continue
        try:
            _mount("-o", "remount,bind,ro,nosuid", point)
        except subprocess.CalledProcessError:
            pass
    try:
        _mount("-t", "tmpfs", "-o", "size=64m,mode=1777,nosuid,nodev", "tmpfs", "/dev/shm")
    except subprocess.CalledProcessError:
        pass
    for p in cfg.get("protected", []):  # a last look: nothing of the course or the submissions is writable
        if os.path.isdir(p):
            try:
                probe = os.path.join(p, ".autograder-write-probe")
                open(probe, "w").close()
                os.unlink(probe)
                sys.stderr.write(f"autograder.jail: {p} is still writable\n")
                os._exit(70)
            except OSError:
                pass
    if "-f" in argv:  # the kernel's connection file, written by the grade command as root
        conn = argv[argv.index("-f") + 1]
        if os.path.exists(conn):
            os.chown(conn, NOBODY, NOBODY)
    for fd in list(fds.values()) + list(views.values()):
        os.close(fd)
    _limits(cfg)
    os.chdir(cfg["work"])
    os.execvp("setpriv", ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups",
                          "--bounding-set=-all", "--inh-caps=-all", "--no-new-privs", "--", *argv])


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
        os.execvp("unshare", ["unshare", "--mount", "--pid", "--net", "--ipc", "--uts", "--fork", "--kill-child",
                              "--mount-proc", "--propagation", "private",
                              sys.executable, "-m", "autograder.jail", cfg_path, "--inside", "--", *rest])
    _limits(cfg)
    os.execvp(rest[0], rest)


if __name__ == "__main__":
    main(sys.argv[1:])
