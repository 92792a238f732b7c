"""One notebook's folders in the batch's folder, made before its kernel exists and removed after: the grade
command's side (autograder/kernel.py, autograder/grade.py), never imported by the kernel's launcher or the
kernel server. Removing follows no link and does not recurse (`remove_tree`), whatever the kernel left there.
The threat model is in autograder/GRADING.md.
"""
from __future__ import annotations

import errno
import os
import pathlib
import stat
import subprocess

from .jail import NOBODY

# what the kernel may write in all, with isolation: its working folder, HOME and connection folder are on a
# tmpfs of this size (three files of 1 GB, each under FILE_SIZE, filled the grader's disk before)
SCRATCH_MB = int(os.environ.get("AUTOGRADER_SCRATCH_MB", 512))


def notebook_folders(tmp: pathlib.Path, isolated: bool) -> dict[str, pathlib.Path]:
    """The folders of one notebook: `private` (the grade command's and the checker's, never shown to the
    kernel; its `tmp` is the checker's temporary folder), `sock` (the checker's socket: shown to the kernel,
    read-only), and, in `scratch` (with isolation a tmpfs of SCRATCH_MB, made before the kernel exists), the
    kernel's `work`, `home` and `conn` (its connection folder), which are the kernel user's, and `sealed` (the
    grading user's, 0700: the runner's links to the kernel's sockets, seal_socket). Nothing here is made,
    changed or removed through a path the kernel can write while it runs."""
    dirs = {name: tmp / name for name in ("private", "sock", "scratch")}
    for d in dirs.values():
        d.mkdir()
    (dirs["private"] / "tmp").mkdir()
    os.chmod(dirs["private"], 0o700)
    os.chmod(dirs["sock"], 0o755)
    if isolated:
        if not mount_scratch(str(dirs["scratch"]), SCRATCH_MB):
            raise RuntimeError("the kernel's folders could not be mounted")
    for name in ("work", "home", "conn"):
        dirs[name] = dirs["scratch"] / name
        dirs[name].mkdir()
    dirs["sealed"] = dirs["scratch"] / "sealed"  # the runner's links to the kernel's sockets (seal_socket)
    dirs["sealed"].mkdir()
    os.chmod(dirs["sealed"], 0o700)
    for sub in ("tmp", ".cache", ".config", ".ipython", ".local"):
        (dirs["home"] / sub).mkdir()
    if isolated:
        for name in ("work", "home", "conn"):
            for p in [dirs[name], *dirs[name].rglob("*")]:
                os.chown(p, NOBODY, NOBODY, follow_symlinks=False)
    return dirs


def remove_folders(tmp: pathlib.Path, problems: list) -> None:
    """Remove one notebook's folders: the kernel's tmpfs detached, the rest removed without following a link
    or recursing (remove_tree); what could not be removed is said in the notebook's problems, never raised."""
    try:
        scratch = tmp / "scratch"
        if os.path.ismount(scratch):
            unmount(str(scratch))
        left = remove_tree(tmp)
    except Exception as e:  # noqa: BLE001
        left = [f"{type(e).__name__}: {e}"]
    if left:
        problems.append(f"the grader could not remove all of the notebook's working files: {left[0][:200]}")


def mount_scratch(path: str, size_mb: int) -> bool:
    """A tmpfs of `size_mb` MB at the (new, empty, root's) folder `path`, for the kernel's writable folders:
    what the kernel writes is bounded by it, and it goes with one unmount. False where it cannot be mounted
    (not root)."""
    try:
        subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={int(size_mb)}m,mode=0711,nosuid,nodev", "tmpfs",
                        path],
                       check=True, capture_output=True)
        return True
    except (OSError, subprocess.CalledProcessError):
        return False


def unmount(path: str) -> bool:
    """Detach the mount at `path` (lazily: it goes when the last process using it has gone)."""
    try:
        subprocess.run(["umount", "--lazy", path], check=True, capture_output=True, timeout=60)
        return True
    except (OSError, subprocess.SubprocessError):
        return False


_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)


