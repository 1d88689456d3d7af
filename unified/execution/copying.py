"""Copying files into and out of confined workspaces without following links out, within a size budget.

Two copies cross the sandbox boundary on the host, outside any sandbox limit (both are done for
adapters by :class:`~unified.execution.workspace.WorkspaceSession` and
:func:`~unified.execution.grader.run_grader`), and a third handles files sandboxed episodes may
have left in a run directory:

- **task files into a workspace** (:func:`copy_confined`): files a benchmark's task folder lists
  (Claw-Eval ``sandbox_files``, QwenClawBench assets). A symlink in the task folder must never
  copy the host file or directory it points to: every path, and every link met while walking a
  directory, must resolve inside the task's checkout (``root``), else :class:`CopyRefused` names
  the file. Links inside the checkout are followed (their content is copied); FIFOs, sockets and
  devices are left out.
- **an agent-written workspace out to a grader** (:func:`copy_workspace`): links are copied as
  links, never followed; special files are left out.
- **one untrusted tree merged into another** (:func:`merge_tree`, ``--merge``'s shard work
  files): only directories and regular files, opened and created relative to their parent's
  descriptor with ``O_NOFOLLOW`` (never a write through a link, whoever put it there), links and
  special files left out and listed, holes kept; the bytes it writes count against its budget.

The first two count every regular file at its *apparent* size (``st_size``): a sparse file uses no disk
blocks in the sandbox but is written out in full by a copy (and read in full by a reader), so
4 x 256 MiB of holes would cost 1 GiB of host ``/tmp``. Past the :class:`CopyBudget` the copy
stops with :class:`CopyBudgetExceeded`, which says how much was asked for; the caller records it.
"""

from __future__ import annotations

import errno
import os
import shutil
import stat
from dataclasses import dataclass, field
from pathlib import Path

MAX_DEPTH = 64
"""Deepest directory nesting a copy walks (a link loop inside the checkout stops here)."""


class CopyRefused(ValueError):
    """A copy that would read outside its root (a link or path out of the task's checkout)."""


class CopyBudgetExceeded(CopyRefused):
    """A copy whose files add up to more than its budget (apparent size, or bytes written for :func:`merge_tree`)."""


@dataclass
class CopyBudget:
    """Bytes a copy may still write (counted as its caller says: apparent size, or bytes written)."""

    limit_bytes: int
    used_bytes: int = 0

    def take(self, size: int, what: str, measure: str = "apparent size") -> None:
        """Count ``size`` bytes of ``what``, or raise :class:`CopyBudgetExceeded` (nothing counted);
        ``measure`` says in the message what the bytes are."""
        if self.used_bytes + size > self.limit_bytes:
            raise CopyBudgetExceeded(
                f"{what}: {size} bytes ({measure}) would take the copy past its budget of "
                f"{self.limit_bytes} bytes ({self.used_bytes} already copied)")
        self.used_bytes += size


def _inside(path: Path, root: Path) -> bool:
    return path == root or root in path.parents


def copy_confined(source: Path, dest: Path, *, root: Path, where: str, budget: CopyBudget | None = None) -> None:
    """Copy the file or directory ``source`` to ``dest``; ``source`` and every link under it must
    resolve inside ``root`` (module docstring, first copy). ``where`` starts every error message."""
    root = Path(root).resolve()
    _copy_confined(Path(source), Path(dest), root, where, budget, depth=0, chain=())


def _copy_confined(source: Path, dest: Path, root: Path, where: str, budget: CopyBudget | None, *, depth: int,
                   chain: tuple[Path, ...]) -> None:
    resolved = source.resolve()
    if not _inside(resolved, root):
        raise CopyRefused(f"{where}: {source} resolves to {resolved}, outside the task's checkout {root}; "
                          "a task file must not copy host files into the workspace")
    try:
        info = os.stat(resolved)
    except OSError as exc:
        raise FileNotFoundError(f"{where}: {source}: {exc.strerror}") from None
    if stat.S_ISDIR(info.st_mode):
        if depth >= MAX_DEPTH or resolved in chain:
            raise CopyRefused(f"{where}: {source}: directory links loop (or nest deeper than {MAX_DEPTH})")
        dest.mkdir(parents=True, exist_ok=True)
        for entry in sorted(os.listdir(resolved)):
            _copy_confined(source / entry, dest / entry, root, where, budget, depth=depth + 1,
                           chain=(*chain, resolved))
    elif stat.S_ISREG(info.st_mode):
        if budget is not None:
            budget.take(info.st_size, f"{where}: {source}")
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(resolved, dest)
    # FIFOs, sockets, devices: left out (a reader that opened one would hang)


