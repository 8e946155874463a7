#!/usr/bin/env bash
# The sanitizer stages of the test suite (scripts/test.sh runs all three after the main stage):
#   asan  clang ASan+UBSan build (-DKVASIR_SANITIZE=ON) of the host code: every unit test, the
#         engine end to end on the real SmolLM2 model (a bounded engine_e2e_test subset: stop
#         strings, n > 1, logprobs, bad requests, abort mid-generation) and a bounded server-suite
#         subset (tests/server: security catalogue, bad input, streaming, disconnects, faults)
#         against the ASan `kvasir` binary
#   tsan  clang ThreadSanitizer build (-DKVASIR_TSAN=ON): the concurrency tests (thread pool,
#         scheduler queues, executor worker, engine core loop, HTTP server: acceptor, I/O
#         threads, outbox, serving pump, the grammar compiler's cache and pool, CPU attention's
#         merge of a token's key ranges by the thread that finishes the last, the shm and TCP
#         communicators and tensor-parallel steps across forked ranks) and the engine's threads (front, EngineCore, executor,
#         OutputProcessor) on the real model: an abort mid-generation, n > 1, overlapped vs
#         lock-step output processing, and async scheduling
#   fuzz  every libFuzzer target, built in the same ASan build (scripts/fuzz --ci): replay of every
#         regression and seed input, then a fuzz run with a fixed seed and a fixed number of runs
#         per target, so running the stage twice on one commit gives the same result (long,
#         random fuzzing is scripts/fuzz TARGET SECONDS, see FUZZING.md)
# KVASIR_SANITIZE_FULL=1 runs the whole model suites instead of the subsets (every golden and e2e
# case and the whole server suite under ASan; the e2e suite and the server's concurrency and
# shutdown suites under TSan): hours on 2 cores, for a quiet machine, not CI.
# Usage: scripts/sanitize.sh [asan|tsan|fuzz]...   (no argument: all three). Build dirs
# build-asan/ and build-tsan/ (override with KVASIR_{ASAN,TSAN}_BUILD_DIR). Always CPU only;
# ccache when installed. Prints each stage's and each step's wall time.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
jobs="${KVASIR_JOBS:-2}"
# Third-party test data: $KVASIR_SHARED_TESTDATA, else shared/testdata beside the checkout.
shared="${KVASIR_SHARED_TESTDATA:-$(cd "$root/.." && pwd)/shared/testdata}"
export KVASIR_SHARED_TESTDATA="$shared"
export KVASIR_CHAT_TEMPLATES="${KVASIR_CHAT_TEMPLATES:-$shared/chat_templates}"
supp="$root/fuzz/sanitizer"

configure() {  # build dir, extra cmake args...
  local dir=$1
  shift
  CC=clang CXX=clang++ cmake -S "$root" -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DKVASIR_CUDA=OFF -DKVASIR_WERROR=OFF "$@" >/dev/null
}

# Server tests run with the sanitized binary; a sanitizer report makes the server exit non-zero
# (exitcode below), which the shutdown tests and the fixture's teardown notice, and the report
# itself lands in the server log (/tmp/kvasir_serve_test_*.log).
server_suite() {  # binary, pytest args...
  local bin=$1
  shift
  [ -d tests/server ] || return 0
  KVASIR_BIN="$bin" python3 -m pytest -q -p no:cacheprovider "$@"
}

# Server logs written since this stage began (conftest.py puts them in /tmp).
server_logs() { find /tmp -maxdepth 1 -name 'kvasir_serve_test_*.log' -newer "$stage_mark" 2>/dev/null; }

# One ASan+UBSan build serves the tests and the fuzz targets, which saves CI a whole build.
# libFuzzer's coverage instrumentation does nothing outside a fuzzer but is not free: with it the
# CPU kernels run 10-15x slower than plain, hence the bounded model subsets below.
asan_dir="${KVASIR_ASAN_BUILD_DIR:-$root/build-asan}"
asan_configure() { configure "$asan_dir" -DKVASIR_SANITIZE=ON -DKVASIR_FUZZ=ON -DKVASIR_BUILD_TESTS=ON; }

