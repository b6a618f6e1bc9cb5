# asrdecode: two commands on a fresh machine, `make demo` and `make test`; both install what they need.
PYTHON ?= python3
PIP := $(PYTHON) -m pip
STAMP := .install.stamp
BENCH_STAMP := .bench.stamp
TEST_STAMP := .test.stamp
NEMO_VENV := work/venvs/nemo
export OMP_NUM_THREADS ?= 1

.PHONY: install demo test bench kenlm nemo clean

$(STAMP): pyproject.toml
	# torch is pinned to the CPU build first so pip never resolves an unpinned (CUDA) torch.
	$(PIP) install -q torch==2.13.0
	$(PIP) install -q -e '.[dev]' torch==2.13.0
	touch $(STAMP)

# The tests also cover the server (serve extra) and Ray corpus decoding (distributed extra).
$(TEST_STAMP): $(STAMP)
	$(PIP) install -q -e '.[dev,serve,distributed]' torch==2.13.0
	touch $(TEST_STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(PYTHON) -m asrdecode.demo

test: $(TEST_STAMP)
	$(PYTHON) -m pytest

# KenLM's lmplz/build_binary (for estimate_arpa and its tests); needs Debian's boost packages.
kenlm:
	bash recipes/build_kenlm.sh

$(BENCH_STAMP): $(TEST_STAMP)
	$(PIP) install -q -e '.[dev,serve,distributed,bench]' torch==2.13.0
	touch $(BENCH_STAMP)

# NeMo (a peer in the greedy and n-gram benchmarks) lives in its own venv over the system torch.
nemo: $(STAMP)
	test -x $(NEMO_VENV)/bin/python || $(PYTHON) -m venv --system-site-packages $(NEMO_VENV)
	$(NEMO_VENV)/bin/pip install -q "nemo_toolkit[asr]" torch==2.13.0
	$(NEMO_VENV)/bin/pip install -q "pandas<3" "pyarrow<20" torch==2.13.0
	$(NEMO_VENV)/bin/pip install -q -e . --no-deps

bench: $(BENCH_STAMP)
	$(PYTHON) benchmarks/run_all.py

clean:
	rm -f $(STAMP) $(TEST_STAMP) $(BENCH_STAMP)
