"""One streaming convention for every search: ``init_state`` / ``advance`` / ``finalize`` (``partial``).

- chunked ``advance`` + ``finalize`` equals the one-shot call, over random chunkings (every search);
- the old flags (``state=``, ``return_state=``, ``final=``) still work and warn, naming the new way;
- bad states and settings get named errors;
- one decoder object shared by two threads gives exactly the single-thread results.
"""

from __future__ import annotations

import threading
import warnings

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from asrdecode import ctc, transducer
from asrdecode.errors import DecodingInputError
from asrdecode.native import _lib
from test_ctc_helpers import TableBigram, peaky_log_probs, random_lengths
from transducer_models import ApproxScore, hyp_key, random_encoder, random_model

SETTINGS = settings(max_examples=12, deadline=None, derandomize=True)
TDT = [0, 1, 2]
V, BLANK = 6, 2
ENGINES = ["torch", "native"] if _lib.available() else ["torch"]


def _bounds(seed: int, frames: int, n_chunks: int) -> list[int]:
    g = torch.Generator().manual_seed(seed)
    cuts = sorted(torch.randint(0, frames + 1, (n_chunks - 1,), generator=g).tolist())
    return [0, *cuts, frames]


def _chunks(x: torch.Tensor, lens: torch.Tensor, bounds: list[int]):
    """``(chunk, its lengths, is last)`` per chunk: every utterance streams its own frames."""
    for i, (a, z) in enumerate(zip(bounds[:-1], bounds[1:])):
        yield x[:, a:z], (lens - a).clamp(min=0, max=z - a), i == len(bounds) - 2


def _key(hyps) -> list:
    return hyp_key(hyps, 9)


def _nkey(nbest) -> list:
    return [_key(row) for row in nbest]


# -- chunked == one-shot, every search --------------------------------------------------------------


@SETTINGS
@given(st.integers(0, 10_000), st.integers(1, 3), st.integers(0, 14), st.integers(1, 5))
def test_ctc_greedy_chunked_equals_one_shot(seed, batch, frames, n_chunks):
    lp = peaky_log_probs(seed, batch, frames, V, BLANK)
    lens = random_lengths(seed, batch, frames)
    dec = ctc.CTCGreedyDecoder(BLANK)
    state = dec.init_state(batch)
    for x, n, _ in _chunks(lp, lens, _bounds(seed, frames, n_chunks)):
        state = dec.advance(state, x, n)
    assert _key(dec.finalize(state)) == _key(ctc.greedy(lp, lens, BLANK))
    assert _key(dec.partial(state)) == _key(dec.decode(lp, lens))


@SETTINGS
@given(st.integers(0, 10_000), st.integers(1, 3), st.integers(0, 14), st.integers(1, 5),
       st.sampled_from([None, "weak", 0.9]), st.booleans(), st.sampled_from(ENGINES))
def test_ctc_beam_chunked_equals_one_shot(seed, batch, frames, n_chunks, collapse, with_lm, engine):
    lp = peaky_log_probs(seed, batch, frames, V, BLANK, peak=5.0)
    lens = random_lengths(seed, batch, frames)
    fusion = [(TableBigram(V, BLANK, seed=seed), 0.5)] if with_lm else []
    dec = ctc.CTCBeamDecoder(BLANK, vocab_size=V, beam=3, nbest=3, fusion=fusion, beta=0.2, blank_collapse=collapse,
                             engine=engine)
    state = dec.init_state(batch, dtype=lp.dtype)
    for x, n, _ in _chunks(lp, lens, _bounds(seed, frames, n_chunks)):
        state = dec.advance(state, x, n)
        assert len(dec.partial(state)) == batch
    assert _nkey(dec.finalize(state)) == _nkey(ctc.beam_search(lp, lens, BLANK, beam=3, nbest=3, fusion=fusion,
                                                                beta=0.2, blank_collapse=collapse, engine=engine))


@SETTINGS
@given(st.integers(0, 10_000), st.integers(1, 3), st.integers(0, 10), st.integers(1, 4),
       st.sampled_from([None, TDT]), st.sampled_from(["labels", "frames"]))
