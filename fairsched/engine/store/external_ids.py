"""Each chart's external id (the producer's own), held as bytes in blocks, not a string per chart.

The scheduler keeps the external id of every chart it has queued: the snapshot shows it in
each row, lists the at-risk charts with it, and indexes each org's charts by it. Held in a
dict, each was a ``str`` (about 58 bytes for ``"mrn-123456"``) in an entry of a dict of a
million (about 41 bytes more): some 100 MB at a million queued charts. And every ETA pass's
forked child read them all, so it copied every page they lay on (a read writes the
object's reference count): 50 MB more in the child (``bench/child_memory.py``).

:class:`ExternalIds` is that mapping, chart id -> external id (None: the chart has none),
in blocks of :data:`BLOCK` consecutive chart ids: per block, the ids' UTF-8 bytes one after
another in a ``bytearray``, and two arrays of machine numbers, each id's offset and length
(:data:`NONE` for no external id, :data:`GONE` for no such chart). About 9 bytes a chart and
the id's own bytes when the ids are dense (chart ids are the database's, given in order),
and at most :data:`BLOCK` x 6 bytes and a block's objects (some 1.1 KB) per chart in the
worst case, one chart left in each block. A read makes the string anew: it copies no page
of the parent's in a forked child. Every operation is O(1), and no operation ever rebuilds
more than one block (a block's bytes are compacted when half of them belong to charts gone).
"""
from __future__ import annotations

import sys
from array import array
from collections.abc import Iterator, MutableMapping
from itertools import compress

BLOCK_BITS = 7
BLOCK = 1 << BLOCK_BITS  # chart ids per block
MASK = BLOCK - 1
NONE = 0xFFFF  # length of a chart with no external id
GONE = 0xFFFE  # length of an id of the block with no chart
MAX_BYTES = 0xFFFD  # the longest external id, in UTF-8 bytes (the database's is 200 characters)
_MISSING = object()


class _Block:
    __slots__ = ("offs", "lens", "blob", "live", "dead")

    def __init__(self) -> None:
        self.offs = array("I", [0]) * BLOCK
        self.lens = array("H", [GONE]) * BLOCK
        self.blob = bytearray()
        self.live = 0  # charts in the block
        self.dead = 0  # bytes of the blob that no chart's id holds

    def drop(self, n: int) -> None:
        """``n`` more bytes no chart holds: compacted once they are half of the block's."""
        self.dead += n
        if self.dead > 256 and 2 * self.dead > len(self.blob):
            self.compact()

    def compact(self) -> None:
        blob, offs, lens, out = self.blob, self.offs, self.lens, bytearray()
        for j in range(BLOCK):
            n = lens[j]
            if n < GONE:
                o = offs[j]
                offs[j] = len(out)
                out += blob[o:o + n]
        self.blob, self.dead = out, 0

    def copy(self) -> _Block:
        b = _Block.__new__(_Block)
        b.offs, b.lens, b.blob, b.live, b.dead = array("I", self.offs), array("H", self.lens), bytearray(self.blob), \
            self.live, self.dead
        return b


class ExternalIds(MutableMapping):
    """Chart id (an int) -> its external id (a ``str``, or None): a dict's behaviour, held as
    bytes (see the module's docstring). Iterates block by block: in chart id order within a
    block, blocks in the order they were made."""

    __slots__ = ("_blocks", "_len")

    def __init__(self, items=()) -> None:
        self._blocks: dict[int, _Block] = {}
        self._len = 0
        self.update(items)

    def get(self, chart_id: int, default=None):
        b = self._blocks.get(chart_id >> BLOCK_BITS)
        if b is None:
            return default
        j = chart_id & MASK
        n = b.lens[j]
        if n >= GONE:
            return None if n == NONE else default
        o = b.offs[j]
        return b.blob[o:o + n].decode()

    def __getitem__(self, chart_id: int) -> str | None:
        got = self.get(chart_id, _MISSING)
        if got is _MISSING:
            raise KeyError(chart_id)
        return got

    def __contains__(self, chart_id: object) -> bool:
        if type(chart_id) is not int:
            return False
        b = self._blocks.get(chart_id >> BLOCK_BITS)
        return b is not None and b.lens[chart_id & MASK] != GONE

    def __setitem__(self, chart_id: int, external_id: str | None) -> None:
        if type(chart_id) is not int:
            raise TypeError(f"a chart id is an int, not {type(chart_id).__name__}")
        if external_id is not None and type(external_id) is not str:
            raise TypeError(f"external_id: a str or None, not {type(external_id).__name__}")
        data = None if external_id is None else external_id.encode()
        if data is not None and len(data) > MAX_BYTES:
            raise ValueError(f"external_id: {len(data)} bytes, more than {MAX_BYTES}")
        key, j = chart_id >> BLOCK_BITS, chart_id & MASK
        b = self._blocks.get(key)
        if b is None:
            b = self._blocks[key] = _Block()
        n = b.lens[j]
        if n == GONE:
            b.live += 1
            self._len += 1
        elif n != NONE:
            o = b.offs[j]
            if data is not None and len(data) == n and b.blob[o:o + n] == data:
                return  # the same id (a resync sets every chart's again)
        if data is None:
            b.lens[j] = NONE
        else:
            b.offs[j] = len(b.blob)
            b.lens[j] = len(data)
            b.blob += data
        if n < GONE:  # its old bytes, dropped once the new ones are in
            b.drop(n)

    def __delitem__(self, chart_id: int) -> None:
        if self.pop(chart_id, _MISSING) is _MISSING:
            raise KeyError(chart_id)

    def pop(self, chart_id: int, default=_MISSING):
        got = self.get(chart_id, _MISSING)
        if got is _MISSING:
            if default is _MISSING:
                raise KeyError(chart_id)
            return default
        key, j = chart_id >> BLOCK_BITS, chart_id & MASK
        b = self._blocks[key]
        n = b.lens[j]
        b.lens[j] = GONE
        self._len -= 1
        b.live -= 1
        if not b.live:
            del self._blocks[key]
        elif n != NONE:
            b.drop(n)
        return got

    def __iter__(self) -> Iterator[int]:
        for key, b in list(self._blocks.items()):
            base = key << BLOCK_BITS
            yield from compress(range(base, base + BLOCK), map(GONE.__ne__, b.lens))

    def __len__(self) -> int:
        return self._len

    @property
    def block_count(self) -> int:
        """How many blocks of ``BLOCK`` chart ids hold an id (a block goes with its last chart)."""
        return len(self._blocks)

    def nbytes(self) -> int:
        """The memory it holds (``sys.getsizeof``): the dict of blocks, and each block's
        arrays and bytes (what a pass's forked child may copy of it)."""
        return sys.getsizeof(self._blocks) + sum(
            sys.getsizeof(b) + sys.getsizeof(b.offs) + sys.getsizeof(b.lens) + sys.getsizeof(b.blob)
            for b in self._blocks.values())

    def copy(self) -> ExternalIds:
        out = ExternalIds()
        out._blocks = {key: b.copy() for key, b in self._blocks.items()}
        out._len = self._len
        return out

    def __repr__(self) -> str:
        return f"ExternalIds({dict(self.items())!r})"
