"""How `footprint.memory_kb` splits a process's memory into its own and the shared memory it
touched, read from files laid out like /proc (what the kernel writes there, copied in shape):
the dynamic shared memory a parallel query maps under /dev/shm is the backend's own, not part
of the cluster's fixed segment that `shared_memory_size` bounds. No services."""

from __future__ import annotations

from typing import TYPE_CHECKING

from smile.harness.footprint import allocated_shared_kb, memory_kb

if TYPE_CHECKING:
    from pathlib import Path

ROLLUP = """55d0c0a00000-7ffc2b1f2000 ---p 00000000 00:00 0                          [rollup]
Rss:              {rss} kB
Pss:              {pss} kB
Pss_Anon:          5120 kB
Pss_File:          1024 kB
Pss_Shmem:        {shmem} kB
Shared_Clean:      2048 kB
"""

MAPPING = """{start}-{end} rw-s 00000000 00:01 {inode}                          {path}
Size:              {size} kB
Rss:               {pss} kB
Pss:               {pss} kB
Pss_Shmem:         {pss} kB
"""


def _process(proc: Path, pid: int, pss: int, shmem: int,
             mappings: list[tuple[str, int]]) -> None:
    """A process `pid` under `proc`: its rollup and its mappings (path, PSS in kB)."""
    where = proc / str(pid)
    where.mkdir(parents=True)
    (where / "smaps_rollup").write_text(ROLLUP.format(rss=pss + 100, pss=pss, shmem=shmem))
    (where / "smaps").write_text("".join(
        MAPPING.format(start=f"7f{i:02x}00000000", end=f"7f{i:02x}10000000", inode=i + 1,
                       path=path, size=kb * 2, pss=kb)
        for i, (path, kb) in enumerate(mappings)))


def test_a_backends_dynamic_shared_memory_is_its_own_and_the_fixed_segment_is_shared(
        tmp_path: Path) -> None:
    # a backend in a parallel hash join: 300 MB of the buffer cache touched, 40 MB of a
    # dynamic segment, 6 MB of its own
    _process(tmp_path, 4242, pss=6144 + 307200 + 40960, shmem=307200 + 40960,
             mappings=[("/dev/zero (deleted)", 307200), ("/dev/shm/PostgreSQL.1804289383", 40960)])
    assert memory_kb(4242, proc=tmp_path) == (6144 + 40960, 307200)


def test_a_backend_without_a_dynamic_segment_keeps_all_its_shared_memory_shared(
        tmp_path: Path) -> None:
    _process(tmp_path, 7, pss=9000, shmem=8000, mappings=[("/dev/zero (deleted)", 8000)])
    assert memory_kb(7, proc=tmp_path) == (1000, 8000)


def test_a_segment_mapped_after_the_rollup_was_read_never_makes_shared_memory_negative(
        tmp_path: Path) -> None:
    # the two files are read at different instants: a segment mapped in between is in smaps
    # but not in the rollup
    _process(tmp_path, 8, pss=3000, shmem=500, mappings=[("/dev/shm/PostgreSQL.77", 2048)])
    assert memory_kb(8, proc=tmp_path) == (3000, 0)


def test_without_a_rollup_rss_is_own_and_a_gone_process_has_nothing(tmp_path: Path) -> None:
    where = tmp_path / "11"
    where.mkdir()
    (where / "status").write_text("Name:\tjava\nVmPeak:\t 900000 kB\nVmRSS:\t  123456 kB\n")
    assert memory_kb(11, proc=tmp_path) == (123456, 0)
    assert memory_kb(12, proc=tmp_path) == (0, 0)


MAPS = ("55d0-55d1 r-xp 00000000 08:01 9 /usr/lib/postgresql/15/bin/postgres\n"
        "{main} rw-s 00000000 00:01 46692 /dev/zero (deleted)\n"
        "{dsm} rw-s 00000000 00:1b 8582 /dev/shm/PostgreSQL.4094788064\n"
        "{sysv} rw-s 00000000 00:01 23593 /SYSV00338010 (deleted)\n")


def _maps(proc: Path, pid: int, ranges: dict[str, str], sizes: dict[str, int]) -> None:
    """A process under `proc` mapping the main segment, a dynamic one and the interlock, at
    `ranges`; its map_files entries hold `sizes` bytes (a missing size: no entry, as when
    the process is gone or map_files cannot be read)."""
    where = proc / str(pid)
    (where / "map_files").mkdir(parents=True)
    (where / "maps").write_text(MAPS.format(**ranges))
    for key, size in sizes.items():
        (where / "map_files" / ranges[key]).write_bytes(b"x" * size)


def _blocks_kb(path: Path) -> int:
    return path.stat().st_blocks * 512 // 1024


def test_each_fixed_segment_counts_once_whoever_maps_it_and_dynamic_ones_not_at_all(
        tmp_path: Path) -> None:
    postmaster = {"main": "7f00-7f80", "dsm": "7e00-7e01", "sysv": "7d00-7d01"}
    backend = {"main": "6f00-6f80", "dsm": "6e00-6e01", "sysv": "6d00-6d01"}
    _maps(tmp_path, 10, postmaster, {"main": 256 * 1024, "dsm": 64 * 1024, "sysv": 4096})
    _maps(tmp_path, 11, backend, {"main": 256 * 1024, "dsm": 64 * 1024, "sysv": 4096})
    once = (_blocks_kb(tmp_path / "10" / "map_files" / postmaster["main"])
            + _blocks_kb(tmp_path / "10" / "map_files" / postmaster["sysv"]))
    assert once >= 256 + 4
    assert allocated_shared_kb([10, 11], proc=tmp_path) == once
    assert allocated_shared_kb([11], proc=tmp_path) == once


def test_a_segment_is_read_through_the_next_process_when_the_first_is_gone(
        tmp_path: Path) -> None:
    gone = {"main": "7f00-7f80", "dsm": "7e00-7e01", "sysv": "7d00-7d01"}
    alive = {"main": "6f00-6f80", "dsm": "6e00-6e01", "sysv": "6d00-6d01"}
    _maps(tmp_path, 20, gone, {})
    _maps(tmp_path, 21, alive, {"main": 128 * 1024, "sysv": 4096})
    expected = sum(_blocks_kb(tmp_path / "21" / "map_files" / alive[k]) for k in ("main", "sysv"))
    assert allocated_shared_kb([20, 21, 22], proc=tmp_path) == expected
    # none readable: the caller falls back to the processes' own figures
    assert allocated_shared_kb([20, 22], proc=tmp_path) is None
