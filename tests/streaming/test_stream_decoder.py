"""asrdecode.streaming.StreamDecoder: many streams joining and leaving, final result == offline, errors.

Every decoder family (transducer greedy RNN-T / TDT, transducer beam ALSD++ / AES++ / WIND, CTC
greedy, CTC beam with and without blank collapse and per-stream boosts, WFST with per-stream boosts)
runs one schedule of streams that open at different steps, get chunks of random sizes (empty ones
too), skip steps, end at different steps, plus one stream abandoned half way; each final result
must equal ``offline`` on the same audio. Short clips and small blocks keep the file fast.
"""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

pytest.importorskip("sentencepiece")

from asrdecode.audio import read_audio  # noqa: E402
from asrdecode.ctc.wfst import build_tlg, lexicon_from_tokenizer  # noqa: E402
from asrdecode.lm import ArpaModel  # noqa: E402
from asrdecode.models import load  # noqa: E402
from asrdecode.streaming import BlockFrontEnd, StreamDecoder, StreamResult  # noqa: E402
from asrdecode.streaming.frontend import AudioBuffer  # noqa: E402
from asrdecode.streaming.state_batching import StatePool  # noqa: E402
from asrdecode.transducer import LSTMTransducer, StatelessTransducer  # noqa: E402

DATA = Path(__file__).resolve().parents[2] / "data" / "real"
FRONT = dict(block_frames=4, left_context=1, right_context=1)  # small blocks: many steps on short clips
CARD_WORDS = "ace two three four five six seven eight nine ten jack queen king of clubs spades hearts diamonds".split()


@pytest.fixture(scope="module")
def bundles() -> dict:
    return {name: load(name) for name in ("demo-rnnt", "demo-tdt", "demo-ctc")}


@pytest.fixture(scope="module")
def clips() -> list[torch.Tensor]:
    """Four short clips (0.9 - 1.4 s) of real speech (the bundled models, trained on synthetic speech, get few words right)."""
    librivox = read_audio(DATA / "librivox-sense_and_sensibility_01_austen_64kb-0880.wav")
    return [read_audio(DATA / "cards-002.wav")[:22000], read_audio(DATA / "cards-001.wav")[:15000],
            librivox[:20000], read_audio(DATA / "cards-003.wav")[2000:20000]]


@pytest.fixture(scope="module")
def graph(bundles):
    """A small TLG: the card words, a unigram LM."""
    grams = {("<s>",): (-99.0, 0.0), ("</s>",): (-1.0, None)}
    grams.update({(w,): (-2.0, 0.0) for w in CARD_WORDS})
    tok = bundles["demo-ctc"].tokenizer
    return build_tlg(tok.vocab_size, lexicon_from_tokenizer(CARD_WORDS, tok), ArpaModel.from_dict(grams),
                     blank_id=tok.blank_id)


# (bundle, decoder, options, per-stream boosts of stream 0 and 2: None = decoder without boosts)
FAMILIES = {
    "rnnt-greedy": ("demo-rnnt", "greedy", {}, None),
    "rnnt-greedy-wind": ("demo-rnnt", "greedy", {"window": 4}, None),
    "tdt-greedy": ("demo-tdt", "greedy", {}, None),
    "rnnt-beam-alsd-boost": ("demo-rnnt", "beam", {"beam": 3, "method": "alsd", "boost_weight": 1.0},
                             ({"queen": 8.0}, {"clubs": 4.0})),
    "tdt-beam-alsd": ("demo-tdt", "beam", {"beam": 3, "method": "alsd"}, None),
    "rnnt-beam-aes": ("demo-rnnt", "beam", {"beam": 3, "method": "aes"}, None),
    "tdt-beam-alsd-torch-engine": ("demo-tdt", "beam", {"beam": 3, "method": "alsd", "engine": "torch"}, None),
    "rnnt-beam-wind": ("demo-rnnt", "beam", {"beam": 2, "method": "wind", "window": 3}, None),
    "rnnt-beam-wind-gamma": ("demo-rnnt", "beam", {"beam": 3, "method": "wind", "window": 4, "expansion_gamma": 1.0},
                             None),
    "ctc-greedy": ("demo-ctc", "greedy", {}, None),
    "ctc-beam-boost": ("demo-ctc", "beam", {"beam": 4, "boost_weight": 1.0}, ({"clubs": 8.0}, {"queen": 8.0})),
    "ctc-beam-collapse": ("demo-ctc", "beam", {"beam": 4, "blank_collapse": 0.999}, None),
    "wfst-boost": ("demo-ctc", "wfst", {"beam": 12.0}, ({"ten": 8.0}, {"ace": 5.0})),
}