# Prints how long a command took (the CI budget is tracked per step, see FUZZING.md).
timed() {
  local t0=$(date +%s) rc=0
  "$@" || rc=$?
  echo "   [$(($(date +%s) - t0)) s] $(basename "$1") ${*:2}" | cut -c1-160
  return $rc
}

full="${KVASIR_SANITIZE_FULL:-0}"

# The engine end to end under ASan: loader, tokenizer, model, scheduler, KV cache, sampler, the
# engine threads and detokenizer on the real model. The cases that generate thousands of tokens
# (batch invariance over 32 prompts, 50 x 1,000-token prefix caching) add model time, not code:
# ASan with the fuzzers' coverage instrumentation makes the CPU kernels 10-15x slower.
asan_e2e_filter='*StopStringsNAndLogprobs*:*BadRequestsAreRejectedAndAbortFreesBlocks*'
# The server under ASan: every request parser and error path (security catalogue, bad input,
# auth), the API incl. streaming, request templates, 100 clients that vanish mid-stream, queued
# requests cancelled under running ones, injected engine faults, SIGTERM with and without a
# drain, broken model files. Left out (model time, not more code): the 1,000-stream and
# 1,000-victim load tests, KV exhaustion and the SIGTERM drain under load; soak and bench are
# long runs anyway.
asan_server_tests=(tests/server/test_security.py tests/server/test_bad_input.py tests/server/test_api.py
  tests/server/test_auth_and_defaults.py tests/server/test_render_template.py tests/server/test_shutdown.py
  tests/server/test_concurrency.py::test_killed_clients_free_the_kv_cache tests/server/test_faults.py
  -k 'not thousand and not kv_exhaustion and not drains_everything')

stage_asan() {
  local b="$asan_dir"
  asan_configure
  timed ninja -C "$b" -j"$jobs" $(asan_targets "$b")
  export ASAN_OPTIONS="detect_leaks=1:check_initialization_order=1:strict_init_order=1:detect_stack_use_after_return=1:exitcode=66"
  export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1:exitcode=66"
  export LSAN_OPTIONS="suppressions=$supp/lsan.supp:print_suppressions=0"
  if [ "$full" = 1 ]; then
    timed ctest --test-dir "$b" --output-on-failure -j1 --timeout 7200 -LE cuda
    timed server_suite "$b/tools/kvasir" tests/server
  else
    timed ctest --test-dir "$b" --output-on-failure -j1 --timeout 1800 -LE 'model|model-full|cuda' \
      -E '^(model_golden_test_ci|engine_e2e_test|model_golden_test)$'
    timed "$b/tests/engine_e2e_test" --gtest_filter="$asan_e2e_filter"
    timed "$b/tests/structured_e2e_test" --gtest_filter='*AsyncMasksWaitForTheFold*:*BadGrammar*'
    timed server_suite "$b/tools/kvasir" "${asan_server_tests[@]}"
  fi
  local reports
  reports=$(server_logs | xargs -r grep -l -E 'ERROR: (Address|Leak)Sanitizer|runtime error:' || true)
  [ -z "$reports" ] || { echo "sanitizer reports in server logs: $reports" >&2; return 1; }
}

# Test binaries ctest would run (the golden-logit suite only with KVASIR_SANITIZE_FULL=1), plus
# the CLI the server tests start.
asan_targets() {
  local skip='^(cmake_|cuda_)'
  [ "$full" = 1 ] || skip='^(cmake_|cuda_|model_golden_test)'
  echo kvasir
  ninja -C "$1" -t targets all | sed -n 's/^\([a-z][a-z_0-9]*_test\): phony$/\1/p' | grep -Ev "$skip" | sort -u
}

