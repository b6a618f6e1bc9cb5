"""Every ``asrdecode ...`` command of the user documentation (README.md and docs/*.md) works as written.

The commands are read from the fenced code blocks (``\\`` continuations joined, ``#`` comments
dropped); their placeholder files (``clip.wav``, ``words.arpa``, ``tlg.pt``, ``corpus.jsonl``, ...)
are resolved to shipped files or to small files made here, and outputs go to a temporary folder.

- Every command parses with today's command line (a renamed or removed flag fails here).
- The commands that decode run in the default suite (the default model phone-ctc with the small
  graph tests/conftest.py gives it).
- Those that start a server, Ray or a long benchmark, or need KenLM's ``lmplz``, run in the slow
  set (``make bench``), where they run as written too.
"""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import torch

from asrdecode import cli

ROOT = Path(__file__).resolve().parents[2]
DOCS = ["README.md", *sorted(str(p.relative_to(ROOT)) for p in (ROOT / "docs").glob("*.md"))]
_FENCE = re.compile(r"^```[a-z]*[ \t]*\n(.*?)^```", re.S | re.M)
SHIPPED_WORD_LM = "src/asrdecode/models/assets/word-3gram.arpa.gz"
CLIPS = {"clip.wav": "data/real/cards-001.wav", "a.wav": "data/real/cards-001.wav",
         "b.wav": "data/real/cards-002.wav"}
#: placeholders that name an output (file or folder): a fresh path under the run's temporary folder
OUTPUTS = {"clip.json", "pred.jsonl", "tokens.arpa.gz", "out/", "bench/", "onnx-rnnt/", "load.json", "words.arpa.out",
           "subtitles/"}


@dataclass(frozen=True)
class DocCommand:
    doc: str
    line: int
    argv: tuple[str, ...]

    @property
    def id(self) -> str:
        return f"{self.doc}:{self.line}"


def doc_commands(text: str, doc: str) -> list[DocCommand]:
    """The ``asrdecode`` commands of a markdown text's fenced blocks, as argument lists."""
    out = []
    for m in _FENCE.finditer(text):
        first = text.count("\n", 0, m.start(1)) + 1
        lines = m.group(1).split("\n")
        k = 0
        while k < len(lines):
            start, cmd = k, lines[k]
            while cmd.rstrip().endswith("\\") and k + 1 < len(lines):
                k += 1
                cmd = cmd.rstrip()[:-1] + " " + lines[k].strip()
            k += 1
            if not cmd.lstrip().startswith("asrdecode "):
                continue
            words = shlex.split(cmd, comments=True)
            if words and words[0] == "asrdecode":
                out.append(DocCommand(doc, first + start, tuple(words[1:])))
    return out


ALL = [c for doc in DOCS for c in doc_commands((ROOT / doc).read_text(encoding="utf-8"), doc)]


def test_command_extraction() -> None:
    md = "x\n```bash\nasrdecode a b \\\n    --c 'd e'   # note\nls\n```\n```\nasrdecode f  # g\n```\n"
    assert doc_commands(md, "m") == [DocCommand("m", 3, ("a", "b", "--c", "d e")), DocCommand("m", 8, ("f",))]
    assert len(ALL) >= 20  # the README's command list and the guides' examples are found


#: flags whose value is a file the command writes
OUTPUT_FLAGS = ("--out", "-o", "--output", "--json")


