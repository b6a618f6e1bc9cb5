# asrdecode: two commands on a fresh machine, `make demo` and `make test`; both install what they need.
# Everything is installed into a project virtual environment (.venv), so a Debian system Python
# (which refuses system-wide pip installs) works as well as any other: `make test PYTHON=/usr/bin/python3`.
PYTHON ?= python3
VENV := .venv
VPY := $(VENV)/bin/python
PIP := $(VPY) -m pip
STAMP := .install.stamp
BENCH_STAMP := .bench.stamp
TEST_STAMP := .test.stamp
DEMO_STAMP := .demo.stamp
NEMO_VENV := work/venvs/nemo
export OMP_NUM_THREADS ?= 1

.PHONY: install demo lint test test-asan fuzz-diff bench kenlm nemo triton-cpu clean

$(VPY):
	$(PYTHON) -m venv $(VENV) || { echo "venv failed: installing Debian's python3-venv"; \
	  apt-get install -y -qq python3-venv >/dev/null && $(PYTHON) -m venv $(VENV); }
	$(PIP) install -q --upgrade pip

$(STAMP): pyproject.toml $(VPY)
	# torch is pinned to the CPU build first so pip never resolves an unpinned (CUDA) torch.
	$(PIP) install -q torch==2.13.0
	$(PIP) install -q -e '.[dev]' torch==2.13.0
	$(VPY) -m asrdecode.native  # compile the native search engine now (else its first use does)
	touch $(STAMP)

# The tests also cover the server (serve extra), its browser page in Debian's chromium (browser
# extra: Playwright) and Ray corpus decoding (distributed extra).
$(TEST_STAMP): $(STAMP)
	$(PIP) install -q -e '.[dev,serve,distributed,browser]' torch==2.13.0
	command -v chromium >/dev/null || apt-get install -y -qq chromium >/dev/null || { apt-get update -qq && apt-get install -y -qq chromium >/dev/null; } \
	  || echo "WARNING: could not install chromium (apt-get install chromium); the browser tests will be skipped"
	touch $(TEST_STAMP)

install: $(STAMP)

# the demo shows phone-ctc (hama's phone model, the CLI's default) beside the demo models
$(DEMO_STAMP): $(STAMP)
	$(PIP) install -q -e '.[hama]' torch==2.13.0
	touch $(DEMO_STAMP)

demo: $(DEMO_STAMP)
	$(VPY) -m asrdecode.demo

# ruff on the whole repository (src, tests, benchmarks, recipes) and mypy on src/ (configured in
# pyproject.toml; the test stamp installs them with the dev extra, and
# the serve/distributed extras so mypy sees the same packages everywhere)
lint: $(TEST_STAMP)
	$(VPY) -m ruff check .
	$(VPY) -m mypy

test: $(TEST_STAMP) lint
	$(VPY) -m pytest

# The native engine built with AddressSanitizer + UBSan (its own build directory) under a fuzz run of every
# entry point (benchmarks/fuzz_native.py); ASAN_CASES=100000 for the full run (results_fuzz.md).
ASAN_CASES ?= 20000
test-asan: $(TEST_STAMP)
	ASRDECODE_NATIVE_SANITIZE=1 $(VPY) -m asrdecode.native
	ASRDECODE_NATIVE_SANITIZE=1 LD_PRELOAD="$$($${CXX:-c++} -print-file-name=libasan.so) $$($${CXX:-c++} -print-file-name=libstdc++.so)" \
	  ASAN_OPTIONS=detect_leaks=0:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
	  PYTHONPATH=src:tests $(VPY) benchmarks/fuzz_native.py --cases $(ASAN_CASES)

# Both engines against each other and the oracles on sharp joints, peaked emissions, float32, negative
# fusion weights, masked classes (-inf) and broken (NaN / +inf) scores, and the CUDA-graph path emulated on the
# CPU over calls of changing shapes (benchmarks/fuzz_differential.py; results_fuzz.md).
FUZZ_MINUTES ?= 10
fuzz-diff: $(TEST_STAMP)
	OMP_NUM_THREADS=1 PYTHONPATH=src:tests $(VPY) benchmarks/fuzz_differential.py --minutes $(FUZZ_MINUTES)

# KenLM's lmplz/build_binary (for estimate_arpa and its tests); needs Debian's boost packages.
kenlm:
	bash recipes/build_kenlm.sh

$(BENCH_STAMP): $(TEST_STAMP)
	$(PIP) install -q -e '.[dev,serve,distributed,bench]' torch==2.13.0
	touch $(BENCH_STAMP)

# NeMo (a peer in the greedy and n-gram benchmarks) lives in its own venv over the system torch.
nemo: $(STAMP)
	test -x $(NEMO_VENV)/bin/python || $(VPY) -m venv --system-site-packages $(NEMO_VENV)
	$(NEMO_VENV)/bin/pip install -q "nemo_toolkit[asr]" torch==2.13.0
	$(NEMO_VENV)/bin/pip install -q "pandas<3" "pyarrow<20" torch==2.13.0
	$(NEMO_VENV)/bin/pip install -q -e . --no-deps
	$(NEMO_VENV)/bin/pip install -q "jiwer>=3.0" torch==2.13.0  # the benchmarks' WER (not a NeMo dependency)

bench: $(BENCH_STAMP)
	$(VPY) benchmarks/run_all.py

# The compiled rounds' lockstep tests with torch.compile writing Triton kernels (its GPU code) that Triton's
# interpreter runs on the CPU, each kernel's programs in TRITON_ORDER (reverse: a race between programs shows);
# tests/triton_on_cpu.py. Triton goes into work/triton, outside the venv. Two hours or more on one core (the WIND
# round alone over half an hour); TRITON_TESTS picks cases.
TRITON_ORDER ?= reverse
TRITON_TESTS ?= ctc_beam_round or wfst_fixed_round or (transducer_beam_round and token_lm)
triton-cpu: $(TEST_STAMP)
	test -d work/triton/triton || $(PIP) install -q --no-deps --target work/triton triton==3.9.0
	ASRDECODE_TRITON_CPU=$(TRITON_ORDER) PYTHONPATH=work/triton $(VPY) -m pytest -m slow -o addopts="" --timeout=3600 \
	  tests/app/test_triton_on_cpu.py tests/app/test_compile_exact.py -k "triton_on_cpu or $(TRITON_TESTS)"

clean:
	rm -f $(STAMP) $(TEST_STAMP) $(BENCH_STAMP) $(DEMO_STAMP)
	rm -rf $(VENV)