def test_transducer_greedy_chunked_equals_one_shot(seed, batch, frames, n_chunks, durations, loop):
    m = random_model(seed % 7, V, BLANK, durations, blank_bias=1.0)
    enc = random_encoder(seed, batch, frames)
    lens = random_lengths(seed, batch, frames)
    dec = transducer.GreedyDecoder(m, loop=loop)
    state = dec.init_state(batch, dtype=enc.dtype)
    for x, n, _ in _chunks(enc, lens, _bounds(seed, frames, n_chunks)):
        state = dec.advance(state, x, n)
    assert _key(dec.finalize(state)) == _key(transducer.greedy(m, enc, lens, loop=loop))


@SETTINGS
@given(st.integers(0, 10_000), st.integers(1, 3), st.integers(0, 10), st.integers(1, 4),
       st.sampled_from([("alsd", None), ("aes", None), ("alsd", TDT), ("aes", TDT), ("wind", None)]),
       st.booleans(), st.sampled_from(ENGINES))
def test_transducer_beam_chunked_equals_one_shot(seed, batch, frames, n_chunks, method_dur, mark_last, engine):
    """The last chunk marked ``final=True`` then ``finalize``, or (RNN-T) every chunk unmarked and
    ``finalize`` ending the search: both equal the one-shot search."""
    method, durations = method_dur
    if not mark_last and durations is not None:
        mark_last = True  # a TDT jump past the end is clamped on the step that makes it: mark the last chunk
    m = random_model(seed % 5, V, BLANK, durations, blank_bias=0.5)
    enc = random_encoder(seed, batch, frames)
    lens = random_lengths(seed, batch, frames)
    kw = dict(beam=3, nbest=3, method=method, window=2, max_symbols=3, engine=engine)
    dec = transducer.BeamSearchDecoder(m, **kw)
    state = dec.init_state(batch)
    for x, n, last in _chunks(enc, lens, _bounds(seed, frames, n_chunks)):
        state = dec.advance(state, x, n, final=last and mark_last)
        assert len(dec.partial(state)) == batch
    assert _nkey(dec.finalize(state)) == _nkey(transducer.beam_search(m, enc, lens, **kw))


WFST_V, WFST_BLANK = 3, 1
LEXICON = {"ab": [0, 2], "ba": [2, 0], "a": [0], "b": [2], "aa": [0, 0]}


@pytest.fixture(scope="module")
def graph():
    pytest.importorskip("kaldifst")
    from asrdecode.ctc.wfst import build_tlg
    from asrdecode.lm import ArpaModel

    lm = ArpaModel.from_dict({
        ("<s>",): (-99.0, -0.25), ("</s>",): (-0.9, None), ("ab",): (-0.6, -0.2), ("ba",): (-0.7, -0.1),
        ("a",): (-0.8, -0.3), ("b",): (-0.9, -0.05), ("aa",): (-1.1, -0.1), ("<s>", "ab"): (-0.3, None),
        ("ab", "ba"): (-0.2, None), ("b", "a"): (-0.5, None),
    })
    return build_tlg(WFST_V, LEXICON, lm, topology="compact", blank_id=WFST_BLANK)


def _wkey(hyps) -> list:
    return [(h.tokens, h.timestamps, h.words) for h in hyps] + [_key(hyps)]


@pytest.mark.parametrize("engine", ENGINES)
def test_wfst_chunked_equals_one_shot(graph, engine):
    from asrdecode.ctc.wfst import WFSTDecoder

    dec = WFSTDecoder(graph, beam=8.0, engine=engine)

    @SETTINGS
    @given(st.integers(0, 10_000), st.integers(1, 3), st.integers(0, 12), st.integers(1, 5))
    def check(seed, batch, frames, n_chunks):
        lp = peaky_log_probs(seed, batch, frames, WFST_V, WFST_BLANK, peak=4.0).float()
        lens = random_lengths(seed, batch, frames)
        state = dec.init_state(batch)
        for x, n, _ in _chunks(lp, lens, _bounds(seed, frames, n_chunks)):
            dec.advance(state, x, n)
        assert _wkey(dec.finalize(state)) == _wkey(dec(lp, lens))
        assert _wkey(dec.partial(state)) == _wkey(dec(lp, lens))

    check()


# -- the old flags: still working, with a warning naming the new way --------------------------------