def copy_workspace(source: Path, dest: Path, *, budget: CopyBudget, depth: int = 0) -> None:
    """Copy the agent-written tree ``source`` to ``dest`` (module docstring, second copy): links
    as links, special files left out, regular files counted at apparent size against ``budget``;
    directories nested deeper than :data:`MAX_DEPTH` are refused."""
    source, dest = Path(source), Path(dest)
    if depth > MAX_DEPTH:
        raise CopyRefused(f"workspace directory {source} is nested deeper than {MAX_DEPTH} levels")
    dest.mkdir(parents=True, exist_ok=True)
    shutil.copystat(source, dest)
    for entry in sorted(os.scandir(source), key=lambda e: e.name):
        target = dest / entry.name
        info = entry.stat(follow_symlinks=False)
        if stat.S_ISLNK(info.st_mode):
            os.symlink(os.readlink(entry.path), target)
        elif stat.S_ISDIR(info.st_mode):
            copy_workspace(Path(entry.path), target, budget=budget, depth=depth + 1)
        elif stat.S_ISREG(info.st_mode):
            budget.take(info.st_size, f"workspace file {entry.path}")
            shutil.copy2(entry.path, target, follow_symlinks=False)


# --------------------------------------------------------------------------------------------------
# merging one untrusted tree into another (``--merge``'s work files)

_DIR_OPEN = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE_OPEN = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC  # a FIFO opened so never blocks
_CHUNK = 1 << 20


@dataclass
class TreeMerge:
    """What :func:`merge_tree` did; every path is relative to the source (and destination) root."""

    copied: list[str] = field(default_factory=list)
    """Regular files written into the destination."""
    same: list[str] = field(default_factory=list)
    """Files the destination already held with the same bytes (left as they were)."""
    differ: list[str] = field(default_factory=list)
    """Files the destination already held with other bytes (its copy kept)."""
    linked: list[str] = field(default_factory=list)
    """Of ``copied``: hard links of one source file met again, written as hard links of the first copy
    (one file's bytes are written and counted once, however many links it has)."""
    left_out: list[tuple[str, str]] = field(default_factory=list)
    """(path, why) of what was not copied: links, FIFOs, sockets, devices, files past the budget,
    directories nested too deep, a name the destination holds as another kind of file."""


