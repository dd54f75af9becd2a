"""Which of a few directories had a subdirectory come, go or move since last asked (Linux inotify over ctypes).

The standalone agent's cgroup pod discovery watches the kubepods tier directories and each pod's directory with
it instead of listing them every few seconds, as cAdvisor's raw container watcher does: the kubelet and the
runtime make and remove cgroups with mkdir/rmdir, which go through the VFS (`vfs_mkdir` -> fsnotify) on cgroupfs
(kernfs) as on any filesystem, so the events arrive without a listing. Asking costs one non-blocking `read`
(EAGAIN when nothing happened), which is why no event loop integration is needed: the caller asks once a cycle.

Only directory events count: a cgroup's interface files are files and its child cgroups directories, and a
file created in a watched directory (a test fixture writing `cpu.stat`) is no change to the tree.
"""

from __future__ import annotations

import ctypes
import errno
import logging
import os
import struct
from collections.abc import Callable

log = logging.getLogger("loadline.agent.inotify")

# <sys/inotify.h>; the values are the same on every Linux architecture.
IN_MOVED_FROM = 0x00000040
IN_MOVED_TO = 0x00000080
IN_CREATE = 0x00000100
IN_DELETE = 0x00000200
IN_DELETE_SELF = 0x00000400
IN_MOVE_SELF = 0x00000800
IN_UNMOUNT = 0x00002000
IN_Q_OVERFLOW = 0x00004000
IN_IGNORED = 0x00008000
IN_ONLYDIR = 0x01000000
IN_ISDIR = 0x40000000
# inotify_init1's flags are O_NONBLOCK and O_CLOEXEC by definition (IN_NONBLOCK, IN_CLOEXEC).
IN_NONBLOCK = os.O_NONBLOCK
IN_CLOEXEC = os.O_CLOEXEC

CHILD_EVENTS = IN_CREATE | IN_DELETE | IN_MOVED_FROM | IN_MOVED_TO
SELF_EVENTS = IN_DELETE_SELF | IN_MOVE_SELF | IN_UNMOUNT | IN_IGNORED
WATCH_MASK = CHILD_EVENTS | IN_DELETE_SELF | IN_MOVE_SELF | IN_ONLYDIR  # ONLYDIR: a path that is a file fails

_EVENT = struct.Struct("iIII")  # struct inotify_event: wd, mask, cookie, len; then `len` bytes of name
_READ_SIZE = 64 * 1024  # ~700 events of a 64-digit name; a fuller queue is read again at once
_MAX_EVENT = _EVENT.size + 256  # NAME_MAX and its NUL: a read shorter than the buffer by this left nothing queued

AddWatch = Callable[[int, bytes, int], int]


class _Libc:
    """The three calls, from the C library the interpreter runs on."""

    def __init__(self) -> None:
        libc = ctypes.CDLL(None, use_errno=True)
        self.init1: Callable[[int], int] = libc.inotify_init1  # AttributeError where the libc lacks inotify
        self.add_watch: AddWatch = libc.inotify_add_watch
        self.rm_watch: Callable[[int, int], int] = libc.inotify_rm_watch
        libc.inotify_init1.argtypes = [ctypes.c_int]
        libc.inotify_add_watch.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_uint32]
        libc.inotify_rm_watch.argtypes = [ctypes.c_int, ctypes.c_int]
        for f in (libc.inotify_init1, libc.inotify_add_watch, libc.inotify_rm_watch):
            f.restype = ctypes.c_int


class DirectoryWatch:
    """An inotify instance watching some directories for subdirectories that come, go or move.

    `changed()` says which watched directories had such an event since it was last called; None when inotify is
    not available here or has failed (`error` says why): the caller then lists the directories itself.
    """

    def __init__(self) -> None:
        self.fd = -1
        self.error: str | None = None
        self._wds: dict[str, int] = {}  # path -> watch descriptor
        self._paths: dict[int, str] = {}  # and back: the kernel's events name the descriptor
        try:
            self._libc = _Libc()
        except (OSError, AttributeError) as exc:  # no libc by that name, or one without inotify (non-Linux)
            self.error = f"inotify not in the C library: {exc}"
            return
        fd = self._libc.init1(IN_NONBLOCK | IN_CLOEXEC)
        if fd < 0:
            # ENOSYS (a seccomp profile or an emulator without inotify), EMFILE (max_user_instances reached)
            self.error = f"inotify_init1: {os.strerror(ctypes.get_errno())}"
            return
        self.fd = fd

    @property
    def available(self) -> bool:
        return self.fd >= 0

    @property
    def watched(self) -> frozenset[str]:
        return frozenset(self._wds)

    def watch(self, path: str) -> bool:
        """Watch `path` (again: a no-op). False if it could not be watched: `error` says why, unless the path is
        simply not there (ENOENT, ENOTDIR): a directory that is gone is no failure of the watch."""
        if path in self._wds:
            return True
        if self.fd < 0:
            return False
        wd = self._libc.add_watch(self.fd, os.fsencode(path), WATCH_MASK)
        if wd < 0:
            code = ctypes.get_errno()
            if code not in (errno.ENOENT, errno.ENOTDIR):
                # ENOSPC: fs.inotify.max_user_watches reached; EACCES: not ours to read
                self.error = f"inotify_add_watch {path}: {os.strerror(code)}"
            return False
        # Two paths of one directory (a bind mount) share a descriptor: the later path names its events.
        self._wds[path] = wd
        self._paths[wd] = path
        return True

    def unwatch(self, path: str) -> None:
        wd = self._wds.pop(path, None)
        if wd is None:
            return
        if self._paths.get(wd) == path:
            del self._paths[wd]
        if self.fd >= 0 and wd not in self._wds.values():
            # EINVAL when the kernel has removed it already (the directory is gone; its IN_IGNORED is queued)
            self._libc.rm_watch(self.fd, wd)

    def changed(self) -> frozenset[str] | None:
        """The watched directories that had a subdirectory created, deleted or moved in or out, or were themselves
        deleted or moved, since the last call; every watched directory after a queue overflow (events were lost:
        any of them may have changed). None when inotify is not available or reading it failed."""
        if self.fd < 0:
            return None
        out: set[str] = set()
        while True:
            try:
                data = os.read(self.fd, _READ_SIZE)
            except BlockingIOError:  # EAGAIN: nothing (more) queued, the common case
                break
            except OSError as exc:
                self.error = f"reading inotify events: {exc}"
                self.close()
                return None
            if self._parse(data, out):
                out.update(self._wds)
            if len(data) <= _READ_SIZE - _MAX_EVENT:  # the next event would have fitted: drained, no EAGAIN read
                break
        return frozenset(out)

    def _parse(self, data: bytes, out: set[str]) -> bool:
        """Adds the directories the events in `data` name to `out`; True on a queue overflow."""
        overflow = False
        offset = 0
        while offset + _EVENT.size <= len(data):
            wd, mask, _cookie, length = _EVENT.unpack_from(data, offset)
            offset += _EVENT.size + length
            if mask & IN_Q_OVERFLOW:
                overflow = True
                continue
            if not mask & (SELF_EVENTS | IN_ISDIR):  # a file came or went: no child cgroup
                continue
            path = self._paths.get(wd)
            if path is None:  # unwatched before its events were read
                continue
            out.add(path)
            if mask & IN_IGNORED:  # the kernel dropped the watch (directory deleted, or unmounted)
                del self._paths[wd]
                if self._wds.get(path) == wd:
                    del self._wds[path]
        return overflow

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)  # the kernel drops every watch with it
            self.fd = -1
        self._wds.clear()
        self._paths.clear()
