# pygrid: set-up and entry points.
#
#   make run    create .venv if missing, install pygrid, run the Wilson Dslash benchmark
#   make test   create .venv if missing, install pygrid[test,sycl,mpi], run the test suite
#   make lint   ruff over the package, tests and benchmarks (configuration in pyproject.toml)
#   make clean  remove caches and build leftovers (keeps .venv)
#   make distclean  clean, and remove .venv too
#
# Extra arguments: make run ARGS="--grid 16.16.16.32 --threads 8"
#                  make test PYTEST_ARGS="-k config"

SHELL  := /bin/bash
PYTHON ?= python3
VENV   := .venv
VPY    := $(VENV)/bin/python
PIP    := $(VPY) -m pip install --quiet --disable-pip-version-check

# The installation is redone only when pyproject.toml changes.
HASH := $(shell (sha256sum pyproject.toml 2>/dev/null || shasum -a 256 pyproject.toml) | cut -c1-12)
STAMP_RUN  := $(VENV)/.installed-$(HASH)-run
STAMP_TEST := $(VENV)/.installed-$(HASH)-test

CACHE_DIR  := $(CURDIR)/.pygrid-cache
TEST_ENV   := PYGRID_CACHE_DIR=$(CACHE_DIR) NUMBA_CACHE_DIR=$(CACHE_DIR)/numba

ARGS        ?=
PYTEST_ARGS ?=

.PHONY: run test lint clean distclean

run: $(STAMP_RUN)
	$(VENV)/bin/pygrid benchmark wilson $(ARGS)

# The second pass reruns the expression, shift, reduction, fused-update, numpy round-trip, failure-atomicity,
# interop and Dirac-operator suites on the emulated device under a 2 MB watermark, so the MemoryManager
# moves and evicts fields during real kernels (the Dirac calls bound to device buffers among them),
# rolls back the views of kernels that fail, and keeps memory shared through DLPack current.
EMULATED_SUITES := tests/test_expr.py tests/test_cshift.py tests/test_reductions.py tests/test_axpy.py \
                   tests/test_lattice_io.py tests/test_failure_atomic.py tests/test_interop.py \
                   tests/test_wilson.py tests/test_domain_wall.py tests/test_schur_solve.py \
                   tests/test_kept_updates.py tests/test_compressed_links.py
# The third pass runs the expression, shift, reduction, fused-update, Dirac operator (on whole and
# compressed links), solver, propagator, boundary-condition and interop suites on the real sycl backend (dpctl on the Intel CPU OpenCL device,
# from the [sycl] extra), fields in USM device memory under a 2 MB watermark,
# below the working set of the operator tests, so fields are evicted and
# brought back between and inside their kernels and solves; and the Dirac kernels of the other
# backends (openmp, the emulations) on those fields, which they reach through host views. The random
# expression trees of test_expr_properties follow, under a 4 MB watermark (their fields need 3 MB).
SYCL_SUITES := tests/test_expr.py tests/test_cshift.py tests/test_reductions.py tests/test_axpy.py \
               tests/test_wilson.py tests/test_domain_wall.py tests/test_schur_solve.py tests/test_solvers.py \
               tests/test_failure_atomic.py tests/test_propagator.py tests/test_boundary_conditions.py \
               tests/test_interop.py tests/test_dirac_backends.py tests/test_kept_updates.py \
               tests/test_compressed_links.py

# The MPI passes run the collective suites of tests/mpi (expressions, shifts, reductions, RNG,
# Wilson, domain wall, CG, gauge IO) as 2- and 4-rank jobs of MPICH (the [mpi] extra),
# oversubscribed on small machines; each compares with the same computation on one rank.
# The last pass runs the field and Dirac suites on the sycl backend (fields in USM device
# memory, faces gathered on the device and exchanged through the host).
# A failing rank aborts its job, and `timeout` bounds a job that would hang.
MPI_RUN := $(TEST_ENV) timeout 900 $(VENV)/bin/mpiexec

test: $(STAMP_TEST)
	@mkdir -p $(CACHE_DIR)/numba
	$(TEST_ENV) $(VPY) -m pytest -q -x --durations=15 $(PYTEST_ARGS) tests
	$(TEST_ENV) PYGRID_TEST_DEVICE=emulated PYGRID_TEST_DEVICE_MEM=2 $(VPY) -m pytest -q -x $(EMULATED_SUITES)
	$(TEST_ENV) PYGRID_TEST_BACKEND=sycl PYGRID_TEST_DEVICE_MEM=2 $(VPY) -m pytest -q -x $(SYCL_SUITES)
	$(TEST_ENV) PYGRID_TEST_BACKEND=sycl PYGRID_TEST_DEVICE_MEM=4 $(VPY) -m pytest -q -x tests/test_expr_properties.py
	$(MPI_RUN) -n 2 $(VPY) -m pytest -q -x -p no:cacheprovider tests/mpi
	$(MPI_RUN) -n 4 $(VPY) -m pytest -q -x -p no:cacheprovider tests/mpi
	PYGRID_TEST_BACKEND=sycl PYGRID_TEST_DEVICE_MEM=2 $(MPI_RUN) -n 2 $(VPY) -m pytest -q -x -p no:cacheprovider \
	    tests/mpi/test_fields_mpi.py tests/mpi/test_dirac_mpi.py

lint: $(STAMP_TEST)
	$(VENV)/bin/ruff check pygrid tests benchmarks

$(VPY):
	@echo "Creating $(VENV) with $(PYTHON)"
	$(PYTHON) -m venv $(VENV)

# Drop the stamps of an older pyproject.toml, so a stale one cannot match later.
define drop_stale_stamps
	@find $(VENV) -maxdepth 1 -name '.installed-*' ! -name '.installed-$(HASH)-*' -delete
endef

$(STAMP_RUN): | $(VPY)
	@echo "Installing pygrid into $(VENV) (quiet; takes a minute the first time)"
	$(PIP) -e .
	$(drop_stale_stamps)
	@touch $@

# [test,sycl,mpi] includes everything `run` needs, so it satisfies both stamps.
$(STAMP_TEST): | $(VPY)
	@echo "Installing pygrid[test,sycl,mpi] into $(VENV) (quiet; takes a minute the first time)"
	$(PIP) -e '.[test,sycl,mpi]'
	$(drop_stale_stamps)
	@touch $@ $(STAMP_RUN)

clean:
	rm -rf .pygrid-cache .pytest_cache .hypothesis build *.egg-info
	find . -path ./$(VENV) -prune -o -name __pycache__ -type d -prune -exec rm -rf {} +

distclean: clean
	rm -rf $(VENV)
