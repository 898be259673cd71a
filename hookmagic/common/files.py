"""Reading and writing files safely: bounded reads, special files refused, atomic saves.

Every loader of hookmagic reads through these helpers, so all of them behave alike:

- :func:`open_input` refuses, before reading a byte, what is not a regular file: a missing
  path, a directory ("is a directory"), a FIFO (which would block forever), a device such as
  ``/dev/zero`` (endless), a socket.
- :func:`read_input` reads at most :data:`~hookmagic.common.limits.MAX_BYTES`;
  :func:`read_input_maybe_gzip` also inflates gzip in a stream, counting inflated bytes against
  the same budget (a gzip bomb stops at the budget, not at ``MemoryError``).
- :func:`read_zip_member` reads one member of a ZIP container by streaming it, checking the
  declared size first and the real size as it goes.
- :func:`load_json_file` / :func:`parse_json` check the JSON text budget and the nesting depth
  (a fast scan of the bytes) before parsing, so deep nesting is a
  :class:`~hookmagic.common.errors.LimitExceeded`, not a ``RecursionError``.
- :func:`atomic_write` replaces a file in one step: a crash midway leaves the old file.
  Saving *through a symlink follows it* (the link stays, its target is replaced, as editors and
  most tools do); a target that exists and is not a regular file (a device node, a FIFO, a
  directory) is refused; an overwritten file keeps its permission bits; a new file gets the
  usual ``0666 & ~umask`` (saved traces are meant to be shared).
"""
from __future__ import annotations

import contextlib
import gc
import json
import os
import secrets
import shutil
import stat
import zipfile
import zlib
from pathlib import Path
from typing import Any, BinaryIO, Callable

import numpy as np

from hookmagic.common.errors import InputFileError, InvalidArgument, LimitExceeded
from hookmagic.common.limits import MAX_BYTES, MAX_DEPTH, MAX_JSON_BYTES, exceeded, limit

__all__ = ["open_input", "read_input", "read_input_maybe_gzip", "gunzip_bounded",
           "read_zip_member", "check_ratio", "read_parquet", "gc_paused", "parse_json",
           "load_json_file", "json_depth", "atomic_write", "check_output_path", "replace_folder"]

_CHUNK = 1 << 20
_KIND = [(stat.S_ISDIR, "is a directory"), (stat.S_ISFIFO, "is a FIFO (named pipe)"),
         (stat.S_ISCHR, "is a character device"), (stat.S_ISBLK, "is a block device"),
         (stat.S_ISSOCK, "is a socket")]


def _kind_of(mode: int) -> str:
    for test, text in _KIND:
        if test(mode):
            return text
    return "is not a regular file"


def _path(path: str | os.PathLike) -> Path:
    if isinstance(path, (bytes, bytearray)):
        path = os.fsdecode(bytes(path))
    if not isinstance(path, (str, os.PathLike)):
        raise InvalidArgument(f"a file path is needed, not {type(path).__name__}")
    return Path(os.path.expanduser(os.fspath(path)))


