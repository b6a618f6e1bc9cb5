#!/usr/bin/env bash
# Rebuild the bundled demo models, LMs and test sets from scratch (see recipes/README.md).
# Every step is rerunnable; generated corpora go to work/ (git-ignored).
# Needs: apt-get install espeak-ng flite pocketsphinx-testdata fortunes fortunes-min wordnet-base jargon-text
#        pip install sentencepiece scipy   (+ KenLM's lmplz: recipes/build_kenlm.sh)
set -euo pipefail
cd "$(dirname "$0")/.."
export OMP_NUM_THREADS=1
A=src/asrdecode/models/assets
MIN_CTC=${MIN_CTC:-60}
MIN_RNNT=${MIN_RNNT:-15}
MIN_TDT=${MIN_TDT:-15}

python3 recipes/make_text.py
python3 recipes/synthesize.py --split test --num 300 --out work/synth/test
python3 recipes/features.py work/synth/test/manifest.jsonl
python3 recipes/synthesize.py --split train --num 4000 --out work/synth/train
python3 recipes/features.py work/synth/train/manifest.jsonl
python3 recipes/synthesize.py --split train --voices wide --num 24000 --seed 11 --out work/synth/train_wide
python3 recipes/features.py work/synth/train_wide/manifest.jsonl --chunk 24000
python3 recipes/train_tokenizer.py --vocab-size 256
python3 recipes/make_test_sets.py --num 50
recipes/build_kenlm.sh
python3 recipes/build_lms.py
D="--data work/synth/train_wide/logmel.pt work/synth/train/logmel.pt --max-frames 4000 --test work/synth/test/logmel.pt"
# CTC from scratch (the bundled one was trained in four resumed segments, see recipes/README.md);
# RNN-T and TDT on top of its frozen encoder (encoder.pt, shared by the three models).
python3 recipes/train.py --kind ctc --minutes "$MIN_CTC" --lr 2e-3 --warmup 300 --eval-every 1000 $D --out $A/demo-ctc
python3 recipes/train.py --kind rnnt --minutes "$MIN_RNNT" --lr 3e-3 --warmup 100 --eval-every 500 $D --out $A/demo-rnnt
python3 recipes/train.py --kind tdt --minutes "$MIN_TDT" --lr 3e-3 --warmup 100 --eval-every 500 $D --out $A/demo-tdt
for m in demo-ctc demo-rnnt demo-tdt; do python3 recipes/tune_lm.py --model $m; done
python3 recipes/evaluate_models.py
