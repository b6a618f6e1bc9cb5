"""RecentValues: the bounded cache of per-call set-ups (one-shot beam configs, engine arguments)."""

import threading

import pytest

from asrdecode.recent import RecentValues


def test_keeps_the_last_values_and_drops_the_oldest() -> None:
    cache: RecentValues[int] = RecentValues(3)
    for k in range(5):
        assert cache.put(k, k * 10) == k * 10
    assert len(cache) == 3
    assert [cache.get(k) for k in range(5)] == [None, None, 20, 30, 40]


def test_a_key_put_again_takes_the_new_value() -> None:
    cache: RecentValues[str] = RecentValues(2)
    cache.put("a", "x")
    cache.put("a", "y")
    assert cache.get("a") == "y" and len(cache) == 1


def test_bad_size_is_an_error() -> None:
    with pytest.raises(ValueError, match="kept"):
        RecentValues(0)


def test_threads_putting_at_once_keep_it_bounded() -> None:
    cache: RecentValues[int] = RecentValues(8)

    def work(base: int) -> None:
        for i in range(2000):
            cache.put((base, i), i)
            cache.get((base, i - 1))

    threads = [threading.Thread(target=work, args=(b,)) for b in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(cache) <= 8 + len(threads)  # a racing put may land after another's eviction check