# Runs one test binary from the repository root. A TSan report (exit 66) fails at once; any other
# failure gets one retry, because a few tests assert wall-clock bounds (slowloris and idle
# timeouts) that a 5-15x TSan slowdown on a loaded machine can miss.
tsan_run() {
  local rc=0
  echo "-- $*"
  "$@" >"$tsan_log" 2>&1 || rc=$?
  if [ $rc -ne 0 ] && [ $rc -ne 66 ]; then
    grep -E '^\[  FAILED  \]|Failure' "$tsan_log" | head -n 10 || true
    echo "   failed with $rc without a TSan report; retrying once"
    rc=0
    "$@" >"$tsan_log" 2>&1 || rc=$?
  fi
  if [ $rc -ne 0 ]; then
    tail -n 80 "$tsan_log"
    return 1
  fi
  grep -E '^\[  PASSED  \]' "$tsan_log" || true
}

# The engine threads under TSan on the real model: an abort mid-generation, n > 1 children,
# 8 requests with overlapped and with lock-step output processing, and async scheduling (the
# executor's worker thread running step N while the engine thread schedules N+1). Seeded sampling over 32
# prompts (32 solo runs) and the other model-heavy cases add model time, not concurrency.
tsan_e2e_filter='*StopStringsNAndLogprobs*:*BadRequestsAreRejectedAndAbortFreesBlocks*:*LockStepOutputProcessing*:*AsyncScheduling*'

stage_tsan() {
  tsan_log=$(mktemp)
  local b="${KVASIR_TSAN_BUILD_DIR:-$root/build-tsan}"
  configure "$b" -DKVASIR_TSAN=ON
  local tests=(common_test thread_pool_test sched_test executor_test engine_core_test http_server_test openai_server_test
    structured_test communicator_test step_broadcast_test cpu_attention_test)
  timed ninja -C "$b" -j"$jobs" "${tests[@]}" engine_e2e_test structured_e2e_test data_parallel_engine_test overlapped_steps_test \
    $([ "$full" = 1 ] && echo kvasir)
  export TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1:exitcode=66:suppressions=$supp/tsan.supp"
  local t
  for t in "${tests[@]}"; do timed tsan_run "$(find "$b/src" -name "$t" -type f | head -n 1)"; done
  # Two engine replicas behind one front (tiny model): routing reads each replica's prefix-cache
  # map while its engine thread writes it; a replica's fault reaches the other's queue.
  timed tsan_run "$b/tests/data_parallel_engine_test"
  # Overlapped steps: the executor's worker launches step N+1 and answers N while the engine
  # thread folds, schedules and flushes (tiny model on a CPU backend dressed as a feeding device).
  timed tsan_run "$b/tests/overlapped_steps_test"
  if [ "$full" = 1 ]; then
    timed tsan_run "$b/tests/engine_e2e_test"
    # The engine threads under load through the real server, and its shutdown paths.
    timed server_suite "$b/tools/kvasir" tests/server/test_concurrency.py tests/server/test_shutdown.py
    local reports
    reports=$(server_logs | xargs -r grep -l 'WARNING: ThreadSanitizer' || true)
    [ -z "$reports" ] || { echo "TSan reports in server logs: $reports" >&2; return 1; }
  else
    timed tsan_run "$b/tests/engine_e2e_test" --gtest_filter="$tsan_e2e_filter"
    # Grammar masks filled on the manager's thread while the step runs, sync and async.
    timed tsan_run "$b/tests/structured_e2e_test" --gtest_filter='*AsyncMasksWaitForTheFold*:*UnconstrainedRows*'
  fi
}

stage_fuzz() {
  asan_configure
  unset ASAN_OPTIONS UBSAN_OPTIONS LSAN_OPTIONS  # scripts/fuzz sets its own
  KVASIR_FUZZ_BUILD_DIR="$asan_dir" bash "$root/scripts/fuzz" --ci
}

[ $# -gt 0 ] || set -- asan tsan fuzz
for stage in "$@"; do
  case "$stage" in
    asan | tsan | fuzz) ;;
    *) echo "usage: scripts/sanitize.sh [asan|tsan|fuzz]..." >&2; exit 2 ;;
  esac
done
for stage in "$@"; do
  stage_mark=$(mktemp)
  start=$(date +%s)
  echo "== sanitizer stage $stage"
  "stage_$stage"
  echo "== sanitizer stage $stage passed in $(($(date +%s) - start)) s"
  rm -f "$stage_mark"
done