def test_ctc_old_flags_warn_and_agree():
    lp = peaky_log_probs(3, 2, 9, V, BLANK)
    lens = torch.tensor([9, 5])
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)  # the one-shot calls do not warn
        want_g = ctc.greedy(lp, lens, BLANK)
        want_b = ctc.beam_search(lp, lens, BLANK, beam=3)
    with pytest.warns(DeprecationWarning, match="CTCGreedyDecoder"):
        got_g, state = ctc.greedy(lp, lens, BLANK, state=ctc.CTCGreedyState.initial(2))
    assert _key(got_g) == _key(want_g) and isinstance(state, ctc.CTCGreedyState)
    with pytest.warns(DeprecationWarning, match="CTCBeamDecoder"):
        st_b = ctc.beam_search(lp[:, :4], (lens).clamp(max=4), BLANK, beam=3, final=False)
    with pytest.warns(DeprecationWarning, match="CTCBeamDecoder"):
        got_b = ctc.beam_search(lp[:, 4:], (lens - 4).clamp(min=0), BLANK, beam=3, state=st_b)
    assert _nkey(got_b) == _nkey(want_b)


def test_transducer_old_flags_warn_and_agree():
    m = random_model(1, V, BLANK, None, blank_bias=0.5)
    enc = random_encoder(2, 2, 8)
    lens = torch.tensor([8, 6])
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)
        want_g = transducer.greedy(m, enc, lens)
        want_b = transducer.beam_search(m, enc, lens, beam=3)
    with pytest.warns(DeprecationWarning, match="GreedyDecoder"):
        _, st_g = transducer.greedy(m, enc[:, :3], lens.clamp(max=3), return_state=True)
    with pytest.warns(DeprecationWarning, match="GreedyDecoder"):
        got_g, _ = transducer.greedy(m, enc[:, 3:], (lens - 3).clamp(min=0), state=st_g)
    assert _key(got_g) == _key(want_g)
    with pytest.warns(DeprecationWarning, match="BeamSearchDecoder"):
        _, st_b = transducer.beam_search(m, enc[:, :3], lens.clamp(max=3), beam=3, return_state=True, final=False)
    with pytest.warns(DeprecationWarning, match="BeamSearchDecoder"):
        got_b = transducer.beam_search(m, enc[:, 3:], (lens - 3).clamp(min=0), beam=3, state=st_b)
    assert _nkey(got_b) == _nkey(want_b)
    with pytest.warns(DeprecationWarning, match="BeamSearchDecoder"):
        assert _nkey(transducer.beam_search(m, enc, lens, beam=3, final=True)) == _nkey(want_b)


# -- bad input ------------------------------------------------------------------------------------------


def test_bad_states_and_settings_are_named():
    m = random_model(1, V, BLANK, None)
    enc = random_encoder(2, 2, 4)
    lp = peaky_log_probs(3, 2, 4, V, BLANK)
    g, b = transducer.GreedyDecoder(m), transducer.BeamSearchDecoder(m, beam=2)
    cg, cb = ctc.CTCGreedyDecoder(BLANK), ctc.CTCBeamDecoder(BLANK, vocab_size=V, beam=2)
    for dec, x in ((g, enc), (b, enc), (cg, lp), (cb, lp)):
        with pytest.raises(DecodingInputError, match="state must be"):
            dec.advance(object(), x, None)
        with pytest.raises(DecodingInputError, match="batch must be"):
            dec.init_state(-1)
        with pytest.raises(DecodingInputError, match="batch"):  # a state of another batch size
            dec.advance(dec.init_state(3), x, None)
    with pytest.raises(DecodingInputError, match="state must be"):
        b.finalize("not a state")
    with pytest.raises(DecodingInputError, match="state must be"):
        cb.finalize(None)
    with pytest.raises(DecodingInputError, match="encoder_dim"):
        b.init_state(1, 0)
    with pytest.raises(DecodingInputError, match="vocab_size is needed"):
        ctc.CTCBeamDecoder(BLANK).init_state(1)
    with pytest.raises(DecodingInputError, match="classes"):
        ctc.CTCBeamDecoder(BLANK, vocab_size=V + 1).decode(lp)
    with pytest.raises(DecodingInputError, match="blank_id"):
        ctc.CTCBeamDecoder(V, vocab_size=V)
    with pytest.raises(DecodingInputError, match="beam"):
        transducer.BeamSearchDecoder(m, beam=0)
    with pytest.raises(DecodingInputError, match="loop"):
        transducer.GreedyDecoder(m, loop="words")
    with pytest.raises(DecodingInputError, match="different settings"):  # another search's state
        ctc.CTCBeamDecoder(BLANK, vocab_size=V, beam=3).advance(cb.init_state(2), lp)
    with pytest.raises(DecodingInputError, match="beam, method, window"):
        transducer.BeamSearchDecoder(m, beam=3).advance(b.init_state(2), enc)