def _open_dir(name: str, dir_fd: int) -> int:
    """The folder `name` in dir_fd, never through a link; a folder this user may not read is made readable
    first (not as root, who reads every folder) through the folder itself, never its name."""
    try:
        return os.open(name, _DIR, dir_fd=dir_fd)
    except PermissionError:
        handle = os.open(name, os.O_PATH | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0), dir_fd=dir_fd)
        try:
            if not stat.S_ISDIR(os.fstat(handle).st_mode):
                raise
            os.chmod(f"/proc/self/fd/{handle}", 0o700)
        finally:
            os.close(handle)
        return os.open(name, _DIR, dir_fd=dir_fd)


def remove_tree(path) -> list[str]:
    """Remove the folder `path` and everything in it, whatever its depth and whatever links it holds: no link
    is followed, nothing recursive (a folder's subfolders are moved up into `path` and emptied there, so that
    two folders are open at a time), a mount found inside is detached (as root). Returns what could not be
    removed (never raises: one notebook's folder must not cost the batch its report)."""
    path = os.path.abspath(os.fspath(path))
    errors: list[str] = []
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return errors
    except OSError as e:
        return [f"{path}: {e}"]
    try:
        if not stat.S_ISDIR(st.st_mode):
            os.unlink(path)
            return errors
        parent = os.open(os.path.dirname(path), _DIR)
    except OSError as e:
        return [f"{path}: {e}"]
    name, top = os.path.basename(path), None
    try:
        top = _open_dir(name, parent)
        here = os.fstat(top)
        if (here.st_dev, here.st_ino) != (st.st_dev, st.st_ino):
            raise OSError(f"{path} changed while it was removed")
        moved = [0]  # the folders moved up into `path` so far (their new names: .removed-N)
        while True:
            removed = 0
            with os.scandir(top) as entries:
                batch = [(e.name, e.is_dir(follow_symlinks=False)) for _, e in zip(range(4096), entries)]
            if not batch:
                break
            for entry, is_dir in batch:
                try:
                    if not is_dir:
                        os.unlink(entry, dir_fd=top)
                        removed += 1
                        continue
                    _empty_folder(top, entry, here.st_dev, moved)
                    os.rmdir(entry, dir_fd=top)
                    removed += 1
                except OSError as e:
                    if len(errors) < 20:
                        errors.append(f"{os.path.join(path, entry)}: {e}")
            if not removed:
                break
        os.close(top)
        top = None
        os.rmdir(name, dir_fd=parent)
    except OSError as e:
        errors.append(f"{path}: {e}")
    finally:
        if top is not None:
            os.close(top)
        os.close(parent)
    return errors


def _empty_folder(top: int, entry: str, dev: int, moved: list) -> None:
    """Empty the folder `entry` of the open folder `top` (remove_tree's): a mount there detached first (as
    root), its files removed, its folders moved up into `top` under new names (.removed-N, `moved` counting
    them)."""
    sub = _open_dir(entry, top)
    try:
        if os.fstat(sub).st_dev != dev:  # a mount: detached, then its (empty) folder removed
            os.close(sub)
            sub = None
            if os.geteuid() == 0:
                unmount(f"/proc/self/fd/{top}/{entry}")
            sub = _open_dir(entry, top)
            if os.fstat(sub).st_dev != dev:
                raise OSError(f"a mount that could not be detached: {entry}")
        while True:  # emptied: files removed, folders moved up under new names
            with os.scandir(sub) as inner:
                children = [(c.name, c.is_dir(follow_symlinks=False)) for _, c in zip(range(4096), inner)]
            if not children:
                break
            for child, child_is_dir in children:
                if not child_is_dir:
                    os.unlink(child, dir_fd=sub)
                    continue
                while True:
                    moved[0] += 1
                    try:
                        os.rename(child, f".removed-{moved[0]}", src_dir_fd=sub, dst_dir_fd=top)
                        break
                    except OSError as e:
                        if e.errno not in (errno.EEXIST, errno.ENOTEMPTY, errno.EISDIR, errno.ENOTDIR):
                            raise
    finally:
        if sub is not None:
            os.close(sub)
