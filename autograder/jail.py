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

In a batch, the kernels are forked by the batch's kernel server (`python -m autograder.jail --serve SOCKET`,
below) instead, into the same jail.

Nothing here limits the number of processes or threads, or the CPU time (the grade command's time limits do).
The threat model is in autograder/GRADING.md.
"""
from __future__ import annotations

import json
import os
import resource
import select
import shutil
import signal
import subprocess
import sys
import sysconfig
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .records import JailSpec

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


def _spec(cfg) -> JailSpec:
    """The jail's spec (records.JailSpec) from its file's path or its JSON. records is imported here, never
    when this module is: the kernel server holds nothing of autograder but this module and forkserver
    (serve)."""
    from .records import JailSpec
    if isinstance(cfg, JailSpec):
        return cfg
    return JailSpec.from_json(cfg) if isinstance(cfg, dict) else JailSpec.read(cfg)


def kernel_env(cfg, parent=None) -> dict:
    """The kernel's whole environment: KEPT_ENV and LC_* from `parent` (os.environ by default), then the
    kernel's own folders (HOME, TMPDIR, the caches of XDG, matplotlib and torch's compilers), one thread per
    library, and the grading token. `cfg`: the jail's spec (or its JSON)."""
    parent = os.environ if parent is None else parent
    cfg = _spec(cfg)
    home = cfg.home
    threads = str(cfg.threads)
    cache = os.path.join(home, ".cache")
    env = {k: v for k, v in parent.items() if k in KEPT_ENV or k.startswith("LC_")}
    env.update({
        "HOME": home, "TMPDIR": os.path.join(home, "tmp"),
        "XDG_CACHE_HOME": cache, "XDG_CONFIG_HOME": os.path.join(home, ".config"),
        "IPYTHONDIR": os.path.join(home, ".ipython"),
        "MPLCONFIGDIR": os.path.join(home, ".config", "matplotlib"),
        "MPLBACKEND": "agg", "TORCHINDUCTOR_CACHE_DIR": os.path.join(cache, "torchinductor"),
        "TRITON_CACHE_DIR": os.path.join(cache, "triton"), "PYTHONDONTWRITEBYTECODE": "1",
        "AUTOGRADER_TOKEN": cfg.token, "OMP_NUM_THREADS": threads, "MKL_NUM_THREADS": threads,
        "PYTHONNOUSERSITE": "1", "JUPYTER_RUNTIME_DIR": cfg.conn or home,
        # as under nbgrader autograde: the lessons' demonstrations run short
        "NBGRADER_EXECUTION": "autograde",
    })
    if cfg.isolate:
        env.update(USER="nobody", LOGNAME="nobody")
    else:
        env.update({k: parent[k] for k in ("USER", "LOGNAME") if k in parent})
    return env