def _resolve(argv: tuple[str, ...], files: dict[str, str]) -> list[str]:
    """Placeholders replaced; an output named after ``--out`` / ``-o`` that is no placeholder of a
    later command's input goes to the temporary folder (``build-lm --out words.arpa`` must not
    overwrite the LM the other commands read)."""
    out = []
    for k, a in enumerate(argv):
        if k and argv[k - 1] in OUTPUT_FLAGS and a not in OUTPUTS and a != "tlg.pt":
            out.append(str(Path(files["out/"]).parent / Path(a).name))  # (the made folder "out" holding "out/")
        else:
            out.append(files.get(a, a))
    return out


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict[str, str]:
    """Placeholder -> a shipped file or a small file made here (outputs: fresh paths)."""
    from asrdecode.audio import read_audio
    from asrdecode.lm.arpa import prune_vocabulary, read_arpa
    from asrdecode.models import load

    tmp = tmp_path_factory.mktemp("doc_commands")
    out = {k: str(ROOT / v) for k, v in CLIPS.items()}
    (tmp / "talks").mkdir()  # a folder of audio files
    for name in ("a.wav", "b.wav"):
        (tmp / "talks" / name).write_bytes((ROOT / CLIPS[name]).read_bytes())
    out["talks/"] = str(tmp / "talks") + "/"
    out["words.arpa"] = str(_small_word_lm(prune_vocabulary(read_arpa(SHIPPED_WORD_LM), 300).vocab,
                                           tmp / "words.arpa"))
    manifest = ROOT / "data/synth_test/manifest.jsonl"
    rows = [json.loads(ln) for ln in manifest.read_text().splitlines()[:2]]
    for row in rows:  # (the manifest's audio paths are relative to its own folder)
        row["audio_filepath"] = str(manifest.parent / row["audio_filepath"])
    (tmp / "corpus.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    out["corpus.jsonl"] = str(tmp / "corpus.jsonl")
    (tmp / "corpus.txt").write_text("edward and elinor walked\nmarianne played the piano\n" * 20)
    out["corpus.txt"] = str(tmp / "corpus.txt")
    demo = load("demo-ctc")
    lp, _ = demo.model.log_probs([read_audio(ROOT / CLIPS["clip.wav"])])
    np.save(tmp / "logprobs.npy", lp[0].detach().numpy())
    out["logprobs.npy"] = str(tmp / "logprobs.npy")
    from onramp_models import cached_hf_ctc

    out["path/to/wav2vec2-dir"] = str(cached_hf_ctc())  # a small random wav2vec2 CTC folder
    out["tlg.pt"] = str(tmp / "tlg.pt")  # built by the README's own build-graph command (below)
    for name in OUTPUTS:
        out[name] = str(tmp / "out" / name.rstrip("/")) + ("/" if name.endswith("/") else "")
    (tmp / "out").mkdir()
    return out


#: words the documented commands boost (``--boost WORD:W`` with a WFST graph needs them in the LM)
BOOSTED = ("edward",)


def _small_word_lm(vocab: list[str], path: Path) -> Path:
    """A uniform unigram ARPA of ``vocab`` plus :data:`BOOSTED`: a user's small word LM, quick to
    turn into a TLG."""
    words = sorted({w for w in vocab if w not in ("<s>", "</s>", "<unk>")} | set(BOOSTED))
    lp = -np.log10(len(words) + 1)
    body = [f"{lp:.6f}\t</s>", "-99\t<s>", *(f"{lp:.6f}\t{w}" for w in words)]
    path.write_text(f"\\data\\\nngram 1={len(body)}\n\n\\1-grams:\n" + "\n".join(body) + "\n\n\\end\\\n")
    return path


@pytest.mark.parametrize("cmd", ALL, ids=lambda c: c.id)
def test_doc_command_parses(cmd: DocCommand, files: dict[str, str]) -> None:
    try:
        cli.build_parser().parse_args(_resolve(cmd.argv, files))
    except SystemExit as stop:
        pytest.fail(f"{cmd.id}: `asrdecode {' '.join(cmd.argv)}` does not parse (exit {stop.code})")


def _kind(cmd: DocCommand) -> str:
    """How a documented command is checked: ``run`` here, or why it is in the slow set."""
    argv = cmd.argv
    if argv[0] in ("serve", "loadtest", "bench", "transcribe-dataset"):
        return "slow: " + argv[0]
    if argv[0] == "build-lm":
        return "slow: needs KenLM's lmplz"
    return "run"


FAST = [c for c in ALL if _kind(c) == "run"]
SLOW = [c for c in ALL if _kind(c).startswith("slow")]


def _run(cmd: DocCommand, files: dict[str, str], timeout: float = 300.0) -> subprocess.CompletedProcess:
    argv = _resolve(cmd.argv, files)
    return subprocess.run([sys.executable, "-m", "asrdecode.cli", *argv], cwd=ROOT, capture_output=True,
                          text=True, timeout=timeout)


def test_documented_commands_run(files: dict[str, str], monkeypatch, capsys) -> None:
    """The demo-model commands, build-graph and export-onnx first (later commands use their
    outputs), each through the command line's ``main`` as the ``asrdecode`` script runs it."""
    monkeypatch.chdir(ROOT)
    assert FAST, "no runnable documented commands found"
    order = sorted(FAST, key=lambda c: (c.argv[0] != "build-graph", c.argv[0] != "export-onnx"))
    failed = []
    for cmd in order:
        if cmd.argv[0] == "build-graph" and Path(files["tlg.pt"]).exists() and "--out" in cmd.argv \
                and cmd.argv[cmd.argv.index("--out") + 1] == "tlg.pt":
            continue  # one build of the small graph serves every command that names tlg.pt
        code = cli.main(_resolve(cmd.argv, files))
        err = capsys.readouterr().err.strip()
        if code != 0:
            failed.append(f"{cmd.id}: asrdecode {' '.join(cmd.argv)}\n  -> exit {code}: "
                          f"{err.splitlines()[-1] if err else ''}")
    assert not failed, "documented commands fail:\n" + "\n".join(failed)


@pytest.mark.slow
@pytest.mark.parametrize("cmd", SLOW, ids=lambda c: c.id)
def test_documented_slow_command_runs(cmd: DocCommand, files: dict[str, str]) -> None:
    if "tlg.pt" in cmd.argv and not Path(files["tlg.pt"]).exists():
        _build_documented_graph(files)  # (the fast test builds it; run alone, the slow set builds it here)
    if cmd.argv[0] == "serve":  # runs until stopped: it must come up and listen
        argv = [*_resolve(cmd.argv, files), "--port", "0"]
        proc = subprocess.Popen([sys.executable, "-m", "asrdecode.cli", *argv], cwd=ROOT, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
        try:
            line = proc.stdout.readline()
            assert "listening on ws://" in line, proc.stderr.read() if proc.poll() is not None else line
        finally:
            proc.terminate()
            proc.wait(60)
        return
    if cmd.argv[0] == "build-lm":
        from asrdecode.lm.arpa import find_kenlm_tool

        try:
            find_kenlm_tool("lmplz")
        except FileNotFoundError as err:
            pytest.skip(str(err))
    if cmd.argv[0] == "loadtest" and "--url" in cmd.argv:
        pytest.skip("needs a server started by hand at that address")
    proc = _run(cmd, files, timeout=1800)
    assert proc.returncode == 0, f"{cmd.id}: exit {proc.returncode}: {proc.stderr[-2000:]}"


def _build_documented_graph(files: dict[str, str]) -> None:
    """``tlg.pt`` made by the documentation's own ``build-graph ... --out tlg.pt`` command."""
    build = next(c for c in FAST if c.argv[0] == "build-graph" and "--out" in c.argv
                 and c.argv[c.argv.index("--out") + 1] == "tlg.pt")
    proc = _run(build, files)
    assert proc.returncode == 0, f"{build.id}: exit {proc.returncode}: {proc.stderr[-2000:]}"


def test_tensor_placeholders_are_what_the_commands_expect(files: dict[str, str]) -> None:
    x = torch.from_numpy(np.load(files["logprobs.npy"]))
    assert x.dim() == 2 and x.shape[1] == 257  # decode --blank-id 256 --model demo-ctc
