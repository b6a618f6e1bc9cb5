#!/usr/bin/env python3
"""Recipe step 3: train the sentencepiece BPE tokenizer of the demo models on the training text.

256 pieces (``<unk>`` included, no bos/eos); the models put blank last (id 256), so model ids
equal sentencepiece ids (``asrdecode.tokenizers.SentencePieceTokenizer`` default).

Usage: python3 recipes/train_tokenizer.py [--text work/text/train.txt] [--out src/asrdecode/models/assets/tokenizer]
Run time: about 10 s on one core.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path


def main() -> None:
    import sentencepiece as spm

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--text", default="work/text/train.txt")
    ap.add_argument("--out", default="src/asrdecode/models/assets/tokenizer")
    ap.add_argument("--vocab-size", type=int, default=256)
    args = ap.parse_args()
    t0 = time.time()
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    spm.SentencePieceTrainer.train(
        input=args.text,
        model_prefix=args.out,
        vocab_size=args.vocab_size,
        model_type="bpe",
        character_coverage=1.0,
        bos_id=-1,
        eos_id=-1,
        unk_id=0,
        input_sentence_size=200000,
        shuffle_input_sentence=True,
        num_threads=1,
        minloglevel=2,
    )
    Path(args.out + ".vocab").unlink(missing_ok=True)  # the .model holds everything
    print(f"{args.out}.model: {args.vocab_size} pieces, {time.time() - t0:.1f} s")


if __name__ == "__main__":
    main()