def _env(cfg, env=None) -> None:
    home = cfg.home
    for sub in ("tmp", ".cache", ".config", ".ipython", ".local"):
        os.makedirs(os.path.join(home, sub), exist_ok=True)
    env = kernel_env(cfg) if env is None else env
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
    if cfg.memory:
        set_limit(resource.RLIMIT_AS, int(cfg.memory))
    if cfg.file_size:
        set_limit(resource.RLIMIT_FSIZE, int(cfg.file_size))
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
    if not hasattr(os, "geteuid") or os.geteuid() != 0 or not shutil.which("unshare") or \
            not shutil.which("setpriv"):
        return False
    import tempfile
    root = tempfile.mkdtemp(prefix="autograder-probe-")
    try:
        work = os.path.join(root, "work")
        os.makedirs(work)
        os.chown(work, NOBODY, NOBODY)
        course = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        path = os.path.join(root, "jail.json")
        from .records import JailSpec
        JailSpec(work=work, home=work, conn=work, writable=[work], token="probe", isolate=True, hide=[root],
                 show=python_paths() + [course], threads=1).write(path)
        probe = ("import os, socket, sys, torch\nassert os.getuid() == 65534, os.getuid()\nassert not "
                 "os.path.exists(sys.argv[1])\ntry:\n    open('/etc/autograder-probe', 'w')\nexcept "
                 "OSError:\n    pass\nelse:\n    sys.exit(3)\ntry:\n    "
                 "socket.create_connection(('127.0.0.1', 22), timeout=0.5)\nexcept OSError:\n    "
                 "pass\nopen(os.path.join(os.getcwd(), 'ok'), 'w').write('ok')\n")
        out = subprocess.run([sys.executable, "-m", "autograder.jail", path, "--", sys.executable, "-c",
                              probe,
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
    tops |= {os.path.realpath(p) for p in cfg.hide if os.path.isdir(p)}
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


def _inside(cfg, argv, forked: bool = False) -> None:
    """PID 1 of the new namespaces: arrange the file system, drop to nobody, become the kernel (`forked`:
    return once the file system is arranged, still root, for _drop_privileges and _kernel)."""
    writable = [os.path.realpath(p) for p in cfg.writable]
    shown = sorted({os.path.realpath(p) for p in cfg.show} | set(writable), key=len)
    fds = {p: os.open(p, os.O_PATH | os.O_DIRECTORY) for p in shown if os.path.isdir(p)}
    views = {os.path.realpath(point): os.open(src, os.O_PATH | os.O_DIRECTORY)
             for point, src in (cfg.views or {}).items()}
    tops = _hidden_tops(cfg, shown)
    for top in tops:
        _mount("-t", "tmpfs", "-o", "mode=0755,size=64m,nosuid,nodev", "tmpfs", top)
    for path, fd in fds.items():  # shown again at the same path, now that what was around it is hidden
        if any(_under(path, t) for t in tops):
            os.makedirs(path, exist_ok=True)
            _mount("--no-canonicalize", "--rbind", f"/proc/self/fd/{fd}", path, fds=(fd,))
    # the course's solutions/ and autograder/ as the graded lesson may see them
    for point, fd in views.items():
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
    for p in cfg.protected:  # a last look: nothing of the course or the submissions is writable
        if os.path.isdir(p):
            try:
                probe = os.path.join(p, ".autograder-write-probe")
                open(probe, "w").close()
                os.unlink(probe)
                sys.stderr.write(f"autograder.jail: {p} is still writable\n")
                os._exit(70)
            except OSError:
                pass
    if "-f" in argv:  # the kernel's connection file, written by the grade command as root (no link followed)
        conn = argv[argv.index("-f") + 1]
        if os.path.lexists(conn):
            os.chown(conn, NOBODY, NOBODY, follow_symlinks=False)
    for fd in list(fds.values()) + list(views.values()):
        os.close(fd)
    _limits(cfg)
    os.chdir(cfg.work)
    if forked:
        return
    os.execvp("setpriv", ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups",
                          "--bounding-set=-all", "--inh-caps=-all", "--no-new-privs", "--", *argv])


# --------------------------------------------------------------------------- a batch's kernels, forked
# Starting a kernel costs about 3 CPU seconds of imports (PyTorch, ipykernel) before its first cell. In a
# batch, the grade command starts `python -m autograder.jail --serve SOCKET` once (serve): a root process with
# an environment of the kept variables only, which imports PyTorch and ipykernel, nothing of the course but
# this module, and then only forks. Each kernel's launcher (main, with "server" in its config) hands it the
# config, the kernel's argv and its own standard streams; the fork (_bridge) enters new namespaces, forks PID
# 1 (_forked_kernel), which arranges the file system as _inside does, drops to nobody in-process as setpriv
# would (_drop_privileges, verified from /proc/self/status) and runs the kernel. The launcher forwards signals
# to it and exits with it; when the launcher dies, the kernel is killed. Without the server, or where it
# cannot be reached, the launcher starts the kernel itself, as above.
CLONE_NEWNS, CLONE_NEWUTS, CLONE_NEWIPC, CLONE_NEWPID, CLONE_NEWNET = (
    0x20000, 0x4000000, 0x8000000, 0x20000000, 0x40000000)
MS_REC, MS_PRIVATE = 0x4000, 0x40000
PR_SET_PDEATHSIG, PR_SET_DUMPABLE, PR_CAPBSET_DROP, PR_SET_NO_NEW_PRIVS, PR_CAP_AMBIENT = 1, 4, 24, 38, 47
FORWARDED = ("SIGINT", "SIGTERM", "SIGHUP", "SIGQUIT", "SIGUSR1", "SIGUSR2")


def _libc():
    import ctypes
    return ctypes.CDLL(None, use_errno=True)


def _check(result: int, what: str) -> None:
    if result != 0:
        import ctypes
        raise OSError(ctypes.get_errno(), f"{what} failed")


def serve(control: str) -> None:
    """The batch's kernel server: import what every kernel imports, print "ready", then fork a _bridge for
    each connection to `control`, until its standard input closes (the grade command ended)."""
    import ipykernel.kernelapp  # noqa: F401
    import torch  # noqa: F401  (what the fork saves each kernel)

    from autograder.forkserver import serve_forks
    course = [m for m in sys.modules if m.split(".")[0] in ("solutions", "tests") or
              m.startswith("autograder.") and m not in ("autograder.jail", "autograder.forkserver")]
    if course:  # the kernels inherit this memory: nothing of the course's answers or checks may be in it
        sys.stderr.write(f"autograder.jail: the kernel server imported {course}\n")
        os._exit(70)
    serve_forks(control, _bridge, "autograder.jail")


def _bridge(conn) -> None:
    """Forked by serve() for one kernel: read {"config", "argv"} and the launcher's standard streams, enter
    new mount, PID, network, IPC and UTS namespaces (as `unshare` does), fork the kernel as their PID 1, then
    pass signals from the launcher to it and its exit status back; the kernel is killed when the launcher's
    end closes."""
    os.setsid()
    cfg, argv = _bridge_request(conn)
    libc = _libc()
    _check(libc.unshare(CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWNET | CLONE_NEWIPC | CLONE_NEWUTS), "unshare")
    # what `unshare --propagation private` does; by the C library, as the first child forked from here is the
    # namespaces' PID 1 (a `mount` process would be, and with it gone, no other could be forked)
    _check(libc.mount(None, b"/", None, MS_REC | MS_PRIVATE, None), "mount --make-rprivate /")
    alive, alive_w = os.pipe()  # the kernel sees end of file on `alive` once this process is gone
    # and writes to `started_w` once it is jailed, just before it becomes the kernel
    started, started_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            conn.close()
            os.close(alive_w)
            os.close(started)
            _forked_kernel(cfg, argv, alive, started_w)
        except BaseException as e:  # noqa: BLE001
            sys.stderr.write(f"autograder.jail: the kernel did not start: {type(e).__name__}: {e}\n")
        finally:
            os._exit(70)
    os.close(started_w)
    _watch_kernel(conn, pid, started)


def _bridge_request(conn) -> tuple[JailSpec, list[str]]:
    """The launcher's request (its jail spec and the kernel's argv), and its three standard streams made this
    process's; the kernel's environment and working folder set."""
    import socket
    conn.settimeout(30)
    data, streams, _, _ = socket.recv_fds(conn, 65536, 3)
    conn.settimeout(None)
    request = json.loads(data)
    cfg = _spec(request["config"])
    argv = [str(a) for a in request["argv"]]
    if not cfg.isolate or len(streams) != 3:
        raise RuntimeError("a kernel server forks isolated kernels only, with their three standard streams")
    for fd, stream in zip((0, 1, 2), streams):
        os.dup2(stream, fd)
        os.close(stream)
    _env(cfg, request["env"])
    os.chdir(cfg.work)
    return cfg, argv


def _watch_kernel(conn, pid: int, started: int) -> None:
    """Until the kernel `pid` exits (its status then sent to the launcher) or the launcher's end closes (the
    kernel then killed): "running" to the launcher once the kernel is jailed, and the signals it forwards
    passed on."""
    pending = [started]  # the pipe the kernel writes to once jailed, until it has been read

    # "running" to the launcher, once: before it, a failure lets the launcher start the kernel
    def tell_started():
        if pending[0] is not None and select.select([pending[0]], [], [], 0)[0]:
            if os.read(pending[0], 1) == b"1":
                conn.sendall(b"running\n")
            os.close(pending[0])
            pending[0] = None

    # no thread here: after unshare(CLONE_NEWPID) this process cannot start one; the kernel's end is seen by
    # its pidfd (Linux 5.3), else by polling
    try:
        exited = os.pidfd_open(pid)
    except (AttributeError, OSError):
        exited = None
    buffer = b""
    while True:
        watched = [conn] + [fd for fd in (exited, pending[0]) if fd is not None]
        readable, _, _ = select.select(watched, [], [], 0.5)
        tell_started()
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            try:
                tell_started()
                conn.sendall(f"exit {os.waitstatus_to_exitcode(status)}\n".encode())
            finally:
                os._exit(0)
        if conn not in readable:
            continue
        chunk = conn.recv(4096)
        if not chunk:  # the launcher is gone: so is the kernel, and with it everything in its namespaces
            os.kill(pid, signal.SIGKILL)
            os._exit(0)
        buffer += chunk
        while b"\n" in buffer:
            line, buffer = buffer.split(b"\n", 1)
            word, _, number = line.decode().partition(" ")
            if word == "signal" and number.isdigit() and int(number) in {int(getattr(signal, s)) for s
                                                                         in FORWARDED}:
                os.kill(pid, int(number))


def _forked_kernel(cfg, argv, alive: int, started: int) -> None:
    """PID 1 of the kernel's namespaces, forked by _bridge: /proc of its own, the file system as _inside
    arranges it, nobody's credentials, then the kernel of argv ([python, -m, ipykernel_launcher, -f,
    CONNECTION FILE]). It dies with the bridge (PR_SET_PDEATHSIG, set again after the change of credentials,
    which clears it; a bridge already gone is seen on `alive`); it writes to `started` once jailed, before any
    of the kernel's code."""
    import select
    libc = _libc()
    _check(libc.prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0), "prctl(PR_SET_PDEATHSIG)")
    _mount("-t", "proc", "-o", "nosuid,noexec,nodev", "proc", "/proc")
    _inside(cfg, argv, forked=True)
    _drop_privileges(libc)
    _check(libc.prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0), "prctl(PR_SET_PDEATHSIG)")
    if select.select([alive], [], [], 0)[0]:
        raise RuntimeError("the bridge is gone")
    os.write(started, b"1")
    os.close(started)
    _kernel(cfg, argv)


