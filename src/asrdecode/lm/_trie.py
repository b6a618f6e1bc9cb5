"""Vectorised (numpy) trie over the n-grams of an :class:`ArpaModel`: node ids and lookups.

Node ids: 0 is the root (empty history); then every 1-gram, every 2-gram, ... in blocks by
order. Within an order, nodes are sorted by (node id of the prefix, last word id), so lookups are
``searchsorted`` over one int64 key array per order (no Python loop over n-grams).
"""

from __future__ import annotations

import numpy as np

from ..errors import FileFormatError

__all__ = ["NGramTrie"]


class NGramTrie:
    """Hierarchical ids of every n-gram of a model; raises on duplicates and missing prefixes."""

    def __init__(self, n_words: int) -> None:
        self.n_words = max(int(n_words), 1)
        self.keys: list[np.ndarray] = []  # per order: sorted keys prefix_node * W + last_word
        self.offset: list[int] = []  # per order: node id of the first node of that order
        self.node_of: list[np.ndarray] = []  # per order: node id of each n-gram (file order)
        self.num_nodes = 1
        self.parent: list[np.ndarray] = []  # per order: node id of each n-gram's context (file order)
        self.suffix: list[np.ndarray] | None = None  # the model's suffix links, when they hold

    @classmethod
    def build(cls, model) -> "NGramTrie":  # model: ArpaModel (import cycle avoided)
        """The trie of ``model``'s n-grams; raises :class:`FileFormatError` (naming the line) for a duplicate
        or an n-gram without its context. Uses the model's links (``context`` / ``suffix``) when they hold."""
        trie = cls(len(model.vocab))
        W = trie.n_words
        links = _links_hold(model)
        trie.suffix = model.suffix if links else None
        for k in range(1, model.order + 1):
            words = model.words[k - 1]  # int32 [n, k]: only columns are widened (no int64 copy of the whole)
            n = words.shape[0]
            if k == 1:
                parent = np.zeros(n, dtype=np.int64)
            elif links:  # a 2-gram's context is its first word (the 1-gram of that index)
                parent = trie.node_of[k - 2][words[:, 0] if k == 2 else model.context[k - 1]]
            else:
                parent = trie.lookup(words[:, : k - 1])
                missing = np.flatnonzero(parent < 0)
                if missing.size:
                    i = int(missing[0])
                    text = " ".join(model.vocab[j] for j in words[i])
                    ctx = " ".join(model.vocab[j] for j in words[i, : k - 1])
                    raise FileFormatError(
                        model.path, model.line_of(k, i),
                        f"the {k}-gram '{text}' has no {k - 1}-gram for its context '{ctx}'",
                    )
            key = parent * W
            key += words[:, k - 1]
            perm = np.argsort(key, kind="stable")
            skey = key[perm]
            dup = np.flatnonzero(skey[1:] == skey[:-1])
            if dup.size:
                i = int(perm[dup[0] + 1])
                text = " ".join(model.vocab[j] for j in words[i])
                raise FileFormatError(model.path, model.line_of(k, i), f"duplicate {k}-gram '{text}'")
            del key
            node_of = np.empty(n, dtype=np.int64)
            node_of[perm] = np.arange(trie.num_nodes, trie.num_nodes + n, dtype=np.int64)
            trie.keys.append(skey)
            trie.offset.append(trie.num_nodes)
            trie.node_of.append(node_of)
            trie.parent.append(parent)
            trie.num_nodes += n
        return trie

    def lookup(self, words: np.ndarray) -> np.ndarray:
        """Node ids ``[M]`` of the word sequences ``words [M, j]`` (``-1`` where absent; ``j = 0`` gives the root)."""
        words = np.asarray(words, dtype=np.int64)
        m, j = words.shape
        cur = np.zeros(m, dtype=np.int64)
        W = self.n_words
        for i in range(j):
            if i >= len(self.keys):
                return np.full(m, -1, dtype=np.int64)
            keys = self.keys[i]
            key = cur * W + words[:, i]
            if keys.size == 0:
                return np.full(m, -1, dtype=np.int64)
            pos = np.searchsorted(keys, key)
            pos_c = np.minimum(pos, keys.size - 1)
            found = (cur >= 0) & (keys[pos_c] == key)
            cur = np.where(found, self.offset[i] + pos_c, -1)
        return cur

    def suffix_nodes(self, words: np.ndarray, k: int) -> np.ndarray:
        """Node ids ``[n_k]`` of the longest proper suffix that is a node of each ``k``-gram of the model
        (``words [n_k, k]``, the model's, in file order): from the model's links when it has them, else
        :meth:`longest_suffix_node`."""
        if self.suffix is not None and k == 2:  # a 2-gram's longest proper suffix is its last word
            return self.node_of[0][np.asarray(words)[:, 1]]
        if self.suffix is not None and k > 2:
            link = self.suffix[k - 1]
            m, idx = link & 63, link >> 6
            out = np.zeros(link.shape[0], dtype=np.int64)
            for j in np.unique(m).tolist():
                sel = m == j
                out[sel] = self.node_of[j - 1][idx[sel]]
            return out
        return self.longest_suffix_node(np.asarray(words, dtype=np.int64)[:, 1:], k - 1)

    def longest_suffix_node(self, words: np.ndarray, max_len: int) -> np.ndarray:
        """Node id of the longest suffix of each row of ``words [M, j]`` of length <= ``max_len`` that is a node.

        Falls back to the root (0).
        """
        words = np.asarray(words, dtype=np.int64)
        m, j = words.shape
        out = np.zeros(m, dtype=np.int64)
        done = np.zeros(m, dtype=bool)
        for length in range(min(j, max_len), 0, -1):
            if done.all():
                break
            idx = np.flatnonzero(~done)
            node = self.lookup(words[idx, j - length :])
            hit = node >= 0
            out[idx[hit]] = node[hit]
            done[idx[hit]] = True
        return out