def open_input(path: str | os.PathLike, what: str = "input",
               error: type[InputFileError] = InputFileError) -> BinaryIO:
    """Open ``path`` for reading in binary, or raise ``error`` saying why it cannot be.

    Only regular files are opened (through symlinks). The file is opened non-blocking and
    checked with ``fstat``, so a FIFO swapped in after a check cannot block the caller.
    """
    p = _path(path)
    try:
        st = os.stat(p)
    except FileNotFoundError:
        raise error(f"{what} {str(p)!r} does not exist: check the path") from None
    except OSError as exc:
        raise error(f"{what} {str(p)!r} cannot be read: {exc.strerror}") from None
    if not stat.S_ISREG(st.st_mode):
        raise error(f"{what} {str(p)!r} {_kind_of(st.st_mode)}, not a file; pass the path of "
                    "a file")
    try:
        fd = os.open(p, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        raise error(f"{what} {str(p)!r} cannot be read: {exc.strerror}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise error(f"{what} {str(p)!r} {_kind_of(st.st_mode)}, not a file")
        if hasattr(os, "set_blocking"):
            os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def _read_bounded(fh: BinaryIO, cap: int, what: str) -> bytes:
    """Read all of ``fh`` in chunks, but raise LimitExceeded past ``cap`` bytes (0: no cap).

    Not ``fh.read(cap + 1)``: that allocates the whole budget (2 GiB) up front, however
    small the file."""
    parts: list[bytes] = []
    total = 0
    while True:
        chunk = fh.read(_CHUNK)
        if not chunk:
            return b"".join(parts)
        total += len(chunk)
        if cap and total > cap:
            raise exceeded(MAX_BYTES, what, total)
        parts.append(chunk)


def read_input(path: str | os.PathLike, what: str = "input",
               error: type[InputFileError] = InputFileError) -> bytes:
    """The bytes of a regular file, at most ``HOOKMAGIC_MAX_BYTES``."""
    p = _path(path)
    with open_input(p, what, error) as fh:
        cap = limit(MAX_BYTES)
        size = os.fstat(fh.fileno()).st_size
        if cap and size > cap:
            # the file may be gzip: its JSON inflates up to about 30x
            raise exceeded(MAX_BYTES, f"{what} {str(p)!r}", size, headroom=32)
        try:
            return _read_bounded(fh, cap, f"{what} {str(p)!r}")
        except OSError as exc:
            raise error(f"{what} {str(p)!r} cannot be read: {exc.strerror}") from None


#: the most one compressed byte may expand to. Real traces and exports compress 3-30x (JSON) or
#: about 1x (Parquet inside a ZIP); a file that expands further is a decompression bomb. It is
#: refused before inflating when its headers declare such a ratio, and otherwise as soon as
#: the bytes inflated so far pass this ratio to the compressed bytes consumed so far (and
#: ``RATIO_FLOOR``): a 1 MB file claiming 1 GiB stops after about ``RATIO_FLOOR`` bytes.
MAX_RATIO = 200
RATIO_FLOOR = 16 << 20


def check_ratio(inflated: int, compressed: int, what: str, declared: bool = False) -> None:
    """Raise :class:`LimitExceeded` when ``inflated`` bytes from ``compressed`` ones are past
    ``MAX_RATIO`` (and ``RATIO_FLOOR``); ``declared``: the sizes come from headers, before
    anything was inflated."""
    if inflated > RATIO_FLOOR and inflated > MAX_RATIO * max(compressed, 1):
        told = "declare" if declared else "gave"
        raise LimitExceeded(f"{what} expands more than {MAX_RATIO}x ({compressed:,} compressed "
                            f"bytes {told} {inflated:,}): a decompression bomb, or not a "
                            "trace; refused")


def _gzip_declared_size(raw: bytes) -> int | None:
    """The inflated size a single-member gzip stream declares in its trailer (ISIZE: the size
    modulo 2**32, so it can only under-state a larger one), or None when it cannot be told."""
    if len(raw) < 18 or raw[-4:] == b"\0\0\0\0":
        return None   # too short for a header and trailer, or zero padding after the member
    return int.from_bytes(raw[-4:], "little")


def gunzip_bounded(raw: bytes, what: str, error: type[InputFileError] = InputFileError) -> bytes:
    """Inflate gzip data (several members allowed) in bounded chunks, at most
    ``HOOKMAGIC_MAX_BYTES`` and at most ``MAX_RATIO`` times the compressed bytes consumed.

    The trailer's declared size is checked first, so a plain bomb is refused before anything
    is inflated; a forged trailer is caught while inflating.
    """
    cap = limit(MAX_BYTES)
    declared = _gzip_declared_size(raw)
    if declared is not None:
        check_ratio(declared, len(raw), f"{what} (gzip)", declared=True)
        if cap and declared > cap:
            raise exceeded(MAX_BYTES, f"{what} (gzip, declared size)", declared)
    out: list[bytes] = []
    total = 0
    rest = raw
    try:
        while rest:
            before = len(raw) - len(rest)     # compressed bytes of the members already read
            d = zlib.decompressobj(wbits=31)
            pos = 0
            while pos < len(rest) or d.unconsumed_tail:
                src = d.unconsumed_tail or rest[pos:pos + _CHUNK]
                if not d.unconsumed_tail:
                    pos += len(src)
                chunk = d.decompress(src, _CHUNK)
                total += len(chunk)
                if cap and total > cap:
                    raise exceeded(MAX_BYTES, f"{what} (after gunzip)", total)
                check_ratio(total, before + pos - len(d.unconsumed_tail), f"{what} (gzip)")
                out.append(chunk)
                if d.eof:
                    break
            if not d.eof:
                raise error(f"{what} could not be decompressed (a truncated gzip stream); "
                            "is it a complete .gz file?")
            rest = d.unused_data + rest[pos:]
            rest = rest.lstrip(b"\0")  # padding after the last member is allowed
            if rest and rest[:2] != b"\x1f\x8b":
                break  # trailing garbage after a complete member: ignore, as gzip(1) warns
    except zlib.error as exc:
        raise error(f"{what} could not be decompressed ({exc}); is it a complete .gz file?") \
            from None
    return b"".join(out)


def read_input_maybe_gzip(path: str | os.PathLike, what: str = "input",
                          error: type[InputFileError] = InputFileError) -> bytes:
    """:func:`read_input`, inflated when the content is gzip (whatever the suffix)."""
    raw = read_input(path, what, error)
    if raw[:2] == b"\x1f\x8b":
        return gunzip_bounded(raw, f"{what} {str(_path(path))!r}", error)
    return raw


def read_zip_member(zf: zipfile.ZipFile, name: str, what: str, spent: int = 0) -> bytes:
    """One member of an open ZIP, streamed: its declared size is checked before reading, and
    its real size while reading, against ``HOOKMAGIC_MAX_BYTES`` minus ``spent`` (bytes already
    taken by other members of the same input). Raises KeyError if there is no such member."""
    cap = limit(MAX_BYTES)
    info = zf.getinfo(name)
    if cap and spent + info.file_size > cap:
        raise exceeded(MAX_BYTES, f"{what} (member {name!r} declares {info.file_size} bytes)",
                       spent + info.file_size)
    # the declared sizes first (cheap), then the real ones while inflating (a header may lie)
    check_ratio(info.file_size, info.compress_size, f"{what} (member {name!r})", declared=True)
    out: list[bytes] = []
    total = spent
    with zf.open(info, "r") as fh:
        while True:
            chunk = fh.read(_CHUNK)
            if not chunk:
                break
            total += len(chunk)
            if cap and total > cap:
                raise exceeded(MAX_BYTES, f"{what} (member {name!r})", total)
            check_ratio(total - spent, info.compress_size, f"{what} (member {name!r})")
            out.append(chunk)
    return b"".join(out)


def json_depth(data: bytes | str) -> int:
    """The deepest nesting of ``[``/``{`` in JSON text, brackets inside strings not counted.

    Vectorised over the few bytes that matter (quotes, backslashes, brackets), in chunks of
    64 MiB that never split a run of backslashes: well under a second per 100 MB.
    """
    if isinstance(data, str):
        data = data.encode("utf-8", "surrogatepass")
    buf = np.frombuffer(data, dtype=np.uint8)
    n_all = len(buf)
    step = 1 << 26
    depth = deepest = 0
    in_str = 0
    lo = 0
    while lo < n_all:
        hi = min(lo + step, n_all)
        while hi < n_all and buf[hi - 1] == 92:   # keep a backslash run within one chunk
            hi += 1
        c = buf[lo:hi]
        lo = hi
        mask = (c == 34) | (c == 92) | ((c | 32) == 123) | ((c | 32) == 125)
        pos = np.flatnonzero(mask)                    # ([ -> {, ]| -> } after | 32 ...)
        if not len(pos):
            continue
        ch = c[pos]
        keep = (ch == 34) | (ch == 92) | (ch == 91) | (ch == 93) | (ch == 123) | (ch == 125)
        pos, ch = pos[keep], ch[keep]
        k = len(pos)
        if not k:
            continue
        idx = np.arange(k)
        isbs = ch == 92
        adj = np.zeros(k, dtype=bool)                 # element i directly follows element i-1
        adj[1:] = pos[1:] == pos[:-1] + 1
        starts = isbs & ~(np.concatenate(([False], isbs[:-1])) & adj)
        run_start = np.maximum.accumulate(np.where(starts, idx, 0))
        run_len = idx - run_start + 1                 # valid at backslashes
        before = np.zeros(k, dtype=np.int64)          # backslashes right before element i
        prev_bs = np.zeros(k, dtype=bool)
        prev_bs[1:] = isbs[:-1] & adj[1:]
        before[1:] = np.where(prev_bs[1:], run_len[:-1], 0)
        quote = (ch == 34) & (before % 2 == 0)
        flips = np.cumsum(quote, dtype=np.int64)
        inside_before = ((flips - quote + in_str) % 2) == 1
        code = np.where((ch == 91) | (ch == 123), 1, np.where((ch == 93) | (ch == 125), -1, 0))
        code[inside_before] = 0
        levels = np.cumsum(code) + depth
        deepest = max(deepest, int(levels.max()))
        depth = int(levels[-1])
        in_str = int((flips[-1] + in_str) % 2)
    return deepest


def parse_json(data: bytes | str, what: str, error: type[InputFileError] = InputFileError,
               *, parse_float: Callable[[str], Any] | None = None,
               errors: str = "strict") -> Any:
    """Parse JSON text within the JSON budgets, or raise ``error``/LimitExceeded saying why."""
    size = len(data)
    cap = limit(MAX_JSON_BYTES)
    if cap and size > cap:
        raise exceeded(MAX_JSON_BYTES, what, size)
    max_depth = limit(MAX_DEPTH)
    if max_depth:
        deepest = json_depth(data)
        if deepest > max_depth:
            raise exceeded(MAX_DEPTH, f"{what} (nested {deepest} levels deep)", deepest)
    if isinstance(data, (bytes, bytearray)):
        if data[:2] in (b"\xff\xfe", b"\xfe\xff") and _utf16_json(bytes(data[:64])):
            raise error(f"{what} is UTF-16 text; save it as UTF-8 JSON")
        try:
            # "utf-8-sig": a byte-order mark, as some Windows editors write, is not part of JSON
            text = bytes(data).decode("utf-8-sig", errors)
        except UnicodeDecodeError:
            raise error(f"{what} is not text JSON (a binary file?)") from None
    else:
        text = data.removeprefix("\ufeff")
    if not text.strip():
        raise error(f"{what} is empty")
    try:
        return json.loads(text, parse_float=parse_float)
    except json.JSONDecodeError as exc:
        raise error(f"{what} is not valid JSON ({exc.msg} at line {exc.lineno}, column "
                    f"{exc.colno}); was it cut short while writing?") from None
    except RecursionError:
        raise exceeded(MAX_DEPTH, f"{what} (nested too deep for the parser)") from None


def _utf16_json(head: bytes) -> bool:
    """Whether the first bytes read as UTF-16 text that starts like JSON."""
    try:
        text = head[: len(head) // 2 * 2].decode("utf-16", "strict")
    except UnicodeDecodeError:
        return False
    return text.lstrip()[:1] in ("{", "[")


def load_json_file(path: str | os.PathLike, what: str = "JSON file",
                   error: type[InputFileError] = InputFileError, *, gzip_ok: bool = True,
                   parse_float: Callable[[str], Any] | None = None,
                   errors: str = "strict") -> Any:
    """Read (and gunzip, when the content is gzip) and parse a JSON file within every budget."""
    p = _path(path)
    raw = read_input_maybe_gzip(p, what, error) if gzip_ok else read_input(p, what, error)
    return parse_json(raw, f"{what} {str(p)!r}", error, parse_float=parse_float, errors=errors)


def read_parquet(source: bytes | str | os.PathLike, what: str,
                 error: type[InputFileError] = InputFileError):
    """A Parquet file (a path, or its bytes) as a pyarrow Table, within the budgets: the row
    count and decoded size come from the footer and are checked before any column is decoded.
    Damaged files raise ``error``."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from hookmagic.common.limits import MAX_ROWS, check
    data = source if isinstance(source, (bytes, bytearray)) else read_input(source, what, error)
    try:
        pf = pq.ParquetFile(pa.BufferReader(data))
        meta = pf.metadata
        check(MAX_ROWS, meta.num_rows, what)
        decoded = sum(meta.row_group(i).total_byte_size for i in range(meta.num_row_groups))
        check(MAX_BYTES, decoded, f"{what} (decoded)")
        return pf.read()
    except LimitExceeded:
        raise
    except (pa.ArrowException, OSError, ValueError, NotImplementedError) as exc:
        raise error(f"{what} is not a readable Parquet file ({exc})") from None


@contextlib.contextmanager
def gc_paused():
    """Pause Python's cyclic garbage collector while a loader builds many small objects (JSON
    documents, per-row dicts): collections triggered by the allocations alone cost a third or
    more of a large import, and loaders create no reference cycles worth collecting midway.
    Nestable; the collector's previous state is restored, also on errors."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def export_path(path: str | os.PathLike, suffixes: tuple[str, ...], what: str) -> Path:
    """:func:`check_output_path` for an export of a given kind: its name must end in one of
    ``suffixes`` (``.csv``, ``.json``), so an export never lands on a saved result (a
    ``.hmtrace``, ``.hmpipe``) by a slip of the name."""
    p = check_output_path(path, what)
    if not any(p.name.lower().endswith(sfx) for sfx in suffixes):
        raise InvalidArgument(f"cannot write {what} to {p.name!r}: give a name ending in "
                              f"{' or '.join(suffixes)}")
    return p


def check_output_path(path: str | os.PathLike, what: str = "output") -> Path:
    """The file an atomic save of ``path`` replaces: symlinks resolved; raises
    :class:`InvalidArgument` when it exists and is not a regular file, or its folder is missing."""
    p = Path(os.path.realpath(_path(path)))
    try:
        st = os.stat(p)
    except FileNotFoundError:
        st = None
    if st is not None and not stat.S_ISREG(st.st_mode):
        raise InvalidArgument(f"cannot save {what} to {str(p)!r}: it {_kind_of(st.st_mode)}; "
                              "pass the path of a regular file")
    if not p.parent.is_dir():
        raise InvalidArgument(f"cannot save {what} to {str(p)!r}: folder {str(p.parent)!r} "
                              "does not exist")
    return p


def atomic_write(path: str | os.PathLike, write: Callable[[BinaryIO], None] | bytes,
                 what: str = "output") -> Path:
    """Write a file in one step: into a temporary file beside the target, then renamed over it.

    ``write`` is the bytes, or a function that writes to the binary file object it is given.
    Follows a symlink at ``path`` (the link's target is replaced); refuses a target that is a
    directory, device or FIFO; keeps the permission bits of a file it replaces. Returns the
    path written (the symlink's target when ``path`` is a link).
    """
    target = check_output_path(path, what)
    try:
        old_mode = stat.S_IMODE(os.stat(target).st_mode)
    except FileNotFoundError:
        old_mode = None
    tmp = target.with_name(f".{target.name}.{secrets.token_hex(6)}.tmp")
    try:
        with open(tmp, "xb") as fh:
            if callable(write):
                write(fh)
            else:
                fh.write(write)
            fh.flush()
            os.fsync(fh.fileno())
        if old_mode is not None:
            os.chmod(tmp, old_mode)
        os.replace(tmp, target)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    return target


# LimitExceeded is re-exported for callers that only import this module
LimitExceeded = LimitExceeded


def replace_folder(tmp: Path, path: Path) -> None:
    """Put the finished folder ``tmp`` at ``path``, replacing a folder there: the old one is
    moved aside first and deleted last, so ``path`` always holds a whole folder, old or new."""
    if path.exists():
        old = path.with_name(f".{path.name}.{secrets.token_hex(6)}.old")
        os.replace(path, old)
        os.replace(tmp, path)
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.replace(tmp, path)
