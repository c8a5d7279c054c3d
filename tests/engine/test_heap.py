"""fairsched.engine.heap: what the C heap freed goes back to the system."""
from __future__ import annotations

import sys

import psutil
import pytest

from fairsched.engine import heap


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc_trim")
def test_what_the_heap_freed_between_live_blocks_is_given_back():
    """Blocks past the small-object pools' 512 bytes come from the C heap. With every 64th
    kept, the freed ones between them are no use to the system until given back."""
    rss = psutil.Process().memory_info
    blocks = [bytes(2048) for _ in range(100_000)]  # about 200 MB
    kept = blocks[::64]
    del blocks
    before = rss().rss
    assert heap.give_back()
    after = rss().rss
    assert before - after > 100 * 2**20, (before, after)
    assert len(kept) == 1563