def _decoder(bundles, graph, family: str) -> tuple[StreamDecoder, tuple | None]:
    name, decoder, options, boosts = FAMILIES[family]
    options = dict(options)
    if decoder == "wfst":
        options["graph"] = graph
    return StreamDecoder(bundles[name], decoder, **FRONT, **options), boosts


def _same(a, b) -> None:
    assert a.tokens == b.tokens
    assert a.timestamps == b.timestamps
    assert a.durations == b.durations
    assert a.words == b.words
    assert a.text == b.text
    assert a.score == pytest.approx(b.score, rel=1e-4, abs=1e-3)


def run_schedule(dec: StreamDecoder, clips: list, boosts: dict, seed: int, abandon: bool = True) -> tuple[dict, dict]:
    """Streams ``0..n-1`` (clip ``i``) open at step ``i``, get random chunks (some empty, some steps
    skipped) and end with their audio; stream ``"x"`` is opened, fed and closed half way. Returns
    the final results and every partial result per stream."""
    rng = random.Random(seed)
    pos = {i: 0 for i in range(len(clips))}
    finals: dict = {}
    partials: dict = {i: [] for i in range(len(clips))}
    step = 0
    while len(finals) < len(clips):
        if abandon and step == 2:
            dec.open("x")
        chunks, ends = {}, set()
        if abandon and step in (2, 3):
            chunks["x"] = clips[0][: 3000 * (step - 1)].numpy()  # numpy input too
        for i, wave in enumerate(clips):
            if i in finals or step < i:
                continue
            if step == i:
                dec.open(i, boosts.get(i))
            if rng.random() < 0.25:
                continue  # no chunk for this stream in this step
            n = rng.choice([0, 100, 700, 1280, 2000, 4500, 9000])
            chunks[i] = wave[pos[i] : pos[i] + n]
            pos[i] += n
            if pos[i] >= wave.numel():
                ends.add(i)
        results = dec.step(chunks, final=ends)
        assert set(results) == set(chunks)
        for sid, r in results.items():
            assert isinstance(r, StreamResult) and r.stream_id == sid and r.final == (sid in ends)
            assert r.text == r.hypothesis.text
            if sid == "x":
                continue
            partials[sid].append(r)
            if r.final:
                finals[sid] = r
                assert sid not in dec.streams
        if abandon and step == 3:
            dec.close("x")
        step += 1
    assert len(dec) == 0 and dec.streams == []
    return finals, partials


@pytest.mark.parametrize("family", list(FAMILIES))
def test_streaming_equals_offline(bundles, clips, graph, family: str) -> None:
    dec, boost_pair = _decoder(bundles, graph, family)
    boosts = {} if boost_pair is None else {0: boost_pair[0], 2: boost_pair[1]}
    finals, partials = run_schedule(dec, clips, boosts, seed=len(family))
    for i, wave in enumerate(clips):
        offline = dec.offline(wave, boosts.get(i))
        _same(finals[i].hypothesis, offline)
        frames = [r.frames for r in partials[i]]
        assert frames == sorted(frames) and frames[-1] > 0
        for r in partials[i]:
            assert all(t < max(r.frames, 1) for t in r.hypothesis.timestamps)
        if dec.decoder == "greedy":  # greedy partial results only grow
            for a, b in zip(partials[i], partials[i][1:]):
                assert b.hypothesis.tokens[: len(a.hypothesis.tokens)] == a.hypothesis.tokens
    if boost_pair is not None:  # the boosts change those streams' results (and were applied per stream)
        assert dec.offline(clips[0], boost_pair[0]).tokens != dec.offline(clips[0]).tokens
        assert finals[1].hypothesis.tokens == dec.offline(clips[1]).tokens


@pytest.mark.parametrize("family", ["rnnt-beam-alsd-boost", "tdt-beam-alsd", "rnnt-beam-wind"])
def test_beam_chunks_run_in_one_engine_call(bundles, clips, graph, family: str) -> None:
    """The transducer beam families (demo models: float32 LSTMTransducers) search every batched step's chunk in
    one native engine call (the StatePool joining and splitting the streams' BeamStates, per-stream boosting
    trees), with results equal to offline decoding."""
    from transducer_models import engine_calls

    from asrdecode.native import _lib
    from asrdecode.native import transducer_search as ts

    if not _lib.available():
        pytest.skip("native engine unavailable")
    dec, boost_pair = _decoder(bundles, graph, family)
    boosts = {} if boost_pair is None else {0: boost_pair[0], 2: boost_pair[1]}
    with engine_calls(ts, "search_chunk") as seen:
        finals, _ = run_schedule(dec, clips, boosts, seed=3)
    assert seen["calls"] > len(clips) and seen["declined"] == 0
    for i, wave in enumerate(clips):
        _same(finals[i].hypothesis, dec.offline(wave, boosts.get(i)))