# -- threads: one decoder, two threads ------------------------------------------------------------------


def _two_threads(work, inputs: list, rounds: int = 6) -> None:
    """``work(input)`` in two threads at once (each on its own inputs, ``rounds`` times) must give what it
    gives in one thread: 0 differences, no error."""
    want = [work(x) for x in inputs]
    barrier = threading.Barrier(2)
    diffs, errors = [], []

    def run(i: int) -> None:
        barrier.wait()
        for _ in range(rounds):
            try:
                got = work(inputs[i])
            except Exception as err:  # noqa: BLE001 - reported below
                errors.append(repr(err))
                return
            if got != want[i]:
                diffs.append(i)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == [] and diffs == []


def _stream_and_whole(dec, x: torch.Tensor, lens: torch.Tensor, init, advance=None) -> list:
    """Chunked (3 chunks) and whole-input results of ``dec``."""
    state = init()
    for chunk, n, last in _chunks(x, lens, _bounds(int(lens.sum()), x.shape[1], 3)):
        state = advance(state, chunk, n, last) if advance is not None else dec.advance(state, chunk, n)
    return [_result_key(dec.finalize(state)), _result_key(dec.decode(x, lens))]


def _result_key(res: list) -> list:
    """A results list (hypotheses, or n-best lists) as comparable keys: scores within 1e-9 (relative)."""
    if res and isinstance(res[0], list):
        return [_result_key(row) for row in res]
    return [(h.tokens, h.timestamps, h.durations, h.words, ApproxScore(h.score, 9)) for h in res]


def _ctc_inputs(vocab: int, blank: int, frames: int = 40):
    return [(peaky_log_probs(s, 3, frames, vocab, blank, peak=4.0).float(), random_lengths(s, 3, frames))
            for s in (11, 12)]


def test_two_threads_ctc_greedy():
    dec = ctc.CTCGreedyDecoder(BLANK)
    _two_threads(lambda a: _stream_and_whole(dec, *a, lambda: dec.init_state(3)), _ctc_inputs(V, BLANK))


@pytest.mark.parametrize("engine", ENGINES)
def test_two_threads_ctc_beam(engine):
    dec = ctc.CTCBeamDecoder(BLANK, vocab_size=V, beam=4, fusion=[(TableBigram(V, BLANK, seed=1), 0.5)],
                             blank_collapse=0.9, engine=engine)
    _two_threads(lambda a: _stream_and_whole(dec, *a, lambda: dec.init_state(3)), _ctc_inputs(V, BLANK))


@pytest.mark.parametrize("engine", ENGINES)
def test_two_threads_wfst(graph, engine):
    from asrdecode.ctc.wfst import WFSTDecoder

    dec = WFSTDecoder(graph, beam=10.0, engine=engine)

    def work(a):
        return _stream_and_whole(dec, *a, lambda: dec.init_state(3),
                                 advance=lambda s, x, n, last: dec.advance(s, x, n))

    _two_threads(work, _ctc_inputs(WFST_V, WFST_BLANK, frames=60), rounds=10)


def test_two_threads_transducer_greedy():
    m = random_model(4, V, BLANK, TDT, blank_bias=1.0)
    dec = transducer.GreedyDecoder(m, max_symbols=3)
    inputs = [(random_encoder(s, 3, 20), random_lengths(s, 3, 20)) for s in (1, 2)]
    _two_threads(lambda a: _stream_and_whole(dec, *a, lambda: dec.init_state(3, dtype=torch.float64)), inputs)


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("method", ["alsd", "wind"])
def test_two_threads_transducer_beam(engine, method):
    m = random_model(5, V, BLANK, None, blank_bias=2.0)
    dec = transducer.BeamSearchDecoder(m, beam=3, method=method, window=2, max_symbols=3, engine=engine)
    inputs = [(random_encoder(s, 2, 12), random_lengths(s, 2, 12)) for s in (1, 2)]
    _two_threads(lambda a: _stream_and_whole(dec, *a, lambda: dec.init_state(2),
                                             advance=lambda s, x, n, last: dec.advance(s, x, n, final=last)),
                 inputs, rounds=3)