def _kind(mode: int) -> str:
    for test, name in ((stat.S_ISLNK, "a symbolic link"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device")):
        if test(mode):
            return name
    return "not a regular file"


def merge_tree(source: str | os.PathLike[str], dest: str | os.PathLike[str], *, budget: CopyBudget,
               within: str | os.PathLike[str]) -> TreeMerge:
    """Copy the directories and regular files of the untrusted tree ``source`` into ``dest`` without
    replacing anything ``dest`` holds; returns what it did (:class:`TreeMerge`).

    - Never follows a link, on either side: every directory is opened relative to its parent's
      descriptor with ``O_NOFOLLOW``, every file is created with ``O_CREAT | O_EXCL | O_NOFOLLOW``,
      so a link met on the way (even one swapped in during the copy) is an error for that entry,
      never a write through it. Names come from the directory listing: one component each, no
      ``..``; ``dest`` must resolve inside ``within``.
    - Copies only directories and regular files; links, FIFOs (opened ``O_NONBLOCK``: never
      waits for a writer), sockets and devices are left out and listed.
    - Keeps holes: only the data ranges (``SEEK_DATA``/``SEEK_HOLE``) are read, blocks of zeros
      are not written, and the file is extended to its size; every byte written counts against
      ``budget``, and a file that would pass it is removed and listed (the budget is not refilled).
    - Hard links stay hard links: a source file met again under another name (same device and inode)
      becomes a hard link of its first copy, so N links of one file cost its bytes once, not N times.
    - Compares a file the destination already holds by its data ranges: holes in both are equal
      without reading them (16 GiB of holes compare in no time).
    - Permission bits (without set-id bits) and times are copied.
    """
    report = TreeMerge()
    dest = Path(dest)
    root = Path(within).resolve()
    try:
        src_fd = os.open(source, _DIR_OPEN)
    except FileNotFoundError:
        return report
    except OSError as exc:
        report.left_out.append((".", f"{source} is {_kind(os.lstat(source).st_mode)} ({exc.strerror})"))
        return report
    try:
        dest.mkdir(parents=True, exist_ok=True)
        if not _inside(dest.resolve(), root):
            raise CopyRefused(f"{dest} resolves to {dest.resolve()}, outside {root}")
        dst_fd = os.open(dest, _DIR_OPEN)
        try:
            _merge_dir(src_fd, dst_fd, "", report, budget, depth=0, links=_Links(dst_fd))
        finally:
            os.close(dst_fd)
    finally:
        os.close(src_fd)
    return report


@dataclass
class _Links:
    """The destination root's descriptor and, per source (device, inode) with several links, the
    destination path of its first copy."""

    root_fd: int
    first_copy: dict[tuple[int, int], str] = field(default_factory=dict)


def _merge_dir(src_fd: int, dst_fd: int, prefix: str, report: TreeMerge, budget: CopyBudget, *, depth: int,
               links: _Links) -> None:
    for name in sorted(os.listdir(src_fd)):
        rel = prefix + name
        info = os.stat(name, dir_fd=src_fd, follow_symlinks=False)
        if stat.S_ISREG(info.st_mode):
            _merge_file(src_fd, dst_fd, name, rel, report, budget, links)
            continue
        if not stat.S_ISDIR(info.st_mode):
            report.left_out.append((rel, _kind(info.st_mode)))
            continue
        if depth >= MAX_DEPTH:
            report.left_out.append((rel, f"a directory nested deeper than {MAX_DEPTH} levels"))
            continue
        try:
            sub_src = os.open(name, _DIR_OPEN, dir_fd=src_fd)
        except OSError as exc:  # replaced by a link since the listing: ELOOP
            report.left_out.append((rel, f"cannot be opened as a directory ({exc.strerror})"))
            continue
        try:
            try:
                os.mkdir(name, 0o755, dir_fd=dst_fd)
            except FileExistsError:
                pass
            try:
                sub_dst = os.open(name, _DIR_OPEN, dir_fd=dst_fd)
            except OSError as exc:
                report.left_out.append((rel, f"the destination holds it as another kind of file ({exc.strerror})"))
                continue
            try:
                _merge_dir(sub_src, sub_dst, rel + "/", report, budget, depth=depth + 1, links=links)
                os.utime(sub_dst, ns=(info.st_atime_ns, info.st_mtime_ns))
            finally:
                os.close(sub_dst)
        finally:
            os.close(sub_src)


def _merge_file(src_fd: int, dst_fd: int, name: str, rel: str, report: TreeMerge, budget: CopyBudget,
                links: _Links) -> None:
    try:
        fd_in = os.open(name, _FILE_OPEN, dir_fd=src_fd)
    except OSError as exc:  # ELOOP: replaced by a link since the listing
        report.left_out.append((rel, f"cannot be opened ({exc.strerror})"))
        return
    try:
        info = os.fstat(fd_in)
        if not stat.S_ISREG(info.st_mode):
            report.left_out.append((rel, _kind(info.st_mode)))
            return
        inode = (info.st_dev, info.st_ino)
        if info.st_nlink > 1 and inode in links.first_copy and _link_copy(links, inode, dst_fd, name):
            report.copied.append(rel)
            report.linked.append(rel)
            return
        try:
            fd_out = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600,
                             dir_fd=dst_fd)
        except FileExistsError:
            _compare_existing(fd_in, dst_fd, name, rel, report)
            return
        try:
            _copy_data(fd_in, fd_out, info.st_size, budget, rel)
            os.fchmod(fd_out, info.st_mode & 0o777)
            os.utime(fd_out, ns=(info.st_atime_ns, info.st_mtime_ns))
        except CopyBudgetExceeded as exc:
            os.unlink(name, dir_fd=dst_fd)
            report.left_out.append((rel, str(exc)))
            return
        except BaseException:
            os.unlink(name, dir_fd=dst_fd)
            raise
        finally:
            os.close(fd_out)
        report.copied.append(rel)
        if info.st_nlink > 1:
            links.first_copy.setdefault(inode, rel)
    finally:
        os.close(fd_in)


def _link_copy(links: _Links, inode: tuple[int, int], dst_fd: int, name: str) -> bool:
    """Make ``name`` (in ``dst_fd``) a hard link of the first copy of ``inode``; False when it cannot be
    (the name exists, or the first copy is gone): the caller copies or compares as usual."""
    try:
        os.link(links.first_copy[inode], name, src_dir_fd=links.root_fd, dst_dir_fd=dst_fd, follow_symlinks=False)
    except OSError:
        return False
    return True


def _data_ranges(fd: int, size: int):
    """(start, end) of each data range of ``fd`` (the whole file where holes cannot be asked for)."""
    offset = 0
    while offset < size:
        try:
            start = os.lseek(fd, offset, os.SEEK_DATA)
            end = min(os.lseek(fd, start, os.SEEK_HOLE), size)
        except OSError as exc:
            if exc.errno == errno.ENXIO:  # no data after offset: the rest is a hole
                return
            yield offset, size  # the filesystem does not say: read it all
            return
        if start >= size:
            return
        yield start, end
        offset = end


def _copy_data(fd_in: int, fd_out: int, size: int, budget: CopyBudget, rel: str) -> None:
    for start, end in _data_ranges(fd_in, size):
        pos = start
        while pos < end:
            chunk = os.pread(fd_in, min(_CHUNK, end - pos), pos)
            if not chunk:  # the file shrank under us
                break
            if chunk.count(0) != len(chunk):  # a block of zeros stays a hole
                budget.take(len(chunk), f"work file {rel}", "bytes written")
                os.pwrite(fd_out, chunk, pos)
            pos += len(chunk)
    os.ftruncate(fd_out, size)


def _compare_existing(fd_in: int, dst_fd: int, name: str, rel: str, report: TreeMerge) -> None:
    try:
        fd_old = os.open(name, _FILE_OPEN, dir_fd=dst_fd)
    except OSError as exc:  # a directory or a link of that name
        report.left_out.append((rel, f"the destination holds it as another kind of file ({exc.strerror})"))
        return
    try:
        if not stat.S_ISREG(os.fstat(fd_old).st_mode):
            report.left_out.append((rel, "the destination holds it as another kind of file"))
        elif _same_bytes(fd_in, fd_old):
            report.same.append(rel)
        else:
            report.differ.append(rel)
    finally:
        os.close(fd_old)


def _same_bytes(a: int, b: int) -> bool:
    """Whether two files hold the same bytes, reading only where either has data (holes in both are
    zeros in both: equal without a read)."""
    size = os.fstat(a).st_size
    if size != os.fstat(b).st_size:
        return False
    for start, end in _union(list(_data_ranges(a, size)) + list(_data_ranges(b, size))):
        pos = start
        while pos < end:
            n = min(_CHUNK, end - pos)
            x, y = os.pread(a, n, pos), os.pread(b, n, pos)
            if x != y:
                return False
            if not x:
                break
            pos += len(x)
    return True


def _union(ranges: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Sorted, merged ``(start, end)`` ranges."""
    merged: list[tuple[int, int]] = []
    for start, end in sorted(ranges):
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((start, end))
    return merged


__all__ = ["CopyBudget", "CopyBudgetExceeded", "CopyRefused", "TreeMerge", "copy_confined", "copy_workspace",
           "merge_tree"]