_LINK_DTYPES = (np.dtype(np.int32), np.dtype(np.int64))


def _links_hold(model) -> bool:
    """Whether ``model`` has the native reader's trie links and they still name its words: each 1-gram's
    index is its word id, each n-gram's context (orders >= 3) holds its first ``k - 1`` words and its
    suffix its last ``m`` (a model whose arrays were replaced or edited since reading fails this and is
    looked up instead)."""
    ctx, suf = getattr(model, "context", None), getattr(model, "suffix", None)
    if not ctx or not suf or len(ctx) != model.order or len(suf) != model.order:
        return False
    uni = model.words[0]
    if uni.shape[1:] != (1,) or not np.array_equal(uni[:, 0], np.arange(uni.shape[0])):
        return False  # a 2-gram's links are its words: each 1-gram's index must be its word id
    for k in range(3, model.order + 1):
        words = model.words[k - 1]
        n = words.shape[0]
        c, s = ctx[k - 1], suf[k - 1]
        if c.shape != (n,) or s.shape != (n,) or c.dtype not in _LINK_DTYPES or s.dtype not in _LINK_DTYPES:
            return False
        if n == 0:
            continue
        prev = model.words[k - 2]
        if int(c.min()) < 0 or int(c.max()) >= prev.shape[0] or not _rows_equal(prev, c, words[:, : k - 1]):
            return False
        m, idx = s & 63, s >> 6
        if int(m.min()) < 1 or int(m.max()) > k - 1 or int(idx.min()) < 0:
            return False
        for j in np.unique(m).tolist():
            sel = m == j
            tail, at = model.words[j - 1], idx[sel]
            if int(at.max()) >= tail.shape[0] or not _rows_equal(tail, at, words[sel, k - j:]):
                return False
    return True


def _rows_equal(table: np.ndarray, rows: np.ndarray, expected: np.ndarray) -> bool:
    """Whether ``table[rows]`` equals ``expected`` (int32 ``[n, j]`` each), each row compared as one item."""
    j = table.shape[1]
    as_item = np.dtype((np.void, 4 * j))
    left = np.ascontiguousarray(table, dtype=np.int32).view(as_item).reshape(-1)[rows]
    return bool(np.array_equal(left, np.ascontiguousarray(expected, dtype=np.int32).view(as_item).reshape(-1)))
