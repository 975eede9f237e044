# memlab: two commands do all setup on a fresh machine.
#   make demo   venv + install + quick CPU sweep + site; prints the path of index.html
#   make test   venv + install + the test suite
# torch is pinned in pyproject.toml only (torch==2.13.0: a local CPU wheel on our machines).

PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
OUT    ?= out

.PHONY: install demo test test-slow data site clean gpu-check models cuda-variants

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

$(VENV)/.installed: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -e ".[site,test,bench,peers,cluster]"
	$(BIN)/python -m pip install --quiet --disable-pip-version-check --no-deps memcnn==1.5.2 torchtune==0.6.1 cut-cross-entropy==25.1.1
	$(BIN)/python -c "import torch; assert torch.__version__.startswith('2.13.0'), torch.__version__"
	touch $@

install: $(VENV)/.installed

## quick CPU sweep of every family (66 points, two at a time: every technique at its family's quick grid, the
## transformer's 14 with its peers at seq 32 and 64), then the site: the sweep took 0.8 min at load ~2 on 2 cores
## when it had 38 points (before the transformer family)
demo: install
	@mkdir -p $(OUT)
	$(BIN)/memlab sweep --quick --jobs 2 --iterations 2 --repeats 3 --time-budget 0.5 --out $(OUT)/demo-sweep.jsonl || test $$? -eq 1
	@$(BIN)/memlab site --results results --data data --run $(OUT)/demo-sweep.jsonl --out $(OUT)/site > $(OUT)/.site-path \
	  && echo "site: $$(cat $(OUT)/.site-path)" \
	  || echo "site builder not available yet; the sweep table is above ($(OUT)/demo-sweep.jsonl)"

## the suite on two workers (pytest-xdist, from the test extra), one test file per worker at a time
## (--dist loadfile): a module's fixtures (the browser, the Ray instance, the module-wide sweeps and fits) start
## once, and its tests run in their file's order, as they do serially
## two workers on two cores: each test's torch threads would spin-wait for CPUs the other worker holds
## (OpenMP's default active wait); passive waiting cut a 4-file subset from 125.8 s to 95.6 s wall
## (212 -> 147 s user CPU; 5 Dec 2026, load 3). It changes no figure a test asserts (no test asserts a time)
test: install
	OMP_WAIT_POLICY=PASSIVE $(BIN)/python -m pytest -q -n 2 --dist loadfile

## the slow tests `make test` leaves out (asv building its own virtualenv and memlab at two commits)
test-slow: install
	$(BIN)/python -m pytest -q -m slow

## full sweeps (SGD over every family's grid, the resnet depth scan's two middle depths, Adam at each technique's
## defaults), timelines and reproductions committed under data/; an interrupted sweep continues with the same
## command plus --resume.  On 2 idle cores (4 Dec 2026): the SGD grid (213 points) 28.4 min, 34% of it in the
## float64 reference checks at the measured size (python -m memlab.sweep.breakdown data/sweeps/cpu.jsonl); the resnet
## depths 23 s; Adam (26 points) 4.1 min.  Two jobs of one intra-op thread each, and the reproductions at one
## thread too: every CPU row at threads=1 (a convolution's exact CPU peak depends on the threads)
SWEEP_FLAGS := --jobs 2 --iterations 2 --repeats 3 --time-budget 1
data: install
	$(BIN)/memlab sweep $(SWEEP_FLAGS) --out data/sweeps/cpu.jsonl || test $$? -eq 1
	$(BIN)/memlab sweep $(SWEEP_FLAGS) --family resnet --grid depth=74,290 --grid batch=4 --grid width=4 --out data/sweeps/cpu-resnet.jsonl || test $$? -eq 1
	$(BIN)/memlab sweep $(SWEEP_FLAGS) --defaults --optimizer adam --out data/sweeps/cpu-adam.jsonl || test $$? -eq 1
	$(BIN)/memlab timelines --out-dir data/timelines
	OMP_NUM_THREADS=1 $(BIN)/memlab reproduce --out data/reproductions

## memory models for memlab advise (data/models/*.json) of every family that declares one (memlab.AdvisorModel):
## exact traces + held-out measurements; chunking + reversible ~10 min on 2 cores; tensor_train 288 s and
## resnet 1146 s (SGD and Adam) at load 20-29; `--family NAME` fits one and keeps the rest
models: install
	$(BIN)/memlab advise --fit

site: install
	$(BIN)/memlab site --results results --data data --out $(OUT)/site

clean:
	rm -rf $(OUT) $(VENV) .asv/html

-include Makefile.asv

## on a machine with a CUDA GPU: the CUDA tests, a quick CUDA sweep (results under data/sweeps) and the
## predicted-vs-measured table (data/gpu-check/<gpu>.json: every technique at its defaults and every seed
## configuration, measured on the GPU beside the prediction from its CPU trace; the site shows the errors)
gpu-check: install
	$(BIN)/python -m pytest -q tests/test_cuda.py
	$(BIN)/memlab sweep --quick --device cuda --out data/sweeps/cuda-quick.jsonl
	$(BIN)/python -m memlab.cuda.gpu_check --out data/gpu-check

## the seed configurations predicted for a GPU under several PYTORCH_CUDA_ALLOC_CONF settings (CPU only)
cuda-variants: install
	$(BIN)/python -m memlab.cuda.variants --out data/cuda-variants