@pytest.mark.parametrize("family", ["rnnt-greedy", "tdt-beam-alsd", "ctc-beam-boost"])
def test_result_does_not_depend_on_the_other_streams(bundles, clips, graph, family: str) -> None:
    """A stream decoded alone (one chunk) and amid others gives the same results."""
    dec, boost_pair = _decoder(bundles, graph, family)
    boosts = {} if boost_pair is None else {0: boost_pair[0], 2: boost_pair[1]}
    together, _ = run_schedule(dec, clips, boosts, seed=7, abandon=False)
    for i, wave in enumerate(clips):
        dec.open(("alone", i), boosts.get(i))
        alone = dec.step({("alone", i): wave}, final={("alone", i)})[("alone", i)]
        _same(alone.hypothesis, together[i].hypothesis)


@settings(max_examples=5, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(cuts=st.lists(st.integers(0, 6000), min_size=1, max_size=12), family=st.sampled_from(["tdt-greedy", "rnnt-beam-alsd-boost"]))
def test_any_chunking_equals_offline(bundles, clips, graph, cuts: list[int], family: str) -> None:
    dec, boost_pair = _decoder(bundles, graph, family)
    boosts = None if boost_pair is None else boost_pair[0]
    wave = clips[0]
    dec.open("s", boosts)
    pos, result = 0, None
    for n in cuts:
        result = dec.step({"s": wave[pos : pos + n]})["s"]
        pos += n
    result = dec.step({"s": wave[pos:]}, final={"s"})["s"]
    assert result.final
    _same(result.hypothesis, dec.offline(wave, boosts))


def test_empty_and_tiny_streams(bundles) -> None:
    dec = StreamDecoder(bundles["demo-rnnt"], "beam", beam=2, **FRONT)
    dec.open("empty")
    dec.open("tiny")
    r = dec.step({"empty": np.zeros(0, dtype=np.float32), "tiny": torch.zeros(300)}, final={"empty", "tiny"})
    for sid, audio in (("empty", torch.zeros(0)), ("tiny", torch.zeros(300))):
        assert r[sid].final and r[sid].frames == 0 and r[sid].hypothesis.tokens == []
        _same(r[sid].hypothesis, dec.offline(audio))


# -- the front end ----------------------------------------------------------------------------------


@settings(max_examples=4, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(cuts=st.lists(st.integers(0, 5000), max_size=10), block=st.sampled_from([(4, 2, 1), (8, 0, 0), (3, 5, 2)]))
def test_front_end_blocks_equal_the_whole_audio(bundles, clips, cuts: list[int], block: tuple) -> None:
    front = BlockFrontEnd(bundles["demo-rnnt"], None, *block)
    wave = clips[3]
    whole = front.encode_utterance(wave)
    buf, parts, pos = AudioBuffer.empty(), [], 0
    for n in cuts:
        front.push(buf, wave[pos : pos + n])
        pos += n
        parts.append(front.frames(buf, final=False))
        assert all(p.shape[0] % block[0] == 0 for p in parts)  # whole blocks only before the end
    front.push(buf, wave[pos:])
    parts.append(front.frames(buf, final=True))
    assert torch.equal(torch.cat(parts), whole)  # bitwise: every window is encoded alone
    enc, n = bundles["demo-rnnt"].encode([wave])
    assert whole.shape == (int(n[0]), enc.shape[2])  # as many frames as whole-utterance encoding
    assert buf.samples.numel() <= (block[0] + block[1] + block[2] + 1) * 1280  # old audio is dropped


# -- the state pool (prediction-network states through the model protocol only) ---------------------


@pytest.mark.parametrize("model", [LSTMTransducer(7, 5, 6, 4, blank_id=6, pred_layers=2),
                                   StatelessTransducer(7, 5, 6, 4, blank_id=0, context=3)])
def test_state_pool_round_trip(model) -> None:
    torch.manual_seed(0)
    rows = 3

    def state(seed: int):
        labels = torch.full((rows,), seed % 6 + 1)
        s = model.initial_state(rows)
        for k in range(seed % 4 + 1):
            _, s = model.predict((labels + k) % 6 + 1, s)
        return s

    def same(a, b) -> bool:
        if isinstance(a, tuple):
            return all(torch.equal(x, y) for x, y in zip(a, b))
        return torch.equal(a, b)

    pool = StatePool(model, rows)
    slots = {i: pool.add(state(i)) for i in range(5)}  # grows 1 -> 2 -> 4 -> 8
    assert pool.capacity == 8
    for i, slot in slots.items():
        assert same(pool.gather([slot]), state(i))
    pool.release(slots.pop(1))
    slots[9] = pool.add(state(9))  # reuses the freed slot
    assert pool.capacity == 8
    order = [9, 0, 4]
    both = pool.gather([slots[i] for i in order])
    assert same(model.select_state(both, torch.arange(rows, 2 * rows)), state(0))
    pool.scatter([slots[4], slots[9]], model.select_state(both, torch.cat([torch.arange(rows)] * 2)))
    assert same(pool.gather([slots[4]]), state(9)) and same(pool.gather([slots[9]]), state(9))
    assert same(pool.gather([slots[0]]), state(0)) and same(pool.gather([slots[2]]), state(2))


# -- bad inputs ------------------------------------------------------------------------------------


def test_bad_inputs(bundles, clips, graph) -> None:
    rnnt, ctc_b = bundles["demo-rnnt"], bundles["demo-ctc"]
    with pytest.raises(ValueError, match="unknown decoder 'foo'"):
        StreamDecoder(rnnt, "foo")
    with pytest.raises(ValueError, match="unknown decoder 'wfst'"):
        StreamDecoder(rnnt, "wfst")
    with pytest.raises(ValueError, match=r"needs graph.*StreamDecoder.for_bundle\(bundle, 'wfst'\)"):
        StreamDecoder(ctc_b, "wfst")
    with pytest.raises(ValueError, match="no option"):
        StreamDecoder(rnnt, "greedy", beam=4)
    with pytest.raises(ValueError, match="tokenizer"):
        StreamDecoder(rnnt, "beam", tokenizer=rnnt.tokenizer)
    with pytest.raises(ValueError, match="beam"):
        StreamDecoder(rnnt, "beam", beam=0)
    with pytest.raises(ValueError, match="block_frames"):
        StreamDecoder(rnnt, "greedy", block_frames=0)
    with pytest.raises(ValueError, match="boost_weight"):
        StreamDecoder(rnnt, "beam", boost_weight="high")
    with pytest.raises(ValueError, match="bundle"):
        StreamDecoder(rnnt.model, "greedy")

    dec = StreamDecoder(rnnt, "greedy", **FRONT)
    with pytest.raises(ValueError, match="'greedy' does not support per-stream boosts"):
        dec.open("a", {"queen": 1.0})
    with pytest.raises(ValueError, match="boost_weight"):
        StreamDecoder(rnnt, "beam", beam=2).open("a", {"queen": 1.0})
    with pytest.raises(ValueError, match="not in the graph"):
        StreamDecoder(ctc_b, "wfst", graph=graph).open("a", {"zebra": 1.0})
    boosted = StreamDecoder(ctc_b, "beam", beam=2, boost_weight=1.0)
    for boosts, msg in (({"queen": "x"}, "finite"), (["queen"], "mapping"), ({3: 1.0}, "str")):
        with pytest.raises(ValueError, match=msg):
            boosted.open("a", boosts)
    assert len(boosted) == 0
    dec.open("a")
    dec.open("b")
    with pytest.raises(ValueError, match="already open"):
        dec.open("a")
    with pytest.raises(ValueError, match="hashable"):
        dec.open(["a"])
    wave = clips[1]
    good = wave[:3000]
    bad = {
        "2-D": (wave[:3000].reshape(2, 1500), "1-D"),
        "NaN": (torch.full((100,), float("nan")), "NaN"),
        "int16": ((wave[:3000] * 32767).to(torch.int16).numpy(), "float32"),
        "int tensor": (torch.zeros(10, dtype=torch.int32), "float32"),
        "list": ([0.0] * 10, "numpy array or torch tensor"),
    }
    for _what, (audio, msg) in bad.items():
        with pytest.raises(ValueError, match=msg):
            dec.step({"a": good, "b": audio})
    with pytest.raises(KeyError, match="not open"):
        dec.step({"a": good, "zzz": good})
    with pytest.raises(ValueError, match="without a chunk"):
        dec.step({"a": good}, final={"b"})
    with pytest.raises(ValueError, match="collection"):
        dec.step({"a": good}, final="a")
    with pytest.raises(ValueError, match="mapping"):
        dec.step([good])
    with pytest.raises(ValueError, match="1-D"):
        dec.offline(wave.reshape(1, -1))
    with pytest.raises(KeyError):
        dec.close("zzz")
    # nothing was consumed by the failed steps: the streams still decode their audio exactly
    r = dec.step({"a": wave[:8000], "b": torch.zeros(0)})
    assert r["a"].frames == 4 and r["b"].frames == 0  # one block (its lookahead frame has arrived)
    r = dec.step({"a": wave[8000:].double(), "b": wave}, final={"a", "b"})
    _same(r["a"].hypothesis, dec.offline(wave))
    _same(r["b"].hypothesis, dec.offline(wave))
    assert len(dec) == 0


def test_steps_inside_and_outside_inference_mode(bundles, clips) -> None:
    """A server may run steps under torch.inference_mode() or not; mixing both is fine."""
    dec = StreamDecoder(bundles["demo-tdt"], "greedy", **FRONT)
    wave = clips[1]
    dec.open("a")
    dec.step({"a": wave[:7000]})
    with torch.inference_mode():
        dec.open("b")
        dec.step({"a": wave[7000:10000], "b": wave[:9000]})
    r = dec.step({"a": wave[10000:], "b": wave[9000:]}, final={"a", "b"})
    _same(r["a"].hypothesis, dec.offline(wave))
    _same(r["b"].hypothesis, dec.offline(wave))


def test_greedy_initial_state_equals_an_empty_first_chunk() -> None:
    # GreedyState.initial / GreedyDecoder.init_state is the state after an empty chunk
    from asrdecode.transducer import GreedyDecoder, GreedyState, LSTMTransducer, greedy

    torch.manual_seed(0)
    model = LSTMTransducer(9, 6, 8, 8, blank_id=8).eval()
    enc = torch.randn(2, 7, 6)
    lengths = torch.tensor([7, 4])
    dec = GreedyDecoder(model)
    with torch.no_grad():
        empty = dec.advance(dec.init_state(2), enc[:, :0], torch.zeros(2, dtype=torch.long))
        fresh = GreedyState.initial(model, 2)
        torch.testing.assert_close(fresh.dec_out, empty.dec_out)
        a = dec.finalize(dec.advance(fresh, enc, lengths))
        b = greedy(model, enc, lengths)
    assert [(h.tokens, h.timestamps) for h in a] == [(h.tokens, h.timestamps) for h in b]


class _WithGraph:
    """demo-ctc whose own decoding is WFST over a graph file (as phone-ctc's is over its cached graph)."""

    def __init__(self, bundle, graph_path: Path) -> None:
        self._bundle, self._graph = bundle, graph_path

    def __getattr__(self, name: str):
        return getattr(self._bundle, name)

    @property
    def decode_defaults(self) -> dict:
        return {"decoder": "wfst", "graph": str(self._graph), "acoustic_scale": 1.5, "wfst_beam": 9.0}


def test_for_bundle_takes_the_bundles_own_decoding(bundles, clips, graph, tmp_path) -> None:
    """StreamDecoder.for_bundle resolves a bundle's decoding as transcribe and serve do: its default decoder and
    options (a graph file loaded), then the caller's over them; a plain StreamDecoder needs them spelled out."""
    graph.save(tmp_path / "g.pt")
    own = _WithGraph(bundles["demo-ctc"], tmp_path / "g.pt")
    dec = StreamDecoder.for_bundle(own)
    wfst = dec.family.decoder
    assert dec.decoder == "wfst" and wfst.config.acoustic_scale == 1.5 and wfst.config.beam == 9.0
    assert torch.equal(wfst.graph.e_dst, graph.e_dst) and wfst.graph.words == graph.words
    spelled = StreamDecoder(own, "wfst", graph=graph, acoustic_scale=1.5, beam=9.0)
    assert [dec.offline(c).words for c in clips] == [spelled.offline(c).words for c in clips]
    assert StreamDecoder.for_bundle(own, acoustic_scale=0.5).family.decoder.config.acoustic_scale == 0.5
    beam = StreamDecoder.for_bundle(bundles["demo-ctc"], "beam", beam=3)
    assert beam.decoder == "beam" and beam.family.options["beam"] == 3
    assert StreamDecoder.for_bundle(bundles["demo-rnnt"]).decoder == "greedy"
    with pytest.raises(ValueError, match=r"StreamDecoder.open\(id, boosts=...\)"):
        StreamDecoder.for_bundle(own, boost=["two:2"])
