"""The process-level memory steps (heap.py): what they hand back, what they leave alone,
and that they do nothing where there is no glibc."""

from __future__ import annotations

import mmap
from pathlib import Path

import pytest

from knowledge_api import heap

PAGES = 256
LINUX_GLIBC = heap.libc() is not None and heap.MAPS.exists()
pytestmark = pytest.mark.skipif(not LINUX_GLIBC, reason="needs glibc and /proc (Linux)")


def resident_kb(path: Path) -> int:
    """This process's resident kB of the mappings of `path` (smaps)."""
    total, current = 0, ""
    for line in Path("/proc/self/smaps").read_text().splitlines():
        fields = line.split()
        if "-" in fields[0] and not fields[0].endswith(":"):
            current = fields[5] if len(fields) > 5 else ""
        elif fields[0] == "Rss:" and current == str(path):
            total += int(fields[1])
    return total


@pytest.fixture
def data(tmp_path: Path) -> Path:
    path = tmp_path / "weights.bin"
    path.write_bytes(bytes(range(256)) * 16 * PAGES)  # PAGES pages of 4 kB
    return path


def read_all(mapped: mmap.mmap) -> int:
    return sum(mapped[offset] for offset in range(0, len(mapped), mmap.PAGESIZE))


def test_the_pages_of_a_shared_read_only_mapping_are_handed_back(data: Path) -> None:
    with data.open("rb") as file, mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ) as mapped:
        before = read_all(mapped)
        assert resident_kb(data) >= PAGES * 4 * 3 // 4
        heap.release_mapped_file(data)
        assert resident_kb(data) == 0
        assert read_all(mapped) == before  # read again from the file, unchanged


def test_a_private_mapping_keeps_its_written_pages(data: Path) -> None:
    """madvise would drop a private mapping's writes with its pages: it is left alone."""
    with data.open("rb") as file, mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_COPY) as mapped:
        mapped[:4] = b"kept"
        resident = resident_kb(data)
        heap.release_mapped_file(data)
        assert mapped[:4] == b"kept" and resident_kb(data) == resident


def test_without_glibc_nothing_is_released_and_nothing_fails(
    data: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(heap, "libc", lambda: None)
    with data.open("rb") as file, mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ) as mapped:
        read_all(mapped)
        resident = resident_kb(data)
        heap.limit_arenas()
        heap.release_freed_memory()
        heap.release_mapped_file(data)
        assert resident_kb(data) == resident > 0
