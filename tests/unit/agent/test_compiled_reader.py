"""The C reader (agent/collectors/_cgread.c) through `PseudoFileReader.read_keyed` / `read_ints`: the values it
picks, and every file it must refuse (None: the caller's Python parser then counts and names the problem)."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent.collectors import files
from agent.collectors.cgroup_stats import (
    CPU_STAT_KEYS,
    MEMORY_STAT_KEYS,
    BatchMiss,
    batch_cpu_stat,
    batch_memory_stat,
    keyed_cpu_stat,
    keyed_memory_stat,
)
from agent.collectors.files import PseudoFileReader

KEYS = (b"usage_usec", b"nr_periods")


def test_the_c_reader_is_built_in_this_install() -> None:
    """setup.py builds it where a C compiler is found; the agent works without it, at ~1.3x the CPU at 300 pods.
    A development or CI install without it is a broken install, not a case to skip."""
    assert files.COMPILED_READER, "agent.collectors._cgread is not built: is a C compiler installed? (setup.py)"
    assert PseudoFileReader().compiled and not PseudoFileReader(compiled=False).compiled
    assert not PseudoFileReader(keep_open=False).compiled  # no kept fds, nothing to hand over


def opened(reader: PseudoFileReader, tmp_path: Path, contents: list[bytes]) -> list[str]:
    """Files with `contents`, read once through `reader` so their fds are kept (as a collector's first cycle)."""
    paths = []
    for i, data in enumerate(contents):
        path = tmp_path / f"f{i}"
        path.write_bytes(data)
        reader.read(str(path))
        paths.append(str(path))
    return paths


def test_picks_the_keys_and_marks_absent_ones(tmp_path: Path) -> None:
    reader = PseudoFileReader()
    paths = opened(
        reader,
        tmp_path,
        [
            b"usage_usec 17\nuser_usec 9\nnr_periods 0\n",
            b"nr_periods 5\nusage_usec 000123\n",  # any order, leading zeros as int() takes them
            b"user_usec 1\n",  # neither key: -1 twice
            b"odd line without value\nusage_usec 8\nwith space but not ours x\n",  # other lines are not parsed
        ],
    )
    rows = reader.read_keyed(paths, KEYS)
    assert rows is not None and rows.tolist() == [[17, 0], [123, 5], [-1, -1], [8, -1]]
    (tmp_path / "ints").mkdir()
    ints = opened(reader, tmp_path / "ints", [b"7\n", b"0\n"])
    assert (values := reader.read_ints(ints)) is not None and values.tolist() == [7, 0]


@pytest.mark.parametrize(
    "bad",
    [
        b"usage_usec 17\nusage_usec 18\n",  # a wanted key twice
        b"usage_usec -1\n",
        b"usage_usec 1e3\n",
        b"usage_usec \n",
        b"usage_usec 17",  # no newline after the value
        b"usage_usec 1234567890123456789\n",  # 19 digits: beyond the batch range
        b"usage_usec 12\x00\n",
        b"",  # empty
        b"nr_periods 1\n" * 1500,  # 16 KiB or more: read the Python way
    ],
    ids=["twice", "negative", "float", "no value", "no newline", "19 digits", "NUL", "empty", "16 KiB"],
)
def test_refuses_what_is_not_plainly_the_kernel_format(tmp_path: Path, bad: bytes) -> None:
    reader = PseudoFileReader()
    paths = opened(reader, tmp_path, [b"usage_usec 1\nnr_periods 2\n", bad])
    assert reader.read_keyed(paths, KEYS) is None  # one bad file refuses the batch


@pytest.mark.parametrize("bad", [b"12", b"12\n3\n", b"max\n", b"-4\n", b"", b" 5\n", b"1234567890123456789\n"])
def test_read_ints_refuses_anything_but_one_integer(tmp_path: Path, bad: bytes) -> None:
    reader = PseudoFileReader()
    assert reader.read_ints(opened(reader, tmp_path, [b"5\n", bad])) is None


def test_a_path_without_a_kept_fd_and_a_closed_fd_are_never_read(tmp_path: Path) -> None:
    """Paths not opened yet are left to `read_many`; after any fd is closed the fd list is worked out again, so a
    reused fd number is never read as another file."""
    reader = PseudoFileReader()
    a, b = tmp_path / "a", tmp_path / "b"
    a.write_bytes(b"usage_usec 1\n")
    b.write_bytes(b"usage_usec 2\n")
    paths = [str(a), str(b)]
    assert reader.read_keyed(paths, KEYS) is None  # nothing kept yet
    reader.read(str(a))
    assert reader.read_keyed(paths, KEYS) is None  # b still not kept
    reader.read(str(b))
    assert (rows := reader.read_keyed(paths, KEYS)) is not None and rows[:, 0].tolist() == [1, 2]
    reader.release([str(a)])  # a's fd closed; the next open may get its number
    c = tmp_path / "c"
    c.write_bytes(b"usage_usec 3\n")
    reader.read(str(c))
    assert reader.read_keyed(paths, KEYS) is None  # a has no kept fd now: not b's or c's
    reader.read(str(a))
    assert (rows := reader.read_keyed(paths, KEYS)) is not None and rows[:, 0].tolist() == [1, 2]
    reader.close()


KERNEL_CPU_STAT = {
    1: b"nr_periods 10\nnr_throttled 2\nthrottled_time 3000\n",
    2: b"usage_usec 5000\nuser_usec 1\nsystem_usec 1\nnr_periods 10\nnr_throttled 2\nthrottled_usec 3\n",
}
V2_NO_CFS = b"usage_usec 5000\nuser_usec 1\nsystem_usec 1\n"
MEMORY_STAT = {
    1: b"cache 1\ntotal_inactive_anon 10\ntotal_active_anon 20\ntotal_inactive_file 8\ntotal_active_file 4\n"
    b"total_unevictable 1\n",
    2: b"anon 30\ninactive_anon 10\nactive_anon 20\ninactive_file 8\nactive_file 4\nunevictable 1\n",
}


@pytest.mark.parametrize("version", [1, 2])
def test_rows_give_the_arrays_of_the_python_batch_parsers(tmp_path: Path, version: int) -> None:
    reader = PseudoFileReader()
    cpu = [KERNEL_CPU_STAT[version]] + ([V2_NO_CFS] if version == 2 else [])
    rows = reader.read_keyed(opened(reader, tmp_path, cpu), CPU_STAT_KEYS[version])
    assert rows is not None
    assert keyed_cpu_stat(rows, version).tolist() == batch_cpu_stat(cpu, version).tolist()
    (tmp_path / "m").mkdir()
    memory = [MEMORY_STAT[version]]
    rows = reader.read_keyed(opened(reader, tmp_path / "m", memory), MEMORY_STAT_KEYS[version])
    assert rows is not None
    assert keyed_memory_stat(rows).tolist() == batch_memory_stat(memory, version).tolist()


@pytest.mark.parametrize(
    ("version", "data"),
    [
        (1, b"nr_periods 10\nnr_throttled 2\n"),  # a CFS key missing
        (2, b"usage_usec 1\nnr_periods 10\n"),
        (2, b"user_usec 1\n"),  # no usage
        (2, b"usage_usec 9999999999999999\n"),  # microseconds beyond int64 nanoseconds
    ],
)
def test_rows_the_python_parser_must_judge_are_refused(tmp_path: Path, version: int, data: bytes) -> None:
    reader = PseudoFileReader()
    rows = reader.read_keyed(opened(reader, tmp_path, [data]), CPU_STAT_KEYS[version])
    assert rows is not None
    with pytest.raises(BatchMiss):
        keyed_cpu_stat(rows, version)


def test_memory_stat_without_the_lru_keys_is_refused(tmp_path: Path) -> None:
    reader = PseudoFileReader()
    local_only = b"inactive_anon 1\nactive_anon 2\ninactive_file 3\nunevictable 4\n"  # v1 without use_hierarchy
    rows = reader.read_keyed(opened(reader, tmp_path, [local_only]), MEMORY_STAT_KEYS[1])
    assert rows is not None
    with pytest.raises(BatchMiss):
        keyed_memory_stat(rows)
