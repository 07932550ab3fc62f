#!/usr/bin/env bash
# The checks docs/backends.md ("What has run on GPU hardware") reports, in one script for a machine
# with a GPU and CuPy, run from the repository root:
#
#     bash benchmarks/gpu_check.sh [checks|tests|mpi|all]      (default: checks)
#
# checks: every operator on the device against numpy (pygrid selftest), then the Wilson (links
#         whole and compressed) and domain-wall benchmarks and the linear algebra (axpy, norm2, inner product) on the
#         device, with the numpy baselines and the device copy, and the reductions for several row counts
# tests:  the expression, shift, reduction, Dirac and solver suites with the backend under test
#         set to the GPU and the fields in device memory under a small watermark (evictions),
#         then the time of a Schur CG iteration and its share outside the hopping term
#         (not tests/test_dirac_backends.py: its kernels are the host's and the emulations', which
#         CI runs; on a GPU it took over 5 minutes to re-check host views of device memory)
# mpi:    two ranks sharing the GPU (MPICH and mpi4py, `pip install mpich mpi4py`): the field and
#         Dirac suites of tests/mpi against one rank, then the Wilson and domain-wall benchmarks on
#         a lattice split in t (the generic kernel's half-spinor halo through the host)
#
# On an H200 machine with 16 host cores (2026-11-30, kernels compiled cold) `mpi` took 136 s.
# `all` takes longer than a 15-minute loan of a GPU: choose the modes to fit.
#
# Needs numpy, numba and CuPy (and pytest, hypothesis for "tests"); pygrid is taken from this
# checkout.  ACCEL=hip for an AMD GPU; PYTHON names the interpreter; OUT the folder for the logs
# and the benchmarks' JSON; MPIEXEC the MPI launcher (default: the one beside PYTHON, else on PATH).
set -u
what=${1:-checks}
ACCEL=${ACCEL:-cuda}
PY=${PYTHON:-python3}
OUT=${OUT:-gpu-check}
mkdir -p "$OUT"
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
export PYGRID_CACHE_DIR=${PYGRID_CACHE_DIR:-/tmp/pygrid-cache} NUMBA_CACHE_DIR=${NUMBA_CACHE_DIR:-/tmp/pygrid-cache/numba}
status=0
run() {  # run one step with a time limit, its output to the terminal and to $OUT/log.txt
    local limit=$1; shift
    echo "== $(date -u +%H:%M:%S) $*" | tee -a "$OUT/log.txt"
    timeout "$limit" "$@" 2>&1 | tee -a "$OUT/log.txt"
    local rc=${PIPESTATUS[0]}
    echo "== exit $rc" | tee -a "$OUT/log.txt"
    [ "$rc" = 0 ] || status=1
}

{ nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm,clocks.max.mem --format=csv || true
  lscpu | grep -E '^Model name|^CPU\(s\)' || true
  $PY -c "import sys, numpy, numba, cupy
print('python', sys.version.split()[0], 'numpy', numpy.__version__, 'numba', numba.__version__,
      'cupy', cupy.__version__, 'CUDA runtime', cupy.cuda.runtime.runtimeGetVersion())"
} 2>&1 | tee -a "$OUT/log.txt"

if [ "$what" = checks ] || [ "$what" = all ]; then
    run 300 $PY -m pygrid selftest --accelerator "$ACCEL" --grid 8.8.8.8 --precision both --no-benchmark
    run 300 $PY -m pygrid benchmark wilson --accelerator "$ACCEL" --device-mem none --quiet \
        --sweep 16.16.16.16,32.32.32.32 --precision both --json "$OUT/wilson.json"
    # the links read as two rows and a phase (not the default off the CPU: measured here first)
    run 300 $PY -m pygrid benchmark wilson --accelerator "$ACCEL" --device-mem none --quiet --compress-links \
        --sweep 16.16.16.16,32.32.32.32 --precision both --json "$OUT/wilson-compressed.json"
    run 300 $PY -m pygrid benchmark dwf --accelerator "$ACCEL" --device-mem none --quiet \
        --grid 16.16.16.16 --Ls 16 --precision both --json "$OUT/dwf.json"
    run 200 $PY -m pygrid benchmark axpy --accelerator "$ACCEL" --device-mem none --quiet \
        --grid 32.32.32.32 --precision both --json "$OUT/axpy.json"
    # the reductions' rows (REDUCE_ROWS, 2^17 by default) and loads a thread (REDUCE_LOADS, 1): fewer
    # loads in flight against more partial sums
    run 200 $PY benchmarks/bench_device_reductions.py --accelerator "$ACCEL" --device-mem none \
        --grid 32.32.32.32 --rounds 3
fi
if [ "$what" = tests ] || [ "$what" = all ]; then
    PYGRID_TEST_BACKEND=$ACCEL PYGRID_TEST_DEVICE_MEM=2 run 300 $PY -m pytest -q -rf -p no:cacheprovider \
        tests/test_expr.py tests/test_cshift.py tests/test_reductions.py tests/test_device_views.py \
        tests/test_wilson.py tests/test_domain_wall.py tests/test_schur_solve.py tests/test_solvers.py
    for prec in double single; do
        run 120 $PY benchmarks/bench_solvers.py --accelerator "$ACCEL" --device-mem none --grid 32.32.32.32 \
            --Ls 16 --precision $prec --iterations 200 --operators wilson
        run 120 $PY benchmarks/bench_solvers.py --accelerator "$ACCEL" --device-mem none --grid 16.16.16.16 \
            --Ls 16 --precision $prec --iterations 200 --operators dwf
    done
fi
if [ "$what" = mpi ] || [ "$what" = all ]; then
    MPIEXEC=${MPIEXEC:-$(dirname "$(command -v "$PY")")/mpiexec}
    [ -x "$MPIEXEC" ] || MPIEXEC=mpiexec
    PYGRID_TEST_BACKEND=$ACCEL PYGRID_TEST_DEVICE_MEM=2 run 600 "$MPIEXEC" -n 2 $PY -m pytest -q -x \
        -p no:cacheprovider tests/mpi/test_fields_mpi.py tests/mpi/test_dirac_mpi.py
    run 300 "$MPIEXEC" -n 2 $PY -m pygrid benchmark wilson --accelerator "$ACCEL" --device-mem none --quiet \
        --grid 32.32.32.64 --mpi 1.1.1.2 --precision both --json "$OUT/wilson-mpi.json"
    run 300 "$MPIEXEC" -n 2 $PY -m pygrid benchmark dwf --accelerator "$ACCEL" --device-mem none --quiet \
        --grid 16.16.16.32 --mpi 1.1.1.2 --Ls 16 --precision both --json "$OUT/dwf-mpi.json"
fi
exit $status
