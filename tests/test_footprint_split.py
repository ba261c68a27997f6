"""How `footprint.memory_kb` splits a process's memory into its own and the shared memory it
touched, read from files laid out like /proc (what the kernel writes there, copied in shape):
the dynamic shared memory a parallel query maps under /dev/shm is the backend's own, not part
of the cluster's fixed segment that `shared_memory_size` bounds. No services."""

from __future__ import annotations

from typing import TYPE_CHECKING

from smile.experiments.footprint import memory_kb

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
