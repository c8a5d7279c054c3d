"""A sorted list of keys for the live order, stdlib only.

The keys live in a list of sorted sublists (each at most ``2 * load`` long)
with a parallel list of sublist maxima, the layout of ``sortedcontainers``:
insert and delete are a bisect over the maxima plus a bisect and a memmove in
one sublist, O(log n + load), i.e. O(log n) with a small constant for the
sizes the scheduler sees; iteration from the head is a plain walk.
"""
from __future__ import annotations

from bisect import bisect_left, bisect_right, insort
from itertools import chain
from typing import Iterator


class SortedKeys:
    __slots__ = ("_lists", "_maxes", "_len", "_load")

    def __init__(self, keys=(), load: int = 512) -> None:
        self._load = load
        self._lists: list[list] = []
        self._maxes: list = []
        self._len = 0
        if keys:
            self.bulk_load(keys)

    def bulk_load(self, keys) -> None:
        """Replace the content with ``keys`` (sorted here), O(n log n)."""
        ks = sorted(keys)
        load = self._load
        self._lists = [ks[i:i + load] for i in range(0, len(ks), load)]
        self._maxes = [lst[-1] for lst in self._lists]
        self._len = len(ks)

    def __len__(self) -> int:
        return self._len

    def __bool__(self) -> bool:
        return self._len > 0

    def __iter__(self) -> Iterator:
        """Keys from the head. Do not modify the container while iterating."""
        return chain.from_iterable(self._lists)

    def add(self, key) -> None:
        maxes = self._maxes
        if not maxes:
            self._lists.append([key])
            maxes.append(key)
            self._len = 1
            return
        pos = bisect_right(maxes, key)
        lists = self._lists
        if pos == len(maxes):
            pos -= 1
            lst = lists[pos]
            lst.append(key)
            maxes[pos] = key
        else:
            lst = lists[pos]
            insort(lst, key)
        self._len += 1
        if len(lst) > 2 * self._load:
            half = lst[self._load:]
            del lst[self._load:]
            maxes[pos] = lst[-1]
            lists.insert(pos + 1, half)
            maxes.insert(pos + 1, half[-1])

    def remove(self, key) -> None:
        """Remove ``key``; ValueError if absent."""
        maxes = self._maxes
        pos = bisect_left(maxes, key)
        if pos == len(maxes):
            raise ValueError("key not in SortedKeys")
        lst = self._lists[pos]
        i = bisect_left(lst, key)
        if i == len(lst) or lst[i] != key:
            raise ValueError("key not in SortedKeys")
        del lst[i]
        self._len -= 1
        if not lst:
            del self._lists[pos]
            del maxes[pos]
        elif i == len(lst):
            maxes[pos] = lst[-1]

    def first(self):
        """The smallest key; IndexError if empty."""
        return self._lists[0][0]

    def first_from(self, key):
        """The smallest key >= ``key`` (None: none), O(log n)."""
        maxes = self._maxes
        pos = bisect_left(maxes, key)
        if pos == len(maxes):
            return None
        lst = self._lists[pos]
        return lst[bisect_left(lst, key)]

    def pop_first(self):
        lst = self._lists[0]
        key = lst.pop(0)
        self._len -= 1
        if not lst:
            del self._lists[0]
            del self._maxes[0]
        return key

    def pop_head(self, n: int) -> list:
        """Remove and return the ``n`` smallest keys (all if fewer), in order."""
        out: list = []
        lists = self._lists
        while n > 0 and lists:
            lst = lists[0]
            if n < len(lst):
                out += lst[:n]
                del lst[:n]
                self._len -= n
                break
            out += lst
            n -= len(lst)
            self._len -= len(lst)
            del lists[0]
            del self._maxes[0]
        return out

    def index(self, key) -> int:
        """Position of ``key`` from the head, O(n / load + log n); ValueError if absent."""
        pos = bisect_left(self._maxes, key)
        if pos == len(self._maxes):
            raise ValueError("key not in SortedKeys")
        lst = self._lists[pos]
        i = bisect_left(lst, key)
        if i == len(lst) or lst[i] != key:
            raise ValueError("key not in SortedKeys")
        return sum(len(x) for x in self._lists[:pos]) + i

    def sublists(self) -> list[list]:
        """The sublists, head first (read-only view for fast passes)."""
        return self._lists

    def copy(self) -> "SortedKeys":
        """A copy sharing the keys (tuples): the sublists are copied at C speed, so a
        reader in another thread can walk it while this one keeps changing."""
        other = SortedKeys.__new__(SortedKeys)
        other._load = self._load
        other._lists = [lst[:] for lst in self._lists]
        other._maxes = list(self._maxes)
        other._len = self._len
        return other
