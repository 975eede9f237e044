# memlab: two commands do all setup on a fresh machine.
#   make demo   venv + install + quick CPU sweep + site; ends with a summary and the page to open first
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
	@echo "installing memlab, torch and the peers into $(VENV) (pip, quiet: several minutes)"
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -e ".[site,test,bench,peers,cluster]"
	$(BIN)/python -m pip install --quiet --disable-pip-version-check --no-deps memcnn==1.5.2 torchtune==0.6.1 cut-cross-entropy==25.1.1
	$(BIN)/python -c "import torch; assert torch.__version__.startswith('2.13.0'), torch.__version__"
	touch $@

install: $(VENV)/.installed

## the quick CPU sweep of every family (every technique at its family's quick grid, two at a time; its size is
## printed at its start, counted from the plan: python -m memlab.sweep.demo plan), then the site, then a summary:
## the count per status, each non-ok row with its reason, expected ones (a technique's known_mismatch or
## known_unavailable, or a device it does not run on) apart from unexpected ones, the site's path and the page
## to open first.  Exit status 1 when something is unexpected.  DEMO_TIME: its typical time on 2 idle cores
## (the runs behind it: docs/evidence/makefile-runs.md)
DEMO_SWEEP := --quick --jobs 2 --iterations 3 --repeats 3 --time-budget 0.5
DEMO_TIME  := under 6 min on 2 idle cores: pip install about 3 min (first run only), the sweep about 2 min, the site 15 s
demo:
	@echo "make demo: install memlab into $(VENV) (first run only), a quick CPU sweep of every family, the site;"
	@echo "  typically $(DEMO_TIME)"
	@$(MAKE) --no-print-directory -s install
	@mkdir -p $(OUT) && rm -f $(OUT)/.site-path
	@$(BIN)/python -m memlab.sweep.demo plan $(DEMO_SWEEP)
	$(BIN)/memlab sweep $(DEMO_SWEEP) --force --out $(OUT)/demo-sweep.jsonl || test $$? -eq 1
	@$(BIN)/memlab site --results results --data data --run $(OUT)/demo-sweep.jsonl --out $(OUT)/site > $(OUT)/.site-path \
	  || echo "the site was not built (the error is above)"
	@$(BIN)/python -m memlab.sweep.demo summary $(OUT)/demo-sweep.jsonl --site "$$(cat $(OUT)/.site-path)" $(DEMO_SWEEP)

## the suite on two workers (pytest-xdist, from the test extra), one test file per worker at a time
## (--dist loadfile): a module's fixtures (the browser, the Ray instance, the module-wide sweeps and fits) start
## once, and its tests run in their file's order, as they do serially
## two workers on two cores: each test's torch threads would spin-wait for CPUs the other worker holds
## (OpenMP's default active wait), so they wait passively; it changes no figure a test asserts (no test
## asserts a time).  Typically about 12 min on 2 idle cores after install (docs/evidence/makefile-runs.md)
test: install
	OMP_WAIT_POLICY=PASSIVE $(BIN)/python -m pytest -q -n 2 --dist loadfile

## the slow tests `make test` leaves out (asv building its own virtualenv and memlab at two commits)
test-slow: install
	$(BIN)/python -m pytest -q -m slow

## full sweeps (SGD over every family's grid, the resnet depth scan's two middle depths, Adam, Adafactor, Adam
## stepped in backward and two accumulated micro-batches at each technique's defaults: issue 44), timelines and
## reproductions committed under data/; an interrupted sweep continues with the same
## command plus --resume.  Typically on 2 idle cores: the SGD grid well over half an hour (a third of it in the
## float64 reference checks at the measured size: python -m memlab.sweep.breakdown data/sweeps/cpu.jsonl), the
## resnet depths under a minute, Adam about 4 min (docs/evidence/makefile-runs.md).  Two jobs of one intra-op
## thread each, and the reproductions at one thread too: every CPU row at threads=1 (a convolution's exact CPU
## peak depends on the threads)
SWEEP_FLAGS := --jobs 2 --iterations 3 --repeats 3 --time-budget 1 --force
data: install
	$(BIN)/memlab sweep $(SWEEP_FLAGS) --out data/sweeps/cpu.jsonl || test $$? -eq 1
	$(BIN)/memlab sweep $(SWEEP_FLAGS) --family resnet --grid depth=74,290 --grid batch=4 --grid width=4 --out data/sweeps/cpu-resnet.jsonl || test $$? -eq 1
	$(BIN)/memlab sweep $(SWEEP_FLAGS) --defaults --optimizer adam --out data/sweeps/cpu-adam.jsonl || test $$? -eq 1
	$(BIN)/memlab sweep $(SWEEP_FLAGS) --defaults --optimizer adafactor --out data/sweeps/cpu-adafactor.jsonl || test $$? -eq 1
	$(BIN)/memlab sweep $(SWEEP_FLAGS) --defaults --optimizer adam_in_backward --out data/sweeps/cpu-adam-in-backward.jsonl || test $$? -eq 1
	$(BIN)/memlab sweep $(SWEEP_FLAGS) --defaults --accumulate 2 --out data/sweeps/cpu-accumulate2.jsonl || test $$? -eq 1
	$(BIN)/memlab timelines --out-dir data/timelines
	OMP_NUM_THREADS=1 $(BIN)/memlab reproduce --out data/reproductions

## memory models for memlab advise (data/models/*.json) of every family that declares one (memlab.AdvisorModel):
## exact traces + held-out measurements; chunking + reversible about 10 min on 2 cores, tensor_train about 5 min
## and resnet about 20 min, SGD and Adam (those two timed on busy cores: docs/evidence/makefile-runs.md);
## `--family NAME` fits one and keeps the rest
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

## how long bad input (a wrong technique, family or parameter name, a malformed --param, a missing
## model file) takes to be refused by a fresh `memlab` process; a benchmark, not a test
.PHONY: bench-cli
bench-cli: install
	$(BIN)/python -m memlab.cli.refusals 5
