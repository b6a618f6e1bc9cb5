# asrdecode: two commands on a fresh machine, `make demo` and `make test`; both install what they need.
PYTHON ?= python3
PIP := $(PYTHON) -m pip
STAMP := .install.stamp
export OMP_NUM_THREADS ?= 1

.PHONY: install demo test bench clean

$(STAMP): pyproject.toml
	# torch is pinned to the CPU build first so pip never resolves an unpinned (CUDA) torch.
	$(PIP) install -q torch==2.13.0
	$(PIP) install -q -e '.[dev,bench]'
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(PYTHON) -m asrdecode.demo

test: $(STAMP)
	$(PYTHON) -m pytest

bench: $(STAMP)
	$(PYTHON) benchmarks/run_all.py

clean:
	rm -f $(STAMP)
