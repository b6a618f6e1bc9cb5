"""A bounded cache of recently made values (per-call set-ups a repeated call can reuse: frozen configs, engine
arguments), safe to share between threads without a lock: a lost race costs one value made twice."""

from __future__ import annotations

from typing import Generic, Hashable, Optional, TypeVar

__all__ = ["RecentValues"]

V = TypeVar("V")


class RecentValues(Generic[V]):
    """At most ``kept`` values by key; the oldest entry makes room for a new one."""

    def __init__(self, kept: int) -> None:
        if kept < 1:
            raise ValueError(f"kept must be >= 1, got {kept}")
        self.kept = kept
        self._values: dict[Hashable, V] = {}

    def __len__(self) -> int:
        return len(self._values)

    def get(self, key: Hashable) -> Optional[V]:
        """The value kept for ``key``, or ``None``."""
        return self._values.get(key)

    def put(self, key: Hashable, value: V) -> V:
        """Keep ``value`` for ``key`` (dropping the oldest entry when full); returns ``value``."""
        if len(self._values) >= self.kept:
            try:
                self._values.pop(next(iter(self._values)), None)
            except (StopIteration, RuntimeError):  # emptied or changed by another thread meanwhile
                pass
        self._values[key] = value
        return value