def _drop_privileges(libc) -> None:
    """What `setpriv --reuid=nobody --regid=nobody --clear-groups --bounding-set=-all --inh-caps=-all
    --no-new-privs` does, in this process; then /proc/self/status must show it, or the kernel does not
    start."""
    import ctypes
    for cap in range(64):  # the bounding set, while CAP_SETPCAP is still held (past the last one: EINVAL)
        libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0)
    _check(libc.prctl(PR_CAP_AMBIENT, 4, 0, 0, 0), "prctl(PR_CAP_AMBIENT_CLEAR_ALL)")
    os.setgroups([])
    os.setresgid(NOBODY, NOBODY, NOBODY)
    os.setresuid(NOBODY, NOBODY, NOBODY)  # from root to nobody: the permitted and effective sets are cleared

    class Header(ctypes.Structure):
        _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]

    class Data(ctypes.Structure):
        _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32),
                    ("inheritable", ctypes.c_uint32)]

    _check(libc.capset(ctypes.byref(Header(0x20080522, 0)), (Data * 2)()), "capset")  # the inheritable set
    _check(libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "prctl(PR_SET_NO_NEW_PRIVS)")
    # changing credentials made this process undumpable (its /proc files root's, unreadable to itself); an
    # exec, as setpriv's, would have made it dumpable again
    _check(libc.prctl(PR_SET_DUMPABLE, 1, 0, 0, 0), "prctl(PR_SET_DUMPABLE)")
    status = dict(line.split(":", 1) for line in open("/proc/self/status").read().splitlines() if ":" in line)
    ids = {key: status[key].split() for key in ("Uid", "Gid")}
    caps = {key: int(status[key], 16) for key in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb")}
    if any(x != str(NOBODY) for v in ids.values() for x in v) or any(caps.values()) or \
            status["NoNewPrivs"].strip() != "1" or status["Groups"].strip() or os.getgroups():
        raise RuntimeError(f"privileges not dropped: {ids} {caps} {status.get('Groups')!r}")


def _kernel(cfg, argv) -> None:
    """Become the kernel `python -m ipykernel_launcher -f CONNECTION FILE` would be, in this process: nothing
    of the server's open files or modules of the course, sys.argv and sys.path as that command gives them."""
    if argv[1:3] != ["-m", "ipykernel_launcher"]:
        raise RuntimeError(f"a kernel server runs ipykernel only, not {argv}")
    os.closerange(3, os.sysconf("SC_OPEN_MAX") if hasattr(os, "sysconf") else 65536)
    for name in [m for m in sys.modules if m == "autograder" or m.startswith("autograder.")]:
        # imported again from the views mounted at the same paths, as the kernel imports them
        del sys.modules[name]
    import importlib.util
    sys.argv = [importlib.util.find_spec(argv[2]).origin, *argv[3:]]
    del sys.path[0]  # the server's working folder, which ipykernel_launcher takes out as well
    import torch
    torch.set_num_threads(int(cfg.threads))
    from ipykernel import kernelapp
    try:
        kernelapp.launch_new_instance()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
    os._exit(0)


def _through_server(cfg, cfg_path: str, argv) -> None:
    """The kernel's launcher in a batch: have serve() at cfg.server fork the kernel, pass signals on to it and
    exit as it does. Returns where the server cannot be reached (the launcher then starts the kernel
    itself)."""
    import socket
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        conn.settimeout(30)
        conn.connect(cfg.server)
        # from this launcher's environment
        request = {"config": cfg_path, "argv": argv, "env": kernel_env(cfg)}
        socket.send_fds(conn, [json.dumps(request).encode()], [0, 1, 2])
        conn.settimeout(None)
    except (OSError, AttributeError) as e:  # AttributeError: no socket.send_fds (Python before 3.9)
        sys.stderr.write(f"autograder.jail: no kernel server ({e}); starting the kernel here\n")
        conn.close()
        return

    def forward(signum, frame):
        try:
            conn.sendall(f"signal {signum}\n".encode())
        except OSError:
            pass
    for name in FORWARDED:
        signal.signal(getattr(signal, name), forward)
    buffer, running = b"", False
    while True:  # until the kernel's exit, or the bridge's end before the kernel ran
        try:
            chunk = conn.recv(4096)
        except InterruptedError:
            continue
        if not chunk:
            if running:
                os._exit(70)  # the bridge died without the kernel's status
            break
        buffer += chunk
        lines = buffer.split(b"\n")
        buffer = lines.pop()
        words = [line.decode().partition(" ") for line in lines]
        running = running or any(word == "running" for word, _, _ in words)
        ends = [code for word, _, code in words if word == "exit"]
        if ends and running:
            os._exit(int(ends[0]) % 256 if ends[0].lstrip("-").isdigit() else 70)
        if ends:
            break
    # the server could not jail this kernel (the namespaces, the mounts or the drop to nobody failed before
    # any of the kernel's code ran): this launcher starts it, as without a server
    sys.stderr.write("autograder.jail: the kernel server could not start the kernel; starting it here\n")
    conn.close()
    for name in FORWARDED:
        signal.signal(getattr(signal, name), signal.SIG_DFL)


def main(args) -> None:
    # the runner that starts this launcher keeps a smaller address space for itself (soft): not the kernel's
    try:
        _, hard = resource.getrlimit(resource.RLIMIT_AS)
        resource.setrlimit(resource.RLIMIT_AS, (hard, hard))
    except (ValueError, OSError):
        pass
    if args[:1] == ["--serve"]:
        serve(args[1])
        return
    cfg_path, rest = args[0], args[1:]
    inside = False
    if rest and rest[0] == "--inside":
        inside, rest = True, rest[1:]
    if rest and rest[0] == "--":
        rest = rest[1:]
    cfg = _spec(cfg_path)
    if inside:
        _inside(cfg, rest)
        return
    if cfg.isolate and cfg.server:
        _through_server(cfg, os.path.abspath(cfg_path), rest)
    _env(cfg)
    os.chdir(cfg.work)
    if cfg.isolate:
        os.execvp("unshare", ["unshare", "--mount", "--pid", "--net", "--ipc", "--uts", "--fork",
                              "--kill-child",
                              "--mount-proc", "--propagation", "private",
                              sys.executable, "-m", "autograder.jail", cfg_path, "--inside", "--", *rest])
    _limits(cfg)
    os.execvp(rest[0], rest)


if __name__ == "__main__":
    main(sys.argv[1:])
