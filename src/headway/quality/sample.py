"""Bounded samples of one version's outputs: a reference, then a window of recent rows.

``BernoulliSampler`` takes each served row independently with probability p. It does
not toss a coin per row: the gaps between taken rows are geometric (the number of
trials up to a success), so it draws them ahead, a block at a time, as absolute row
positions in the stream of rows it has been shown. A request none of whose rows is
taken costs one comparison with the next taken position and no RNG draw; one that is
taken costs a ``searchsorted`` over the block. The gaps are independent, so drawing
ahead changes nothing about which rows are taken.

``VersionSample`` keeps what was taken, in two fixed numpy buffers: the first
``reference_size`` rows fill the reference (the version's outputs when this gateway
first served it), every later row goes into a ring of ``window_size`` (the newest
overwrite the oldest). A reference loaded from the store (``adopt``) replaces the
local one, whose rows are then recent traffic and move into the window. Memory is
fixed at (reference_size + window_size) × width float32 per version.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

Rows = npt.NDArray[np.float32]
GAP_BLOCK = 256
"""Taken positions drawn at a time."""


class BernoulliSampler:
    def __init__(self, share: float, rng: np.random.Generator) -> None:
        if not 0.0 < share <= 1.0:
            raise ValueError(f"the sampled share must be in (0, 1], not {share}")
        self._share = share
        self._rng = rng
        self._seen = 0
        """Rows shown so far: the next row's position."""
        first = int(rng.geometric(share)) - 1
        self._positions = first + np.concatenate(([0], np.cumsum(self._gaps())))
        """Positions of the next taken rows, increasing, none before ``_seen``."""
        self._next = first
        """``_positions[0]`` as a Python int: the test of the fast path."""

    def pick(self, rows: int) -> npt.NDArray[np.int64] | None:
        """The indices (in 0 … rows − 1) of the rows taken out of the next ``rows``;
        None when none is."""
        end = self._seen + rows
        if self._next >= end:
            self._seen = end
            return None
        while int(self._positions[-1]) < end:
            self._extend()
        stop = int(np.searchsorted(self._positions, end))  # the first at or past the end
        taken = self._positions[:stop] - self._seen
        self._seen = end
        self._positions = self._positions[stop:]  # a view; _extend copies the rest
        self._next = int(self._positions[0])
        return taken

    def _gaps(self) -> npt.NDArray[np.int64]:
        return self._rng.geometric(self._share, GAP_BLOCK).astype(np.int64)

    def _extend(self) -> None:
        rest = self._positions
        self._positions = np.concatenate((rest, int(rest[-1]) + np.cumsum(self._gaps())))


class VersionSample:
    def __init__(
        self,
        width: int,
        reference_size: int,
        window_size: int,
        sampler: BernoulliSampler,
    ) -> None:
        self.width = width
        self._sampler = sampler
        self._reference: Rows = np.empty((reference_size, width), dtype=np.float32)
        self._reference_rows = 0
        self.reference_full = False
        """The reference is taken (filled here, or adopted): rows now go to the window."""
        self._window: Rows = np.empty((window_size, width), dtype=np.float32)
        self._window_rows = 0
        self._head = 0
        """Where the next window row goes."""
        self.window_total = 0
        """Rows ever put in the window (more than it holds once it wraps)."""

    @property
    def reference_rows(self) -> int:
        return self._reference_rows

    @property
    def window_rows(self) -> int:
        return self._window_rows

    def offer(self, rows: Rows) -> Rows | None:
        """Sample ``rows`` (n × width) and keep what is taken; the rows taken, or None.
        Rows of another width are not this version's outputs as sampled so far: ignored."""
        if rows.ndim != 2 or rows.shape[1] != self.width:
            return None
        picked = self._sampler.pick(len(rows))
        if picked is None:
            return None
        taken: Rows = rows[picked]
        self._keep(taken)
        return taken

    def reference(self) -> Rows:
        """A copy of the reference rows (safe to hand to another thread)."""
        return self._reference[: self._reference_rows].copy()

    def window(self) -> Rows:
        """A copy of the window's rows, in no particular order."""
        return self._window[: self._window_rows].copy()

    def adopt(self, reference: Rows) -> None:
        """Make ``reference`` (k × width, any k) the reference; the rows this sample had
        taken as one move into the window. Raises ``ValueError`` on another width."""
        if reference.ndim != 2 or reference.shape[1] != self.width:
            raise ValueError(f"a reference of shape {reference.shape} for rows {self.width} wide")
        local = self._reference[: self._reference_rows].copy()
        self._reference = np.array(reference, dtype=np.float32, copy=True)
        self._reference_rows = len(reference)
        self.reference_full = True
        self._push(local)

    def _keep(self, taken: Rows) -> None:
        if not self.reference_full:
            room = len(self._reference) - self._reference_rows
            first = taken[:room]
            self._reference[self._reference_rows : self._reference_rows + len(first)] = first
            self._reference_rows += len(first)
            self.reference_full = self._reference_rows == len(self._reference)
            taken = taken[room:]
        if len(taken):
            self._push(taken)

    def _push(self, rows: Rows) -> None:
        """Write ``rows`` at the head of the ring: one slice, or two where it wraps."""
        size = len(self._window)
        self.window_total += len(rows)
        rows = rows[-size:]
        count, head = len(rows), self._head
        first = min(count, size - head)
        self._window[head : head + first] = rows[:first]
        self._window[: count - first] = rows[first:]
        self._head = (head + count) % size
        self._window_rows = min(size, self._window_rows + count)
