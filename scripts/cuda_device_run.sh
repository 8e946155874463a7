#!/usr/bin/env bash
# The one script that runs on the GPU machine (device tool): takes the binaries carried in
# .carry/bin.txz (built here with scripts/cuda_device_run.sh --build; carry it and .carry/lib),
# else builds them there; then op
# tests (+ compute-sanitizer memcheck), the end-to-end check and the benchmarks; logs to $OUT and
# a summary table last. Stages: KVASIR_STAGES="tests memcheck e2e mla latency throughput peer"
# (default: all but peer; mla: DeepSeek-V2-Lite latency lines); stage matrix: issue 19's latency /
# offline / online benchmark matrix as JSON (KVASIR_BIN points it at another kvasir, e.g. a CPU build). KVASIR_TP_PROMPTS sets the throughput run's prompt count (1000).
# Side by side with llama.cpp (stages lcbuild gguf gguf_bench): lcbuild starts building llama.cpp's
# CUDA variant in the background from the carried .carry/llamacpp-src.tgz (scripts/llamacpp.sh
# pack; kept in /tmp/lc while the machine stays warm); gguf writes a random Llama-3.1-8B-shaped
# F16 GGUF to local disk (scripts/cuda_random_gguf.py, gguf wheel from .whl); gguf_bench runs
# llama-bench / llama-batched-bench and kvasir's benches on that file (stage lconly: llama.cpp only).
# KVASIR_GGUF_TYPE=q4_k_m makes both stages use llama.cpp's Q4_K_M mix instead (Q4_K + Q6_K blocks,
# which kvasir keeps in their blocks on the GPU: issue 15's GGUF k-quants side by side). Stage
# gguftests: the GGUF block-weight op tests (both GEMVs), their memcheck, and the default
# GGUF models against the CPU (cuda_e2e_test; skips unless models/ holds the two files).
# Backend knobs for A/B runs (environment): KVASIR_CUDA_PDL=0, KVASIR_CUDA_FUSE=0,
# KVASIR_CUDA_FUSE_NORM=1, KVASIR_CUDA_ATTN=2, KVASIR_CUDA_PROFILE=1 (per-op device time),
# KVASIR_GEMV_PREFETCH_MB, KVASIR_CUDA_V3_CTAS / _PART; stage ab runs the batch-1 latency once per
# KVASIR_AB entry ("name:VAR=v,..."); KVASIR_TP_ARGS adds flags to the throughput run; stage ncu
# records per-kernel times of decode steps (batch 1, batch 256) and a full ncu report of the all-heads
# decode kernel. Stage mp (issue 17): the multiprocess executor against the in-process path at TP=1,
# KVASIR_MP_ROUNDS interleaved rounds (3), batch 1 and 256 prompts, async and synchronous loops.
# Stage multihost (issue 17): a tensor-parallel group across hosts on CUDA: cuda_tensor_parallel_test's
# across-hosts cases (NCCL only, no custom all-reduce; TP=1 on one GPU, TP=2 with two) and, with
# two GPUs, two "nodes" on this host (--nnodes 2 on loopback, each node its own $KVASIR_HOST_ID and
# one GPU in $CUDA_VISIBLE_DEVICES, so each rank is local rank 0 on GPU 0 of its node). Needs
# cuda_tensor_parallel_test carried (--build with KVASIR_BUILD_EXTRA=cuda_tensor_parallel_test) or
# builds it there.
# KVASIR_CUDA_ATTN takes per_head_phased|per_head_online|all_heads|mma_bulk or the
# digits 1|2|3|5 used below (cuda_tuning.h).
# Stage moe: mixture-of-experts benchmarks on dummy bf16 weights (configs/qwen3-30b-a3b.json,
# configs/mixtral-8x7b.json), each batch-1 decode step beside its floor (scripts/decode_floor.py);
# KVASIR_MOE_TP_PROMPTS (300) sets its throughput run, KVASIR_MOE_AB ("name:VAR=v,...") adds
# batch-64 A/B runs (e.g. gemv64:KVASIR_MOE_GEMV_TOKENS=64).
# Stage specgpu (issue 16): the device verify tests, k = 4 forced verify steps against plain decode
# steps at batch 1 and 16 (KVASIR_SPEC_ROUNDS interleaved rounds, 3), ngram throughput at batch 1 and 16.
# Stage eagle3 (issue 16): CudaEagle3.* (the head against its CPU twin, the engine with a dummy
# head), then bench latency with the dummy EAGLE-3 head (configs/eagle3-llama-3.1-8b.json, k = 3)
# beside plain decode at batch 1 and 16: the head's ms per decode step beside the target's.
# Stage draftgraphs (issue 16): the draft passes as graphs. The head / draft-model GPU tests
# (CudaEagle3.*, CudaEagle.*, CudaSpecDecode.DraftModel*), then A/B by KVASIR_TEST_DRAFT_PASSES_UNPADDED
# (1: the proposers' passes unpadded, as before they were graph-replayable), KVASIR_DG_ROUNDS (2)
# interleaved rounds: the EAGLE-3 and EAGLE-1 heads' ms per decode step at full acceptance (bench
# latency, k = 3 forced verify steps, batch 1 and 16), and draft_model's (configs/llama-3.2-1b.json,
# k = 4) at batch 1, at plain and at forced verify steps.
# Stage specadapt (issue 16): the load-adaptive bar for eagle3 and draft_model (dummy head / 1B
# draft, the budget deciding) and ngram (random prompts) against plain at batch 1, 16 and 64
# (KVASIR_SA_ROUNDS rounds, 2; KVASIR_SA_BATCHES picks the batches; KVASIR_SA_TESTS=0 skips the tests).
# Stage eagle (EAGLE-1/2 heads): CudaEagle.* (the same two tests with the EAGLE-1 head), then bench
# latency with the dummy EAGLE-1 head (configs/eagle-llama-3-8b.json, k = 3) at batch 1 and 16.
# Stage fiprefill (issue 19): FlashInfer's SM90 prefill against our kernel: op tests on both paths,
# memcheck, 32k and 128k b1 prefill A/B by KVASIR_CUDA_PREFILL, interleaved (KVASIR_FI_PARTS picks).
# Stage fidecode (issue 19): FlashInfer's split-KV decode (KVASIR_CUDA_DECODE=flashinfer) against our
# kernels (=own): the decode op tests on both paths, memcheck, b1 and b8 decode at 8k/32k/128k
# contexts A/B interleaved, ms/step beside the floor (weights + KV) (KVASIR_FD_PARTS picks).
# Stage overlap (issue 19): overlapped steps (on by default; KVASIR_CUDA_OVERLAP_STEPS=0 off: each step launched with
# the previous step's sampled ids read on the device). Their op test and memcheck, the engine test
# (outputs equal the read-back loop), then offline throughput with the knob at 0 and 1 interleaved,
# KVASIR_OV_ROUNDS rounds (2) of KVASIR_OV_PROMPTS x 1000/1000 (500) and 1000 x 128/128: tok/s, GPU
# idle between steps and the runner's count of overlapped steps. KVASIR_OV_PARTS ["tests bench"].
# Stage fp8 (issue 15): the FP8 op / e2e tests and their memcheck, then --quantization fp8 beside
# bf16 on Llama-3.1-8B-shaped dummy weights: batch-1 decode in KVASIR_FP8_ROUNDS interleaved rounds
# (medians, the 2.25 ms bar and the 1.86 ms floor), batch 64, throughput KVASIR_FP8_TP_PROMPTS x 128/128.
# Stage w4a16 (issue 15): the W4A16 op / e2e tests and their memcheck, then GPTQ INT4 dummy weights
# (configs/llama-3.1-8b-gptq-int4.json) beside bf16: batch-1 and batch-64 decode in KVASIR_W4_ROUNDS
# interleaved rounds (medians; bars 1.4 ms and 0.6x bf16; the floor: int4 codes + f16 scales + bf16
# lm_head / 4.32 TB/s), then the GEMM's batches (KVASIR_W4_GEMM_BATCHES, "32 64 128 256") on its
# wgmma kernels (the default: cluster splits up to 64 tokens, stream-K from 65; cluster splits
# only; stream-K from 17 tokens, i.e. every GEMM) and mma.sync beside bf16; the op tests and
# memcheck run again with stream-K on every GEMM. KVASIR_W4_PARTS ["tests memcheck bench"] picks parts.
# Stage l2pf (issues 15, 19): the o projection's weights pulled into L2 during the RoPE and decode
# attention before it (KVASIR_CUDA_L2_PREFETCH_MB, off by default): the prefetch records in a
# profiled step, e2e and memcheck with it on, then batch-1 bf16 / FP8 / INT4 / Qwen3-30B-A3B at 0,
# 24 and 40 MB, and 24 MB for every decode-sized linear (KVASIR_CUDA_L2_PREFETCH_EVERY=1), in
# KVASIR_L2PF_ROUNDS interleaved rounds (2).
# Stage w4rows (issue 15): the W4A16 GEMV -> GEMM crossover (KVASIR_W4A16_GEMV_ROWS 16 vs 8): the
# W4A16 op / e2e tests with the GEMM from 9 tokens, then batches 1, 8, 9, 12, 16 interleaved.
# Stage w4ncu (issue 15): the W4A16 GEMM at batch 64 under ncu (per-kernel table by
# scripts/ncu_kernel_table.py beside bf16, then the full sections of a few wgmma launches).
# Stage kvfp8 (issue 15): the FP8 KV cache: attention op tests with FP8 caches under every kernel,
# the bf16 attention tests again, e2e, memcheck, then batch-1 decode at 32k with the cache in bf16
# and in e4m3 (bf16 and FP8 weights) beside their floors; the KV capacity lines.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

if [[ "${1:-}" == "--build" ]]; then
  # Here, on the build machine: a binary the GPU machine can run (sm_90a + PTX, static libstdc++).
  build=${KVASIR_BUILD_DIR:-$root/build-cuda}
  # FlashInfer's headers (the prefill path; cmake/flashinfer.cmake runs the same at configure):
  # without them the build still works, with our own prefill kernel only.
  bash "$root/scripts/fetch_flashinfer.sh" || echo "FlashInfer headers unavailable: FlashInfer prefill path OFF"
  cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DKVASIR_CUDA=ON \
        -DKVASIR_STATIC_RUNTIME=ON >/dev/null
  # KVASIR_BUILD_EXTRA: more test targets to carry (e.g. cuda_tensor_parallel_test for stage multihost).
  extra=${KVASIR_BUILD_EXTRA:-}
  ninja -C "$build" -j"${KVASIR_JOBS:-2}" kvasir cuda_ops_test cuda_e2e_test grammar_bench nccl_communicator_test $extra
  mkdir -p "$root/.carry/bin" "$root/.carry/lib"
  extra_paths=$(for t in $extra; do (cd "$build" && find . -name "$t" -type f -perm -u+x | head -1); done)
  for b in kvasir src/backend/cuda/cuda_ops_test src/backend/cuda/cuda_e2e_test src/structured/grammar_bench \
           src/dist/nccl_communicator_test $extra_paths; do
    cp "$build/tools/$b" "$root/.carry/bin/" 2>/dev/null || cp "$build/$b" "$root/.carry/bin/"
  done
  strip "$root/.carry/bin/"* 2>/dev/null || true
  # Compressed with xz over a dictionary larger than all of them: the binaries share their kernels
  # (fat sm_90a code), so the set packs to about one binary's worth (these five: 18.1 MB; kvasir,
  # cuda_ops_test and cuda_e2e_test alone were 45 MB with threaded xz -6). The device call carries
  # 64 MiB in all and the tracked tree is ~47 MB of it: carry .carry/bin.txz and .carry/lib.
  rm -f "$root/.carry/bin.tgz"
  tar cf - -C "$root/.carry" bin | xz -9e --lzma2=preset=9e,dict=192MiB -T1 >"$root/.carry/bin.txz" &&
    rm -rf "$root/.carry/bin"
  # Debian libraries the GPU machine's Ubuntu may lack.
  for l in libpcre2-8.so.0 libutf8proc.so.2; do
    cp -L "/usr/lib/x86_64-linux-gnu/$l" "$root/.carry/lib/" 2>/dev/null || true
  done
  [[ -f "$root/../shared/peers/hf_llama8b.py" ]] && cp "$root/../shared/peers/hf_llama8b.py" "$root/.carry/"
  # The structured stage: a real byte-level vocabulary over the dummy weights, vLLM's benchmark
  # schema and the JSON-Schema-Test-Suite copy for grammar_bench (shared test data, not committed).
  shared=${KVASIR_SHARED_TESTDATA:-$root/../shared/testdata}
  cp "$shared/tokenizer/ggml-vocab-gpt-2.gguf" "$root/.carry/vocab.gguf" 2>/dev/null || true
  cp "$shared/json_schema/realistic/vllm-structured_schema_1.json" "$root/.carry/structured_schema.json" 2>/dev/null || true
  rm -rf "$root/.carry/json_schema" && cp -r "$shared/json_schema" "$root/.carry/json_schema" 2>/dev/null || true
  [[ -f "$root/.carry/llamacpp-src.tgz" ]] || bash "$root/scripts/llamacpp.sh" pack "$root/.carry/llamacpp-src.tgz"
  # Stage gguf writes its file there with the PyPI `gguf` package (pure Python): carry .whl too.
  ls "$root"/.whl/gguf-*.whl >/dev/null 2>&1 ||
    python3 -m pip download -q --no-deps --only-binary=:all: -d "$root/.whl" gguf==0.19.0 || true
  du -sh "$root/.carry"
  exit 0
fi

OUT=${OUT:-$root/out}
mkdir -p "$OUT"
stages=${KVASIR_STAGES:-"tests memcheck e2e mla latency throughput"}
bin=$root/.carry/bin
export LD_LIBRARY_PATH="$root/.carry/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
export PATH="/usr/local/cuda/bin:/opt/torch/.venv/bin:$PATH"
summary=()
note() { summary+=("$1"); echo "== $1"; }
has() { [[ " $stages " == *" $1 "* ]]; }

[[ -f "$root/.carry/bin.txz" && ! -x "$bin/kvasir" ]] && tar xJf "$root/.carry/bin.txz" -C "$root/.carry"
[[ -f "$root/.carry/bin.tgz" && ! -x "$bin/kvasir" ]] && tar xzf "$root/.carry/bin.tgz" -C "$root/.carry"
nvidia-smi --query-gpu=name,memory.total,clocks.sm,clocks.mem,temperature.gpu --format=csv | tee "$OUT/gpu.txt"

if [[ ! -x "$bin/kvasir" && -z ${KVASIR_BIN:-} ]]; then
  echo "no carried binaries: building on the device"
  cmake -S "$root" -B /tmp/kb -G Ninja -DCMAKE_BUILD_TYPE=Release -DKVASIR_CUDA=ON >"$OUT/build.log" 2>&1 &&
    ninja -C /tmp/kb -j16 kvasir cuda_ops_test cuda_e2e_test nccl_communicator_test >>"$OUT/build.log" 2>&1 || { note "build FAILED"; tail -30 "$OUT/build.log"; }
  mkdir -p "$bin"
  cp /tmp/kb/tools/kvasir /tmp/kb/src/backend/cuda/cuda_ops_test /tmp/kb/src/backend/cuda/cuda_e2e_test \
     /tmp/kb/src/dist/nccl_communicator_test "$bin/" 2>/dev/null
fi

lc=/tmp/lc
if has lcbuild && [[ ! -x $lc/build-cuda/bin/llama-bench && ! -f $lc/started ]] && [[ -f .carry/llamacpp-src.tgz ]]; then
  mkdir -p $lc && tar xzf .carry/llamacpp-src.tgz -C $lc && cp scripts/llamacpp.sh $lc/ && touch $lc/started
  # Its own session, niced: it outlives this call while the machine stays warm (the next call
  # finds it running or done), and the GPU stages run meanwhile.
  setsid nohup bash -c "echo \$\$ >$lc/pid; KVASIR_LLAMACPP_DIR=$lc KVASIR_LLAMACPP_CUDA=1 JOBS=${KVASIR_LC_JOBS:-14} nice -n 19 \
    bash $lc/llamacpp.sh build >$lc/build.log 2>&1; echo rc=\$? >$lc/done" >/dev/null 2>&1 </dev/null &
  note "llama.cpp build started ($(cat .carry/llamacpp-src.tgz.SOURCE 2>/dev/null))"
fi
lc_wait() {  # up to $1 seconds for the background llama.cpp build
  [[ -f $lc/started ]] || return 0
  local t0=$SECONDS
  while [[ ! -f $lc/done && $((SECONDS - t0)) -lt ${1:-400} ]]; do sleep 5; done
  cp $lc/build.log "$OUT/llamacpp_build.log" 2>/dev/null
  note "llama.cpp build: $(cat $lc/done 2>/dev/null || echo 'still running') after waiting $((SECONDS - t0)) s; $(grep -cE '^\[[0-9]+/' $lc/build.log 2>/dev/null) steps logged"
}

if has tests; then
  # The NCCL communicator at world size 1 (more GPUs: every op across them). libnccl.so.2 is too
  # big to carry: the toolkit's, else the one in the torch venv.
  nccl_dir=$(dirname "$(find /usr/local/cuda/lib64 /opt/torch/.venv -name 'libnccl.so.2' 2>/dev/null | head -1)" 2>/dev/null)
  LD_LIBRARY_PATH="${nccl_dir:-.}:$LD_LIBRARY_PATH" timeout 120 "$bin/nccl_communicator_test" >"$OUT/nccl_test.log" 2>&1
  note "nccl communicator test: rc=$? $(grep -E '^\[  (PASSED|SKIPPED) ' "$OUT/nccl_test.log" | tr '\n' ' ')$(grep -c '^\[  FAILED  \]' "$OUT/nccl_test.log") failed"
  # 360 s: the decode-path tests (CudaDecodePaths.*, contexts up to 128k against the CPU) joined.
  timeout 360 "$bin/cuda_ops_test" >"$OUT/ops_test.log" 2>&1
  rc=$?
  grep -E "^\[  (PASSED|FAILED) |FAILED|Failure|rel|Expected" "$OUT/ops_test.log" | head -40
  note "op tests: rc=$rc $(grep -E '^\[  PASSED' "$OUT/ops_test.log" | head -1) $(grep -c '^\[  FAILED  \]' "$OUT/ops_test.log") failed"
  for v in ${KVASIR_TEST_ATTN:-1 3 5}; do  # each decode kernel forced for every batch size
    KVASIR_CUDA_ATTN=$v timeout 120 "$bin/cuda_ops_test" --gtest_filter='CudaAttention.*:CudaOps.Fused*:CudaOps.Decode*' \
      >"$OUT/ops_test_attn$v.log" 2>&1
    note "op tests, attention v$v forced: rc=$? $(grep -E '^\[  PASSED' "$OUT/ops_test_attn$v.log" | head -1) $(grep -c '^\[  FAILED  \]' "$OUT/ops_test_attn$v.log") failed"
  done
  # The single-token GEMV's split-K variants (KVASIR_GEMV_SPLIT, default 2) and the per-token RoPE
  # kernel (KVASIR_CUDA_ROPE_HEADS=0) on the linear and fused-decode tests.
  for v in ${KVASIR_TEST_GEMV:-KVASIR_GEMV_SPLIT=1 KVASIR_GEMV_SPLIT=4 KVASIR_CUDA_ROPE_HEADS=0}; do
    env "$v" timeout 120 "$bin/cuda_ops_test" --gtest_filter='CudaOps.Linear*:CudaOps.Fused*:CudaOps.Decode*' \
      >"$OUT/ops_test_${v//=/_}.log" 2>&1
    note "op tests, $v: rc=$? $(grep -E '^\[  PASSED' "$OUT/ops_test_${v//=/_}.log" | head -1) $(grep -c '^\[  FAILED  \]' "$OUT/ops_test_${v//=/_}.log") failed"
  done
  if command -v cuobjdump >/dev/null; then
    cuobjdump --dump-resource-usage "$bin/kvasir" 2>/dev/null | grep -A1 -E 'decode_(all_heads|mma_bulk)_kernel|gemv_kernelILi1ELb|gemv_gated_kernelILi1ELb|rope_write' \
      | grep -v '^--$' | paste - - | sed -E 's/.*(decode_all_heads_kernelILi[0-9]+ELi[0-9]+ELi[0-9]+E|decode_mma_bulk_kernelILi[0-9]+ELi[0-9]+E|gemv_kernelILi1ELb[01]ELi[0-9]+ELi[0-9]+E|gemv_gated_kernelILi1ELb[01]ELi[0-9]+ELi[0-9]+E|rope_write_kv[a-z_]*).*(REG:[0-9]+ STACK:[0-9]+ SHARED:[0-9]+ LOCAL:[0-9]+).*/\1 \2/' \
      >"$OUT/resources.txt"
    note "resources: $(grep -E 'decode_all_heads_kernelILi128ELi8ELi4E|decode_mma_bulk_kernelILi[36]ELi4E|gemv_kernelILi1ELb0|gemv_gated_kernelILi1ELb0' "$OUT/resources.txt" | tr '\n' ';')"
  fi
fi
if has memcheck; then
  if command -v compute-sanitizer >/dev/null; then
    KVASIR_CUDA_ATTN=3 timeout "${KVASIR_MEMCHECK_TIMEOUT:-120}" compute-sanitizer --tool memcheck --leak-check no \
      "$bin/cuda_ops_test" --gtest_filter='CudaOps.*:CudaAttention.Decode*:CudaAttention.Chunked*:CudaAttention.Prefill' \
      >"$OUT/memcheck.log" 2>&1
    rc=$?
    tail -5 "$OUT/memcheck.log"
    note "memcheck: rc=$rc $(grep -E 'ERROR SUMMARY' "$OUT/memcheck.log" | tail -1)"
    # The default kernels (all_heads below 8 decode sequences, mma_bulk from 8) and the fused-norm
    # GEMVs, then mma_bulk (5) forced for every batch.
    timeout 120 compute-sanitizer --tool memcheck --leak-check no "$bin/cuda_ops_test" \
      --gtest_filter='CudaAttention.Decode*:CudaOps.Decode*:CudaOps.Fused*' >"$OUT/memcheck_default.log" 2>&1
    note "memcheck, default kernels: rc=$? $(grep -E 'ERROR SUMMARY' "$OUT/memcheck_default.log" | tail -1)"
    KVASIR_CUDA_ATTN=5 timeout 120 compute-sanitizer --tool memcheck --leak-check no "$bin/cuda_ops_test" \
      --gtest_filter='CudaAttention.Decode*:CudaOps.Decode*' >"$OUT/memcheck_attn5.log" 2>&1
    note "memcheck, attention v5 forced: rc=$? $(grep -E 'ERROR SUMMARY' "$OUT/memcheck_attn5.log" | tail -1)"
    # The MoE kernels: both paths (the tests force each), graph replay, and the MoE-shaped models.
    timeout 240 compute-sanitizer --tool memcheck --leak-check no "$bin/cuda_ops_test" --gtest_filter='CudaMoe.*' \
      >"$OUT/memcheck_moe.log" 2>&1
    note "memcheck, MoE ops: rc=$? $(grep -E 'ERROR SUMMARY' "$OUT/memcheck_moe.log" | tail -1)"
    # The MLA ops (latent cache write, both per-head product paths, split-KV decode, prefill tiles).
    timeout 180 compute-sanitizer --tool memcheck --leak-check no "$bin/cuda_ops_test" --gtest_filter='CudaMla.*' \
      >"$OUT/memcheck_mla.log" 2>&1
    note "memcheck, MLA: rc=$? $(grep -E 'ERROR SUMMARY' "$OUT/memcheck_mla.log" | tail -1)"
    # GGUF block weights: decoders, embedding, GEMV (1..8 rows) and the sliced dequantize + GEMM path.
    timeout 240 compute-sanitizer --tool memcheck --leak-check no "$bin/cuda_ops_test" --gtest_filter='CudaGguf.*' \
      >"$OUT/memcheck_gguf.log" 2>&1
    note "memcheck, GGUF: rc=$? $(grep -E 'ERROR SUMMARY' "$OUT/memcheck_gguf.log" | tail -1)"
  else
    note "memcheck: compute-sanitizer not found"
  fi
fi
if has e2e; then
  timeout 180 "$bin/cuda_e2e_test" >"$OUT/e2e_test.log" 2>&1
  rc=$?
  grep -E "agreement|device steps|^\[  (PASSED|FAILED) |Failure" "$OUT/e2e_test.log" | head -20
  note "e2e: rc=$rc $(grep -E '^\[  PASSED' "$OUT/e2e_test.log" | head -1)"
  note "e2e, tiny DeepSeek (MLA) on CUDA: $(grep -E '^\[       (OK|FAILED) \] CudaMlaEndToEnd' "$OUT/e2e_test.log")"
  for l in $(grep -oE 'deepseek_[a-z0-9_]+(/model.gguf)?: (prefill top-1|decode greedy) agreement [0-9]+ / [0-9]+' "$OUT/e2e_test.log" \
             | sed -E 's/ agreement /:/; s/ \/ /\//; s/ /_/g'); do note "  $l"; done
fi
if has mla; then
  # DeepSeek-V2-Lite decode latency (dummy weights, MLA + MoE): skipped with the loader's reason
  # while its MoE layers have no CUDA path. Then the same model with every layer's MLP dense
  # (first_k_dense_replace = all layers): MLA attention at the real shapes, batch 1 and 64.
  ds=configs/deepseek-v2-lite.json
  timeout 150 "$bin/kvasir" bench latency --model $ds --load-format dummy --device cuda --input-len 128 \
    --output-len 128 --num-iters 3 --batch-size 1 >"$OUT/lat_dsv2lite_b1.log" 2>&1
  rc=$?
  if [[ $rc -ne 0 ]] && grep -qE 'not supported|no multi-head latent|has no MoE' "$OUT/lat_dsv2lite_b1.log"; then
    note "latency DeepSeek-V2-Lite b1: skipped ($(grep -oE '[^:]*(not supported|no multi-head latent|has no MoE)[^"]*' "$OUT/lat_dsv2lite_b1.log" | head -1 | cut -c1-160))"
  else
    note "latency DeepSeek-V2-Lite b1: rc=$rc $(grep -E '^decode' "$OUT/lat_dsv2lite_b1.log")"
  fi
  sed -E 's/"first_k_dense_replace": *[0-9]+/"first_k_dense_replace": 27/' $ds >/tmp/dsv2lite_dense.json
  for b in 1 64; do
    timeout 150 "$bin/kvasir" bench latency --model /tmp/dsv2lite_dense.json --load-format dummy --device cuda \
      --input-len 128 --output-len 128 --num-iters 3 --batch-size $b >"$OUT/lat_dsv2lite_dense_b$b.log" 2>&1
    note "latency DeepSeek-V2-Lite, dense MLPs (MLA check, not the model) b$b: rc=$? $(grep -E '^decode' "$OUT/lat_dsv2lite_dense_b$b.log")"
  done
  KVASIR_CUDA_PROFILE=1 timeout 150 "$bin/kvasir" bench latency --model /tmp/dsv2lite_dense.json --load-format dummy \
    --device cuda --input-len 1024 --output-len 16 --num-iters 1 --num-iters-warmup 0 --batch-size 64 \
    >"$OUT/lat_dsv2lite_dense_profile.log" 2>&1
  note "  profile b64 x 1024, dense MLPs: rc=$? $(grep -oE '(mla_attention|write_latent_kv|linear[^ =]*|gemv[^ =]*)=[0-9.]+\([0-9]+\)' "$OUT/lat_dsv2lite_dense_profile.log" | tr '\n' ' ')"
fi
model=${KVASIR_NCU_MODEL:-configs/llama-3.1-8b.json}
lat() {  # name, extra args
  local name=$1; shift
  timeout 150 "$bin/kvasir" bench latency --model $model --load-format dummy --device cuda --input-len 128 \
    --output-len 128 --num-iters 3 "$@" >"$OUT/lat_$name.log" 2>&1
  local rc=$?
  tail -4 "$OUT/lat_$name.log"
  note "latency $name: rc=$rc $(grep -E '^decode' "$OUT/lat_$name.log")"
}
if has latency; then
  # Default kernels (greedy tokens picked on the device), then A/B: the per-head decode attention
  # kernel (v1), and the host argmax over read-back logits (what the bench did before).
  lat b1 --batch-size 1
  if [[ -z "${KVASIR_LAT_B1_ONLY:-}" ]]; then
    lat b64 --batch-size 64
    KVASIR_CUDA_ATTN=1 lat b1_attn1 --batch-size 1
  fi
  [[ -n "${KVASIR_LAT_AB_ARGMAX:-}" ]] && KVASIR_BENCH_HOST_ARGMAX=1 lat b1_hostargmax --batch-size 1
fi
if has ab; then
  # Batch-1 A/B of backend knobs: KVASIR_AB="name:VAR=v,VAR2=w name2:..." (each a latency run).
  for spec in ${KVASIR_AB:-}; do
    ( [[ "${spec#*:}" != "$spec" && -n "${spec#*:}" ]] && export $(echo "${spec#*:}" | tr ',' ' '); lat "ab_${spec%%:*}" --batch-size 1 ) >/dev/null
    note "A/B ${spec}: $(grep -E '^decode' "$OUT/lat_ab_${spec%%:*}.log")"
  done
fi
if has attn_ab; then
  # Decode attention A/B at batch 256 x 1024-token contexts (per-op device time, eager steps):
  # KVASIR_ATTN_AB="name:VAR=v,... ..." (default: the default kernel, v5 with 3 stages, v5 with 6).
  for spec in ${KVASIR_ATTN_AB:-v3: v5:KVASIR_CUDA_ATTN=5 v5s6:KVASIR_CUDA_ATTN=5,KVASIR_CUDA_TMA_STAGES=6}; do
    n=${spec%%:*}
    ( [[ "${spec#*:}" != "$spec" && -n "${spec#*:}" ]] && export $(echo "${spec#*:}" | tr ',' ' ');
      KVASIR_CUDA_PROFILE=1 timeout 150 "$bin/kvasir" bench latency --model $model --load-format dummy --device cuda \
        --batch-size 256 --input-len 1024 --output-len 8 --num-iters 1 --num-iters-warmup 0 \
        --max-num-batched-tokens 65536 >"$OUT/attn_ab_$n.log" 2>&1 )
    t=$(grep -oE 'attention\(decode\)=[0-9.]+' "$OUT/attn_ab_$n.log" | cut -d= -f2)
    note "attn A/B $spec: $(grep -E '^decode' "$OUT/attn_ab_$n.log") attention(decode)=${t:-none} ms"
    # The fastest variant (its environment) for a later throughput stage with KVASIR_TP_BEST=1.
    if [[ -n $t ]] && { [[ -z ${best_t:-} ]] || awk "BEGIN{exit !($t < $best_t)}"; }; then best_t=$t; best_env=${spec#*:}; fi
  done
  [[ -n ${best_env:-} ]] && note "attn A/B best: $best_env ($best_t ms)"
fi
if has moe; then
  # Expected device time ~4 min: two loads of dummy weights filled on the device (Qwen3-30B-A3B
  # 61 GB, Mixtral-8x7B 93 GB: it fits with bench latency's small KV cache, and serving it leaves
  # ~30 GB of KV under --gpu-memory-utilization 0.9), 4 x 128 decode steps per latency run, and a
  # throughput run of KVASIR_MOE_TP_PROMPTS x 1000/1000 (300: about a minute).
  moe_lat() {  # name, config, batch, extra args
    local name=$1 cfg=$2 b=$3; shift 3
    env ${moe_env:-} timeout 240 "$bin/kvasir" bench latency --model "$cfg" --load-format dummy --device cuda --batch-size "$b" \
      --input-len 128 --output-len 128 --num-iters 3 "$@" >"$OUT/moe_lat_$name.log" 2>&1
    local rc=$? ms
    ms=$(grep -oE '\(([0-9.]+) ms per step\)' "$OUT/moe_lat_$name.log" | grep -oE '[0-9.]+' | head -1)
    if [[ $b == 1 ]]; then
      # Floor: weight bytes one step reads (active experts, attention, norms, router, embedding row,
      # LM head) / 4.32 TB/s, from the config (scripts/decode_floor.py says what it counts).
      read -r floor gb _ < <(python3 scripts/decode_floor.py "$cfg")
      note "moe $name b1: rc=$rc ${ms:-?} ms/step; floor $floor ms ($gb GB/token at 4.32 TB/s); ratio $(
        awk -v m="${ms:-0}" -v f="$floor" 'BEGIN{printf "%.2f", (f > 0 ? m / f : 0)}')x"
    else
      note "moe $name b$b: rc=$rc ${ms:-?} ms/step $(grep -E '^decode' "$OUT/moe_lat_$name.log")"
    fi
    note "  $(grep -E 'device steps' "$OUT/moe_lat_$name.log" | head -1)"
  }
  moe_lat qwen3-30b-a3b configs/qwen3-30b-a3b.json 1
  moe_lat qwen3-30b-a3b configs/qwen3-30b-a3b.json 64
  for spec in ${KVASIR_MOE_AB:-}; do
    moe_env=$(echo "${spec#*:}" | tr ',' ' ') moe_lat "qwen3-30b-a3b_${spec%%:*}" configs/qwen3-30b-a3b.json 64
  done
  moe_lat mixtral-8x7b configs/mixtral-8x7b.json 1
  n=${KVASIR_MOE_TP_PROMPTS:-300}
  if [[ $n -gt 0 ]]; then
    timeout 300 "$bin/kvasir" bench throughput --model configs/qwen3-30b-a3b.json --load-format dummy --device cuda \
      --num-prompts "$n" --input-len 1000 --output-len 1000 --gpu-memory-utilization 0.9 \
      >"$OUT/moe_throughput.log" 2>&1
    note "moe throughput qwen3-30b-a3b ($n x 1000/1000): rc=$? $(grep -E '^Throughput' "$OUT/moe_throughput.log")"
    note "  $(grep -E 'device steps' "$OUT/moe_throughput.log" | head -1)"
  fi
fi
if has gguftests; then
  timeout 300 "$bin/cuda_ops_test" --gtest_filter='CudaGguf.*' >"$OUT/gguf_ops.log" 2>&1
  rc=$?
  grep -E "^\[  (PASSED|FAILED) |Failure|rel|Expected|mismatch" "$OUT/gguf_ops.log" | head -30
  note "gguf op tests: rc=$rc $(grep -E '^\[  PASSED' "$OUT/gguf_ops.log" | head -1) $(grep -c '^\[  FAILED  \]' "$OUT/gguf_ops.log") failed"
  KVASIR_GGUF_GEMV=exact timeout 300 "$bin/cuda_ops_test" --gtest_filter='CudaGguf.Linear*' >"$OUT/gguf_ops_exact.log" 2>&1
  note "gguf op tests, KVASIR_GGUF_GEMV=exact: rc=$? $(grep -E '^\[  PASSED' "$OUT/gguf_ops_exact.log" | head -1) $(grep -c '^\[  FAILED  \]' "$OUT/gguf_ops_exact.log") failed"
  if command -v compute-sanitizer >/dev/null; then
    timeout 300 compute-sanitizer --tool memcheck --leak-check no "$bin/cuda_ops_test" --gtest_filter='CudaGguf.*' \
      >"$OUT/gguf_memcheck.log" 2>&1
    note "gguf memcheck: rc=$? $(grep -E 'ERROR SUMMARY' "$OUT/gguf_memcheck.log" | tail -1)"
  fi
  KVASIR_MODELS_DIR=${KVASIR_MODELS_DIR:-$root/models} timeout 300 "$bin/cuda_e2e_test" \
    --gtest_filter='CudaGgufEndToEnd.*' >"$OUT/gguf_e2e.log" 2>&1
  rc=$?
  grep -E "agreement|rel L2|^\[  (PASSED|FAILED|SKIPPED) |Failure" "$OUT/gguf_e2e.log" | head -12
  note "gguf e2e (default models): rc=$rc $(grep -E '^\[  (PASSED|SKIPPED)' "$OUT/gguf_e2e.log" | tr '\n' ' ')"
  for l in $(grep -oE 'models/[A-Za-z0-9_.-]+: greedy agreement [0-9]+ / [0-9]+' "$OUT/gguf_e2e.log" | tr ' ' '_'); do note "  $l"; done
fi
gguf_type=${KVASIR_GGUF_TYPE:-f16}
gguf=/tmp/llama8b-$gguf_type.gguf
if has gguf && [[ ! -f $gguf ]]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/gguf-*.whl \
    >"$OUT/gguf.log" 2>&1
  PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1 timeout 300 python3 scripts/cuda_random_gguf.py $gguf --type "$gguf_type" >>"$OUT/gguf.log" 2>&1
  note "gguf: rc=$? $(tail -1 "$OUT/gguf.log") $(du -h $gguf 2>/dev/null | cut -f1)"
fi
if has lcwait; then
  lc_wait "${KVASIR_LC_WAIT:-420}"
fi
if has throughput; then
  n=${KVASIR_TP_PROMPTS:-1000}
  [[ -n ${KVASIR_TP_BEST:-} && -n ${best_env:-} ]] && export $(echo "$best_env" | tr ',' ' ') && note "throughput with $best_env"
  timeout "${KVASIR_TP_TIMEOUT:-300}" "$bin/kvasir" bench throughput --model $model --load-format dummy --device cuda \
    --num-prompts "$n" --input-len 1000 --output-len 1000 --gpu-memory-utilization 0.9 ${KVASIR_TP_ARGS:-} \
    >"$OUT/throughput.log" 2>&1
  rc=$?
  tail -6 "$OUT/throughput.log"
  note "throughput ($n x 1000/1000${KVASIR_TP_ARGS:+, $KVASIR_TP_ARGS}): rc=$rc $(grep -E '^Throughput' "$OUT/throughput.log")"
  note "$(grep -E 'device steps' "$OUT/throughput.log" | head -1)"
fi
if has overlap; then
  ov_parts=${KVASIR_OV_PARTS:-"tests bench"}
  if [[ " $ov_parts " == *" tests "* ]]; then
    "$bin/cuda_ops_test" --gtest_filter='CudaSampling.*' >"$OUT/overlap_tests.log" 2>&1
    note "overlap op tests (CudaSampling.*): rc=$? $(grep -E '^\[  (PASSED|FAILED)' "$OUT/overlap_tests.log" | tr '\n' ' ')"
    KVASIR_CUDA_OVERLAP_STEPS=1 compute-sanitizer --tool memcheck "$bin/cuda_ops_test" \
      --gtest_filter='CudaSampling.AsyncSamples*' >"$OUT/overlap_memcheck.log" 2>&1
    note "overlap memcheck: rc=$? $(grep -E 'ERROR SUMMARY' "$OUT/overlap_memcheck.log" | tail -1)"
    "$bin/cuda_e2e_test" --gtest_filter='CudaEndToEnd.Engine*' >"$OUT/overlap_e2e.log" 2>&1
    note "overlap e2e (CudaEndToEnd.Engine*): rc=$? $(grep -E '^\[  (PASSED|FAILED)' "$OUT/overlap_e2e.log" | tr '\n' ' ')"
  fi
  if [[ " $ov_parts " == *" bench "* ]]; then
    for round in $(seq 1 "${KVASIR_OV_ROUNDS:-2}"); do
      for ov in 0 1; do
        for shape in "${KVASIR_OV_PROMPTS:-500}:1000" "1000:128"; do
          n=${shape%%:*} len=${shape##*:}
          log="$OUT/overlap_tp_${ov}_${len}_r$round.log"
          KVASIR_CUDA_OVERLAP_STEPS=$ov timeout 300 "$bin/kvasir" bench throughput --model $model --load-format dummy \
            --device cuda --num-prompts "$n" --input-len "$len" --output-len "$len" --gpu-memory-utilization 0.9 >"$log" 2>&1
          note "overlap=$ov r$round $n x $len/$len: rc=$? $(grep -E '^Throughput' "$log") | $(grep -E 'device steps' "$log" | head -1) | $(grep -oE 'overlapped steps: [0-9]+ of [0-9]+' "$log" | head -1)"
        done
      done
    done
  fi
fi
if has mp; then
  # Issue 17: the multiprocess executor at TP=1 (every model rank in a worker process, the front
  # holding only engine and scheduler) against the in-process path, interleaved rounds, medians.
  # Each run's output tok/s: batch 1 (one 128/256 request) and 256 prompts of 512/256, with the
  # default loop (async scheduling on a GPU) and with --no-async-scheduling.
  declare -A mpr=()
  for round in $(seq 1 "${KVASIR_MP_ROUNDS:-3}"); do
    for shape in b1 b256; do
      [[ $shape == b1 ]] && sargs="--num-prompts 1 --input-len 128 --output-len 256" ||
        sargs="--num-prompts 256 --input-len 512 --output-len 256"
      for loop in default sync; do
        [[ $loop == sync ]] && largs=--no-async-scheduling || largs=
        for ex in inproc mp; do
          [[ $ex == mp ]] && eargs="--distributed-executor-backend mp" || eargs=
          log="/tmp/mp_${shape}_${loop}_${ex}_$round.log"  # many runs: only failures reach $OUT
          timeout 180 "$bin/kvasir" bench throughput --model $model --load-format dummy --device cuda $sargs \
            $largs $eargs >"$log" 2>&1
          v=$(grep -oE 'Throughput: .* ([0-9.]+) output tokens/s' "$log" | grep -oE '[0-9.]+ output' | grep -oE '^[0-9.]+')
          mpr[${shape}_${loop}_$ex]+="${v:-FAIL} "
          [[ -z $v ]] && cp "$log" "$OUT/" && note "mp run failed: $(tail -2 "$log" | tr '\n' ' ')"
        done
      done
    done
  done
  med() { tr ' ' '\n' | grep -E '^[0-9.]+$' | sort -g | awk '{a[NR]=$1} END {if (NR) print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2); else print 0}'; }
  for k in b1_default b1_sync b256_default b256_sync; do
    i=$(echo "${mpr[${k}_inproc]}" | med); m=$(echo "${mpr[${k}_mp]}" | med)
    note "mp $k: in-process ${mpr[${k}_inproc]}| mp ${mpr[${k}_mp]}| mp/in-process $(awk -v a="$m" -v b="$i" 'BEGIN {if (b > 0) printf "%.3f", a / b; else print "n/a"}')"
  done
fi
if has multihost; then
  nccl_dir=$(dirname "$(find /usr/local/cuda/lib64 /opt/torch/.venv -name 'libnccl.so.2' 2>/dev/null | head -1)" 2>/dev/null)
  export LD_LIBRARY_PATH="${nccl_dir:-.}:$LD_LIBRARY_PATH"
  if [[ ! -x $bin/cuda_tensor_parallel_test ]]; then
    cmake -S "$root" -B /tmp/kb -G Ninja -DCMAKE_BUILD_TYPE=Release -DKVASIR_CUDA=ON >"$OUT/build_tp_test.log" 2>&1 &&
      ninja -C /tmp/kb -j16 cuda_tensor_parallel_test >>"$OUT/build_tp_test.log" 2>&1 &&
      cp /tmp/kb/src/backend/cuda/cuda_tensor_parallel_test "$bin/" || note "multihost: building cuda_tensor_parallel_test FAILED"
  fi
  # Bar: every across-hosts case passes (TP=2 skipped on one GPU), with "(NCCL)" in each rank's name.
  timeout 240 "$bin/cuda_tensor_parallel_test" --gtest_filter='*AcrossHosts*:*OneRankThroughTheDeviceCommunicator*' \
    >"$OUT/multihost_tp_test.log" 2>&1
  note "multihost: cuda_tensor_parallel_test across hosts: rc=$? $(grep -E '^\[  (PASSED|SKIPPED) ' "$OUT/multihost_tp_test.log" | tr '\n' ' ')$(grep -c '^\[  FAILED  \]' "$OUT/multihost_tp_test.log") failed; $(grep -m1 -oE 'rank 0 of 1: .*\(NCCL\)' "$OUT/multihost_tp_test.log" | head -c 120)"
  if [[ $(nvidia-smi -L | wc -l) -ge 2 ]]; then
    # Two nodes on loopback, one GPU each. Bar: both exit 0, rank 0's backend says NCCL (not the
    # custom all-reduce), and the run reports a throughput.
    port=$((29600 + RANDOM % 300))
    common="bench throughput --model $model --load-format dummy --device cuda --num-prompts 64 --input-len 128
            --output-len 64 --tensor-parallel-size 2 --nnodes 2 --master-addr 127.0.0.1 --master-port $port"
    KVASIR_HOST_ID=node-1 CUDA_VISIBLE_DEVICES=1 timeout 300 "$bin/kvasir" $common --node-rank 1 --headless \
      >"$OUT/multihost_node1.log" 2>&1 &
    node1=$!
    KVASIR_HOST_ID=node-0 CUDA_VISIBLE_DEVICES=0 timeout 300 "$bin/kvasir" $common --node-rank 0 \
      >"$OUT/multihost_node0.log" 2>&1
    rc0=$?
    wait $node1
    rc1=$?
    note "multihost: TP=2 over 2 simulated nodes: node 0 rc=$rc0, node 1 rc=$rc1; $(grep -m1 -oE 'tensor-parallel rank 0 of 2 \([^)]*\)' "$OUT/multihost_node0.log"); $(grep -oE 'Throughput: .*' "$OUT/multihost_node0.log" | head -1)"
  else
    note "multihost: one GPU: the two-node TP=2 run needs 2 (kind nvidia-h200-x2)"
  fi
fi
if has specgpu; then
  # Issue 16 on the device path: the verify tests, then what a k = 4 verify step costs against a
  # plain decode step (bench latency --num-speculative-tokens-forced 4: every step verifies 4 drafts
  # in the one-query-rows layout and commits them; bars 1.15x at batch 1, 1.3x at batch 16), plain
  # and forced interleaved, KVASIR_SPEC_ROUNDS rounds (3), medians; then ngram end to end
  # (bench throughput 128/256) against plain, below.
  timeout 240 "$bin/cuda_ops_test" --gtest_filter='CudaSampling.*' >"$OUT/spec_ops_test.log" 2>&1
  note "specgpu op tests (CudaSampling.*): rc=$? $(grep -E '^\[  PASSED' "$OUT/spec_ops_test.log" | head -1) $(grep -c '^\[  FAILED  \]' "$OUT/spec_ops_test.log") failed"
  timeout 240 "$bin/cuda_e2e_test" --gtest_filter='CudaSpecDecode.*:CudaEndToEnd.EngineRuns*' >"$OUT/spec_e2e_test.log" 2>&1
  note "specgpu e2e (CudaSpecDecode.*): rc=$? $(grep -E '^\[  PASSED' "$OUT/spec_e2e_test.log" | head -1) $(grep -c '^\[  FAILED  \]' "$OUT/spec_e2e_test.log") failed"
  note "  $(grep -hE '^(one request|one at a time|batched|one-query rows)' "$OUT/spec_e2e_test.log" | tr '\n' ';' | cut -c1-500)"
  declare -A sms=()
  for round in $(seq 1 "${KVASIR_SPEC_ROUNDS:-3}"); do
    for b in 1 16; do
      for k in 0 4; do
        log="$OUT/spec_lat_b${b}_k${k}_$round.log"
        timeout 150 "$bin/kvasir" bench latency --model $model --load-format dummy --device cuda --input-len 128 \
          --output-len 128 --num-iters 3 --batch-size $b --num-speculative-tokens-forced $k >"$log" 2>&1
        v=$(grep -oE '\(([0-9.]+) ms per step\)' "$log" | grep -oE '[0-9.]+')
        sms[b${b}_k$k]+="${v:-FAIL} "
        [[ -z $v ]] && note "spec latency b$b k$k failed: $(tail -2 "$log" | tr '\n' ' ')"
      done
    done
  done
  med() { tr ' ' '\n' | grep -E '^[0-9.]+$' | sort -g | awk '{a[NR]=$1} END {if (NR) print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2); else print 0}'; }
  for b in 1 16; do
    p=$(echo "${sms[b${b}_k0]}" | med); f=$(echo "${sms[b${b}_k4]}" | med)
    [[ $b == 1 ]] && bar=1.15 || bar=1.3
    note "spec verify k=4 batch $b: plain ms/step ${sms[b${b}_k0]}| forced ${sms[b${b}_k4]}| ratio $(awk -v a="$f" -v b="$p" 'BEGIN {if (b > 0) printf "%.3f", a / b; else print "n/a"}') (bar $bar)"
    note "  $(grep -hE '^forced verify|graph replays' "$OUT/spec_lat_b${b}_k4_1.log" | tr '\n' ' ' | cut -c1-400)"
  done
  # Modes: plain; ngram with every draft verified (1, 16); ngram with the draft budget deciding
  # (its step-cost curve learned from this GPU's steps) at 1, 16, 64 and 256: the load-adaptive
  # bar, at least 0.95x plain at every batch.
  ngram='{"method":"ngram","num_speculative_tokens":4,"prompt_lookup_max":3,"prompt_lookup_min":1}'
  for b in 1 16 64 256; do
    modes="plain budget"
    [[ $b -le 16 ]] && modes="plain ngram budget"
    for mode in $modes; do
      log="$OUT/spec_tp_b${b}_$mode.log"
      case $mode in
        ngram) KVASIR_TEST_SPEC_VERIFY_ALL_DRAFTS=1 timeout 200 "$bin/kvasir" bench throughput --model $model --load-format dummy \
          --device cuda --num-prompts $b --max-num-seqs $b --input-len 128 --output-len 256 --speculative-config "$ngram" >"$log" 2>&1 ;;
        budget) timeout 200 "$bin/kvasir" bench throughput --model $model --load-format dummy \
          --device cuda --num-prompts $b --max-num-seqs $b --input-len 128 --output-len 256 --speculative-config "$ngram" >"$log" 2>&1 ;;
        *) timeout 200 "$bin/kvasir" bench throughput --model $model --load-format dummy --device cuda --num-prompts $b \
          --max-num-seqs $b --input-len 128 --output-len 256 >"$log" 2>&1 ;;
      esac
      note "spec throughput b$b $mode: rc=$? $(grep -E '^Throughput' "$log") $(grep -oE 'mean acceptance length [0-9.]+' "$log") $(grep -oE '[0-9]+ draft tokens' "$log" | head -1)"
      note "  $(grep -hE 'device steps|speculative verify steps' "$log" | tr '\n' ' ' | cut -c1-400)"
    done
  done
fi

if has draftgraphs; then
  timeout 300 "$bin/cuda_e2e_test" --gtest_filter='CudaEagle3.*:CudaEagle.*:CudaSpecDecode.DraftModel*' >"$OUT/draftgraphs_test.log" 2>&1
  note "draftgraphs tests: rc=$? $(grep -E '^\[  PASSED' "$OUT/draftgraphs_test.log" | head -1) $(grep -c '^\[  FAILED  \]' "$OUT/draftgraphs_test.log") failed: $(grep '^\[  FAILED  \]' "$OUT/draftgraphs_test.log" | head -3 | tr '\n' ' ')"
  note "  $(grep -hE '^(eagle3?: [0-9]+ of|draft_model)' "$OUT/draftgraphs_test.log" | tr '\n' ';' | cut -c1-900)"
  e3='{"method":"eagle3","model":"configs/eagle3-llama-3.1-8b.json","num_speculative_tokens":3}'
  e1='{"method":"eagle","model":"configs/eagle-llama-3-8b.json","num_speculative_tokens":3}'
  dm='{"method":"draft_model","model":"configs/llama-3.2-1b.json","num_speculative_tokens":4}'
  for round in $(seq 1 "${KVASIR_DG_ROUNDS:-2}"); do
    # Heads at full acceptance: every step a k = 3 verify that commits all 4 positions, the head's
    # first pass then 4 tokens per sequence (f3: the same verify steps without a head).
    for b in 1 16; do
      for mode in plain f3 e3f e3fu e1f e1fu; do
        [[ $b == 16 && $mode == e1* ]] && continue
        log="$OUT/dg_lat_b${b}_${mode}_$round.log"
        cfg=(); unp=0
        case $mode in e3*) cfg=(--speculative-config "$e3") ;; e1*) cfg=(--speculative-config "$e1") ;; esac
        [[ $mode == *f* ]] && cfg+=(--num-speculative-tokens-forced 3)
        [[ $mode == *u ]] && unp=1
        KVASIR_TEST_DRAFT_PASSES_UNPADDED=$unp timeout 150 "$bin/kvasir" bench latency --model configs/llama-3.1-8b.json \
          --load-format dummy --device cuda --input-len 128 --output-len 128 --num-iters 3 --batch-size $b "${cfg[@]}" >"$log" 2>&1
        note "dg r$round b$b $mode: rc=$? $(grep -hE '^(decode:|eagle3? head:)' "$log" | tr '\n' ' ' | cut -c1-300)"
      done
    done
    # draft_model (configs/llama-3.2-1b.json drafting k = 4 for the 8B): its cost per decode step
    # beside the target's (bench latency), at plain decode steps (catch-up of 1 token) and at full
    # acceptance (k = 4 forced verify steps: catch-up of 5 tokens), padded and not.
    for mode in dm dmf dmfu; do
      log="$OUT/dg_lat_b1_${mode}_$round.log"
      cfg=(--speculative-config "$dm"); unp=0
      [[ $mode == *f* ]] && cfg+=(--num-speculative-tokens-forced 4)
      [[ $mode == *u ]] && unp=1
      KVASIR_TEST_DRAFT_PASSES_UNPADDED=$unp timeout 150 "$bin/kvasir" bench latency --model configs/llama-3.1-8b.json \
        --load-format dummy --device cuda --input-len 128 --output-len 128 --num-iters 3 --batch-size 1 "${cfg[@]}" >"$log" 2>&1
      note "dg r$round b1 $mode: rc=$? $(grep -hE '^(decode:|draft_model model:)' "$log" | tr '\n' ' ' | cut -c1-300) $(tail -1 "$log" | grep -i error)"
    done
    # End to end through the engine at the default --gpu-memory-utilization (the draft's cache
    # planned into the budget), the draft budget deciding.
    for mode in plain dm; do
      log="$OUT/dg_tp_b1_${mode}_$round.log"
      cfg=(); [[ $mode == dm ]] && cfg=(--speculative-config "$dm")
      timeout 200 "$bin/kvasir" bench throughput --model configs/llama-3.1-8b.json --load-format dummy --device cuda \
        --num-prompts 1 --max-num-seqs 1 --input-len 128 --output-len 256 "${cfg[@]}" >"$log" 2>&1
      note "dg r$round b1 tp $mode: rc=$? $(grep -E '^Throughput' "$log") $(grep -oE '[0-9]+ draft tokens' "$log" | head -1) $(grep -hoE 'device steps [0-9]+ \(graph replays [0-9]+' "$log" | head -1) $(grep -hE 'KV budget|KV cache size' "$log" | tr '\n' ' ' | cut -c1-250) $(tail -1 "$log" | grep -i error)"
    done
  done
fi

if has specadapt; then
  # Issue 16's load-adaptive bar for the model-running proposers: bench throughput with the draft
  # budget deciding (and num_drafts_to_propose withholding the passes it would drop) against plain
  # at batch 1, 16 and 64, KVASIR_SA_ROUNDS (2) interleaved rounds. Dummy weights: the heads' and
  # the draft's guesses are rejected, so this is the worst case, where drafting must stop.
  [[ ${KVASIR_SA_TESTS:-1} == 1 ]] && timeout 300 "$bin/cuda_e2e_test" --gtest_filter='CudaEagle3.*:CudaEagle.*:CudaSpecDecode.DraftModel*' >"$OUT/specadapt_test.log" 2>&1
  note "specadapt tests: rc=$? $(grep -E '^\[  PASSED' "$OUT/specadapt_test.log" | head -1) $(grep -c '^\[  FAILED  \]' "$OUT/specadapt_test.log") failed: $(grep '^\[  FAILED  \]' "$OUT/specadapt_test.log" | head -3 | tr '\n' ' ')"
  e3='{"method":"eagle3","model":"configs/eagle3-llama-3.1-8b.json","num_speculative_tokens":3}'
  dm='{"method":"draft_model","model":"configs/llama-3.2-1b.json","num_speculative_tokens":4}'
  for round in $(seq 1 "${KVASIR_SA_ROUNDS:-2}"); do
    for b in ${KVASIR_SA_BATCHES:-1 16 64}; do
      for mode in plain e3 dm ng; do
        log="$OUT/sa_b${b}_${mode}_$round.log"
        cfg=()
        case $mode in e3) cfg=(--speculative-config "$e3") ;; dm) cfg=(--speculative-config "$dm") ;;
          ng) cfg=(--speculative-config '{"method":"ngram","num_speculative_tokens":4,"prompt_lookup_max":3,"prompt_lookup_min":1}') ;; esac
        timeout 200 "$bin/kvasir" bench throughput --model configs/llama-3.1-8b.json --load-format dummy --device cuda \
          --num-prompts $b --max-num-seqs $b --input-len 128 --output-len 256 "${cfg[@]}" >"$log" 2>&1
        note "sa r$round b$b $mode: rc=$? $(grep -E '^Throughput' "$log") $(grep -oE '[0-9]+ draft tokens' "$log" | head -1) $(tail -1 "$log" | grep -i error)"
      done
    done
  done
fi

if has eagle3; then
  # Issue 16, EAGLE-3: the head against its CPU twin and through the engine (CudaEagle3.*), then
  # its cost: bench latency on Llama-3.1-8B-shaped dummy weights with the dummy EAGLE-3 head
  # (configs/eagle3-llama-3.1-8b.json, k = 3) beside plain decode, batch 1 and 16. The eagle3 line
  # splits each decode step into the target's step and the head's drafting (1 + (k - 1) passes).
  timeout 240 "$bin/cuda_e2e_test" --gtest_filter='CudaEagle3.*' >"$OUT/eagle3_test.log" 2>&1
  note "eagle3 tests (CudaEagle3.*): rc=$? $(grep -E '^\[  PASSED' "$OUT/eagle3_test.log" | head -1) $(grep -c '^\[  FAILED  \]' "$OUT/eagle3_test.log") failed"
  note "  $(grep -hE '^(draft pass|eagle3:|whole outputs)' "$OUT/eagle3_test.log" | tr '\n' ';' | cut -c1-500)"
  e3='{"method":"eagle3","model":"configs/eagle3-llama-3.1-8b.json","num_speculative_tokens":3}'
  for b in 1 16; do
    for mode in plain eagle3; do
      log="$OUT/eagle3_lat_b${b}_$mode.log"
      extra=(); [[ $mode == eagle3 ]] && extra=(--speculative-config "$e3")
      timeout 200 "$bin/kvasir" bench latency --model configs/llama-3.1-8b.json --load-format dummy --device cuda \
        --input-len 128 --output-len 128 --num-iters 3 --batch-size $b "${extra[@]}" >"$log" 2>&1
      note "eagle3 bench b$b $mode: rc=$? $(grep -hE '^(decode:|eagle3 head:)' "$log" | tr '\n' ' ' | cut -c1-400)"
    done
  done
fi

if has eagle; then
  # EAGLE-1/2: the head against its CPU twin and through the engine (CudaEagle.*), then its cost
  # beside the target's step with the dummy head of configs/eagle-llama-3-8b.json (k = 3).
  timeout 240 "$bin/cuda_e2e_test" --gtest_filter='CudaEagle.*' >"$OUT/eagle_test.log" 2>&1
  note "eagle tests (CudaEagle.*): rc=$? $(grep -E '^\[  PASSED' "$OUT/eagle_test.log" | head -1) $(grep -c '^\[  FAILED  \]' "$OUT/eagle_test.log") failed"
  note "  $(grep -hE '^(draft pass|eagle:|whole outputs)' "$OUT/eagle_test.log" | tr '\n' ';' | cut -c1-500)"
  e1='{"method":"eagle","model":"configs/eagle-llama-3-8b.json","num_speculative_tokens":3}'
  for b in 1 16; do
    log="$OUT/eagle_lat_b${b}.log"
    timeout 200 "$bin/kvasir" bench latency --model configs/llama-3.1-8b.json --load-format dummy --device cuda \
      --input-len 128 --output-len 128 --num-iters 3 --batch-size $b --speculative-config "$e1" >"$log" 2>&1
    note "eagle bench b$b: rc=$? $(grep -hE '^(decode:|eagle head:)' "$log" | tr '\n' ' ' | cut -c1-400)"
  done
fi
if has fiprefill; then
  # Issue 19: FlashInfer's SM90 paged prefill (KVASIR_CUDA_PREFILL=flashinfer, the default where
  # built) against our mma.sync kernel (=own). KVASIR_FI_PARTS ["tests memcheck bench long"]:
  # tests  the prefill op tests on both paths against the CPU (CudaPrefillPaths.*), the older
  #        CudaAttention.* cases and cuda_e2e_test under each knob;
  # memcheck  compute-sanitizer memcheck on CudaPrefillPaths.* (FlashInfer's kernel and the fallbacks);
  # bench  b1 32,000-token prefill (Llama-8B shape, dummy weights, default 2,048-token chunks),
  #        KVASIR_FI_ROUNDS [3] interleaved rounds of own then flashinfer, medians (bar 1.5 s);
  # long   the same at 130,944 tokens (128k less the output), KVASIR_FI_LONG_ROUNDS [1] rounds.
  fi_parts=${KVASIR_FI_PARTS:-"tests memcheck bench long"}
  fi_has() { [[ " $fi_parts " == *" $1 "* ]]; }
  if fi_has tests; then
    timeout 400 "$bin/cuda_ops_test" --gtest_filter='CudaPrefillPaths.*:CudaPrefillKnob*' >"$OUT/fi_tests.log" 2>&1
    rc=$?
    grep -E "FAILED|Failure|rel_l2|Expected|SKIPPED" "$OUT/fi_tests.log" | head -20
    note "fiprefill tests (CudaPrefillPaths.*, CudaPrefillKnob*): rc=$rc $(grep -E '^\[  (PASSED|SKIPPED) ' "$OUT/fi_tests.log" | tr '\n' ' ')$(grep -c '^\[  FAILED  \]' "$OUT/fi_tests.log") failed"
    for path in flashinfer own; do
      KVASIR_CUDA_PREFILL=$path timeout 300 "$bin/cuda_ops_test" --gtest_filter='CudaAttention.*:CudaOps.Decode*' \
        >"$OUT/fi_tests_attention_$path.log" 2>&1
      note "fiprefill CudaAttention.* with KVASIR_CUDA_PREFILL=$path: rc=$? $(grep -E '^\[  PASSED' "$OUT/fi_tests_attention_$path.log" | head -1) $(grep -c '^\[  FAILED  \]' "$OUT/fi_tests_attention_$path.log") failed"
    done
    # End to end (tiny real models: prefill logits and greedy decode against the CPU) on each path.
    for path in flashinfer own; do
      KVASIR_CUDA_PREFILL=$path timeout 240 "$bin/cuda_e2e_test" >"$OUT/fi_e2e_$path.log" 2>&1
      note "fiprefill e2e with KVASIR_CUDA_PREFILL=$path: rc=$? $(grep -E '^\[  PASSED' "$OUT/fi_e2e_$path.log" | head -1) $(grep -c '^\[  FAILED  \]' "$OUT/fi_e2e_$path.log") failed; $(grep -oE 'prefill attention calls: flashinfer [0-9]+, own [0-9]+' "$OUT/fi_e2e_$path.log" | head -1)"
    done
  fi
  if fi_has memcheck && command -v compute-sanitizer >/dev/null; then
    timeout 500 compute-sanitizer --tool memcheck --leak-check no "$bin/cuda_ops_test" \
      --gtest_filter='CudaPrefillPaths.*' >"$OUT/fi_memcheck.log" 2>&1
    rc=$?
    tail -5 "$OUT/fi_memcheck.log"
    note "fiprefill memcheck: rc=$rc $(grep -E 'ERROR SUMMARY' "$OUT/fi_memcheck.log" | tail -1) $(grep -c '^\[  FAILED  \]' "$OUT/fi_memcheck.log") failed"
  fi
  fi_lat() {  # name, path, input length, extra args: one latency run, its prefill seconds on stdout
    local name=$1 path=$2 len=$3; shift 3
    KVASIR_CUDA_PREFILL=$path timeout 300 "$bin/kvasir" bench latency --device cuda --load-format dummy --model "$model" \
      --batch-size 1 --input-len "$len" --output-len 1 --num-iters 1 --num-iters-warmup 1 "$@" >"$OUT/fi_lat_$name.log" 2>&1
    echo "$name rc=$? $(grep -E '^prefill:' "$OUT/fi_lat_$name.log") | $(grep -E '^prefill attention calls' "$OUT/fi_lat_$name.log")" >&2
    grep -E '^prefill:' "$OUT/fi_lat_$name.log" | awk '{print $2}'
  }
  fi_median() { sort -g | awk '{v[NR]=$1} END{if (NR == 0) print "none"; else print (NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2)}'; }
  fi_ab() {  # label, input length, rounds
    local label=$1 len=$2 rounds=$3 r own=() fis=() t
    for ((r = 1; r <= rounds; r++)); do
      t=$(fi_lat "${label}_own_r$r" own "$len"); own+=("${t:-}")
      t=$(fi_lat "${label}_flashinfer_r$r" flashinfer "$len"); fis+=("${t:-}")
    done
    local mo mf
    mo=$(printf '%s\n' "${own[@]}" | grep -E '^[0-9.]+$' | fi_median)
    mf=$(printf '%s\n' "${fis[@]}" | grep -E '^[0-9.]+$' | fi_median)
    note "fiprefill b1 prefill $len tokens: own ${own[*]} s (median $mo), flashinfer ${fis[*]} s (median $mf)$(awk -v o="$mo" -v f="$mf" 'BEGIN{if (o + 0 > 0 && f + 0 > 0) printf ", %.2fx", o / f}')"
    note "  flashinfer run: $(grep -E '^prefill attention calls' "$OUT/fi_lat_${label}_flashinfer_r1.log")"
  }
  fi_has bench && fi_ab 32k 32000 "${KVASIR_FI_ROUNDS:-3}"
  fi_has long && fi_ab 128k 130944 "${KVASIR_FI_LONG_ROUNDS:-1}"
fi
if has fidecode; then
  # Issue 19: FlashInfer's split-KV paged decode (KVASIR_CUDA_DECODE=flashinfer, the default where
  # built; pure decode steps of up to KVASIR_CUDA_DECODE_FI_MAX_SEQS [8] sequences) against our
  # kernels (=own). KVASIR_FD_PARTS ["tests memcheck bench"]:
  # tests     the decode op tests on both paths against the CPU (CudaDecodePaths.*, the knob), the
  #           older CudaAttention.* / CudaOps.Decode* cases under each knob, cuda_e2e_test under each;
  # memcheck  compute-sanitizer memcheck on CudaDecodePaths.* (FlashInfer's kernel, merge, fallbacks);
  # bench     Llama-8B-shape dummy weights, decode ms/step at KVASIR_FD_LENS ["128 8192 32000 130944"]
  #           contexts for KVASIR_FD_BATCHES ["1 8"] (b8 at 128k skipped: 137 GB of KV), own then
  #           flashinfer, KVASIR_FD_ROUNDS [1] interleaved rounds, each beside the floor: the
  #           weights (scripts/decode_floor.py) + the KV cache at the mean decode context, at 4.32 TB/s
  #           (bars at b1: 32k <= 5.1 ms against a 4.44 ms floor; 128 <= 3.85). The flashinfer runs
  #           use table bound KVASIR_FD_MIN_TOKENS [0], so the 128-token pair says whether FlashInfer
  #           should take short contexts too (the default bound, 1,024 table tokens, keeps them ours).
  fd_parts=${KVASIR_FD_PARTS:-"tests memcheck bench"}
  fd_has() { [[ " $fd_parts " == *" $1 "* ]]; }
  if fd_has tests; then
    timeout 500 "$bin/cuda_ops_test" --gtest_filter='CudaDecodePaths.*:CudaDecodeKnob*' >"$OUT/fd_tests.log" 2>&1
    rc=$?
    grep -E "FAILED|Failure|rel_l2|Expected|SKIPPED" "$OUT/fd_tests.log" | head -20
    note "fidecode tests (CudaDecodePaths.*, CudaDecodeKnob*): rc=$rc $(grep -E '^\[  (PASSED|SKIPPED) ' "$OUT/fd_tests.log" | tr '\n' ' ')$(grep -c '^\[  FAILED  \]' "$OUT/fd_tests.log") failed"
    for path in flashinfer own; do
      # Table bound 0: every pure decode case of up to 8 sequences goes to FlashInfer under its knob.
      KVASIR_CUDA_DECODE=$path KVASIR_CUDA_DECODE_FI_MIN_TOKENS=0 timeout 300 "$bin/cuda_ops_test" \
        --gtest_filter='CudaAttention.*:CudaOps.Decode*:CudaOps.Fused*' \
        >"$OUT/fd_tests_attention_$path.log" 2>&1
      note "fidecode CudaAttention.*/CudaOps.Decode*/Fused* with KVASIR_CUDA_DECODE=$path: rc=$? $(grep -E '^\[  PASSED' "$OUT/fd_tests_attention_$path.log" | head -1) $(grep -c '^\[  FAILED  \]' "$OUT/fd_tests_attention_$path.log") failed"
      KVASIR_CUDA_DECODE=$path KVASIR_CUDA_DECODE_FI_MIN_TOKENS=0 timeout 240 "$bin/cuda_e2e_test" >"$OUT/fd_e2e_$path.log" 2>&1
      note "fidecode e2e with KVASIR_CUDA_DECODE=$path: rc=$? $(grep -E '^\[  PASSED' "$OUT/fd_e2e_$path.log" | head -1) $(grep -c '^\[  FAILED  \]' "$OUT/fd_e2e_$path.log") failed; $(grep -oE 'decode attention calls: flashinfer [0-9]+, own [0-9]+' "$OUT/fd_e2e_$path.log" | head -1)"
    done
  fi
  if fd_has memcheck && command -v compute-sanitizer >/dev/null; then
    # The 128k cases take the CPU reference most of the time; memcheck runs the rest.
    timeout 500 compute-sanitizer --tool memcheck --leak-check no "$bin/cuda_ops_test" \
      --gtest_filter='CudaDecodePaths.*:-CudaDecodePaths.FlashInferContextLengthsUpTo128k' >"$OUT/fd_memcheck.log" 2>&1
    rc=$?
    tail -5 "$OUT/fd_memcheck.log"
    note "fidecode memcheck: rc=$rc $(grep -E 'ERROR SUMMARY' "$OUT/fd_memcheck.log" | tail -1) $(grep -c '^\[  FAILED  \]' "$OUT/fd_memcheck.log") failed"
  fi
  if fd_has bench; then
    fd_cfg=configs/llama-3.1-8b.json
    read -r fd_wfloor _ < <(python3 scripts/decode_floor.py "$fd_cfg")
    fd_kvtok=$(python3 -c 'import json, sys
c = json.load(open(sys.argv[1]))
kvh = c.get("num_key_value_heads", c["num_attention_heads"]); hd = c.get("head_dim") or c["hidden_size"] // c["num_attention_heads"]
print(c["num_hidden_layers"] * kvh * hd * 2 * 2)' "$fd_cfg")
    fd_out=${KVASIR_FD_OUT_LEN:-64}
    fd_lat() {  # name, path, batch, context: one latency run, its ms per step on stdout
      local name=$1 path=$2 b=$3 len=$4
      KVASIR_CUDA_DECODE=$path KVASIR_CUDA_DECODE_FI_MIN_TOKENS=${KVASIR_FD_MIN_TOKENS:-0} timeout 400 "$bin/kvasir" bench latency --device cuda --load-format dummy --model "$fd_cfg" \
        --batch-size "$b" --input-len "$len" --output-len "$fd_out" --num-iters 1 --num-iters-warmup 1 \
        --max-num-batched-tokens 16384 >"$OUT/fd_lat_$name.log" 2>&1
      echo "$name rc=$? $(grep -E '^decode:' "$OUT/fd_lat_$name.log") | $(grep -E '^decode attention calls' "$OUT/fd_lat_$name.log")" >&2
      grep -oE '\(([0-9.]+) ms per step\)' "$OUT/fd_lat_$name.log" | grep -oE '[0-9.]+' | head -1
    }
    for len in ${KVASIR_FD_LENS:-128 8192 32000 130944}; do
      for b in ${KVASIR_FD_BATCHES:-1 8}; do
        if (( b * (len + fd_out) > 300000 )); then note "fidecode b$b ctx $len: skipped (KV cache does not fit beside the weights)"; continue; fi
        own=() fis=()
        for ((r = 1; r <= ${KVASIR_FD_ROUNDS:-1}; r++)); do
          own+=("$(fd_lat "b${b}_${len}_own_r$r" own "$b" "$len")")
          fis+=("$(fd_lat "b${b}_${len}_flashinfer_r$r" flashinfer "$b" "$len")")
        done
        floor=$(awk -v w="$fd_wfloor" -v b="$b" -v l="$len" -v o="$fd_out" -v t="$fd_kvtok" \
          'BEGIN{printf "%.2f", w + b * (l + o / 2) * t / 4.32e12 * 1e3}')
        # KVASIR_FD_AB ("name:VAR=v,..." entries): more runs of our kernels under other knobs, e.g.
        # mma:KVASIR_CUDA_ATTN=mma_bulk or c4:KVASIR_CUDA_V3_CTAS=4, to compare our best with FlashInfer.
        extra=""
        for spec in ${KVASIR_FD_AB:-}; do
          # A subshell: the knobs stay in this run.
          t=$(export $(echo "${spec#*:}" | tr ',' ' '); fd_lat "b${b}_${len}_${spec%%:*}" own "$b" "$len")
          extra+=", own/${spec%%:*} $t"
        done
        note "fidecode b$b ctx $len (+$fd_out): own ${own[*]} ms/step, flashinfer ${fis[*]} ms/step$extra; floor $floor ms (weights $fd_wfloor + KV)"
        note "  flashinfer run: $(grep -E '^decode attention calls' "$OUT/fd_lat_b${b}_${len}_flashinfer_r1.log")"
      done
    done
  fi
fi
if has fp8; then
  # Issue 15, FP8 W8A8 (--quantization fp8: per-channel e4m3 weights, dynamic per-token inputs):
  # the FP8 op tests and e2e cases, memcheck on them, then Llama-3.1-8B-shaped dummy weights in FP8
  # beside bf16: batch-1 decode in KVASIR_FP8_ROUNDS interleaved rounds (3, medians; bar 2.25 ms,
  # floor 8.0 GB / 4.32 TB/s = 1.86 ms), batch 64, and throughput KVASIR_FP8_TP_PROMPTS x 128/128.
  # KVASIR_FP8_PARTS ["tests memcheck bench tp"] picks parts: all of them take more than one
  # 10-minute call (memcheck ~3 min, bench ~5 min).
  fp8_has() { [[ " ${KVASIR_FP8_PARTS:-tests memcheck bench tp} " == *" $1 "* ]]; }
  if fp8_has tests; then
    timeout 300 "$bin/cuda_ops_test" --gtest_filter='CudaFp8.*' >"$OUT/fp8_ops_test.log" 2>&1
    note "fp8 op tests: rc=$? $(grep -E '^\[  PASSED' "$OUT/fp8_ops_test.log" | head -1) $(grep -c '^\[  FAILED  \]' "$OUT/fp8_ops_test.log") failed"
    grep -E "Failure|bound|FAILED" "$OUT/fp8_ops_test.log" | head -10
    timeout 300 "$bin/cuda_e2e_test" --gtest_filter='CudaEndToEnd.Fp8*:CudaEndToEnd.EngineRunsFp8*' >"$OUT/fp8_e2e_test.log" 2>&1
    note "fp8 e2e: rc=$? $(grep -E '^\[  PASSED' "$OUT/fp8_e2e_test.log" | head -1) $(grep -c '^\[  FAILED  \]' "$OUT/fp8_e2e_test.log") failed; $(grep -oE 'greedy agreement [0-9]+ / [0-9]+' "$OUT/fp8_e2e_test.log" | tr '\n' ' ')"
  fi
  if fp8_has memcheck && command -v compute-sanitizer >/dev/null; then
    timeout 300 compute-sanitizer --tool memcheck --leak-check no "$bin/cuda_ops_test" --gtest_filter='CudaFp8.*' \
      >"$OUT/memcheck_fp8.log" 2>&1
    note "memcheck, fp8 ops: rc=$? $(grep -E 'ERROR SUMMARY' "$OUT/memcheck_fp8.log" | tail -1)"
  fi
  fp8_lat() {  # name, extra args: prints the decode ms per step
    local name=$1; shift
    timeout 200 "$bin/kvasir" bench latency --model configs/llama-3.1-8b.json --load-format dummy --device cuda \
      --input-len 128 --output-len 128 --num-iters 3 "$@" >"$OUT/fp8_lat_$name.log" 2>&1
    grep -oE '\(([0-9.]+) ms per step\)' "$OUT/fp8_lat_$name.log" | grep -oE '[0-9.]+' | head -1
  }
  fmed() { tr ' ' '\n' | grep -E '^[0-9.]+$' | sort -g | awk '{a[NR]=$1} END {if (NR) print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2); else print 0}'; }
  if fp8_has bench; then
    f8=""; b16=""
    for round in $(seq 1 "${KVASIR_FP8_ROUNDS:-3}"); do
      f8+="$(fp8_lat "fp8_b1_r$round" --batch-size 1 --quantization fp8) "
      b16+="$(fp8_lat "bf16_b1_r$round" --batch-size 1) "
    done
    mf=$(echo "$f8" | fmed); mb=$(echo "$b16" | fmed)
    note "fp8 latency b1 (ms/step): fp8 [$f8] median $mf (bar 2.25: $(awk -v a="$mf" 'BEGIN {print (a > 0 && a <= 2.25) ? "met" : "NOT met"}'); $(awk -v a="$mf" 'BEGIN {printf "%.2f", a / 1.86}')x the 1.86 floor) | bf16 [$b16] median $mb | fp8/bf16 $(awk -v a="$mf" -v b="$mb" 'BEGIN {if (b > 0) printf "%.3f", a / b; else print "n/a"}')"
    note "  fp8 run kept: $(grep -oE 'FP8 weights [0-9]+ \([0-9.]+ MiB\)' "$OUT/fp8_lat_fp8_b1_r1.log" | head -1) (Llama-3.1-8B: 224 linears)"
    [[ -z $mf || $mf == 0 ]] && tail -5 "$OUT/fp8_lat_fp8_b1_r1.log"
    f64=$(fp8_lat fp8_b64 --batch-size 64 --quantization fp8); b64=$(fp8_lat bf16_b64 --batch-size 64)
    note "fp8 latency b64 (ms/step): fp8 ${f64:-FAIL} | bf16 ${b64:-FAIL}"
  fi
  n=${KVASIR_FP8_TP_PROMPTS:-1000}
  fp8_has tp && for q in fp8 bf16; do
    [[ $q == fp8 ]] && qargs="--quantization fp8" || qargs=
    timeout 300 "$bin/kvasir" bench throughput --model configs/llama-3.1-8b.json --load-format dummy --device cuda \
      --num-prompts "$n" --input-len 128 --output-len 128 --gpu-memory-utilization 0.9 $qargs >"$OUT/fp8_tp_$q.log" 2>&1
    note "fp8 stage throughput $q ($n x 128/128): rc=$? $(grep -E '^Throughput' "$OUT/fp8_tp_$q.log")"
  done
fi
if has kvfp8; then
  # Issue 15, FP8 KV cache (--kv-cache-dtype fp8 / fp8_e5m2): the attention op tests with FP8
  # caches under every KVASIR_CUDA_ATTN kernel and the default plan, every bf16 attention test
  # again (the kernels are templated on the cache's element type), the e2e cases (GPU FP8 cache
  # against the CPU's, the engine, scales calculated from the first batch), memcheck; then batch-1 decode at KVASIR_KV_LENS contexts
  # ["32000"] (+64 tokens) with the cache in bf16 and in e4m3, for bf16 and FP8 weights,
  # KVASIR_KV_ROUNDS interleaved rounds (2); bar: FP8 cache at most 0.75x the bf16 cache's step;
  # each beside its floor (weights + KV at the mean context, 4.32 TB/s); batch 64 at 2k; the planned
  # capacity; tp: offline 1000 x 1000/1000 with FP8 weights, each cache. KVASIR_KV_PARTS
  # ["tests memcheck bench tp"] picks.
  kv_has() { [[ " ${KVASIR_KV_PARTS:-tests memcheck bench tp} " == *" $1 "* ]]; }
  if kv_has tests; then
    timeout 300 "$bin/cuda_ops_test" --gtest_filter='CudaAttention.*:CudaDecodePaths.*:CudaOps.DecodeSteps*:CudaOps.WriteKv*' >"$OUT/kvfp8_ops.log" 2>&1
    note "kvfp8 attention tests (default plan): rc=$? $(grep -E '^\[  PASSED' "$OUT/kvfp8_ops.log" | head -1) $(grep -c '^\[  FAILED  \]' "$OUT/kvfp8_ops.log") failed"
    grep -E "Failure|FAILED|Which is|rel_l2|codes" "$OUT/kvfp8_ops.log" | head -12
    for k in per_head_phased per_head_online all_heads mma_bulk; do
      KVASIR_CUDA_ATTN=$k timeout 200 "$bin/cuda_ops_test" --gtest_filter='CudaAttention.Fp8*' >"$OUT/kvfp8_ops_$k.log" 2>&1
      note "kvfp8 attention tests, KVASIR_CUDA_ATTN=$k: rc=$? $(grep -E '^\[  PASSED' "$OUT/kvfp8_ops_$k.log" | head -1) $(grep -c '^\[  FAILED  \]' "$OUT/kvfp8_ops_$k.log") failed"
      grep -E "Failure|Which is" "$OUT/kvfp8_ops_$k.log" | head -4
    done
    timeout 300 "$bin/cuda_e2e_test" --gtest_filter='CudaEndToEnd.*Fp8KvCache*:CudaEndToEnd.EngineRunsAnFp8KvCache*:CudaEndToEnd.*CalculatedFp8KvScales*:CudaEndToEnd.EngineCalculatesFp8KvScales*:CudaEndToEnd.LlamaShapedModelMatchesCpu' \
      >"$OUT/kvfp8_e2e.log" 2>&1
    note "kvfp8 e2e: rc=$? $(grep -E '^\[  PASSED' "$OUT/kvfp8_e2e.log" | head -1) $(grep -c '^\[  FAILED  \]' "$OUT/kvfp8_e2e.log") failed; $(grep -oE 'greedy agreement [0-9]+ / [0-9]+' "$OUT/kvfp8_e2e.log" | tr '\n' ' ')"
    grep -E "Failure|FAILED|^step" "$OUT/kvfp8_e2e.log" | head -12
  fi
  if kv_has memcheck && command -v compute-sanitizer >/dev/null; then
    timeout 240 compute-sanitizer --tool memcheck --leak-check no "$bin/cuda_ops_test" --gtest_filter='CudaAttention.Fp8CachePrefillAndMixed' \
      >"$OUT/memcheck_kvfp8.log" 2>&1
    note "memcheck, fp8 cache prefill/mixed: rc=$? $(grep -E 'ERROR SUMMARY' "$OUT/memcheck_kvfp8.log" | tail -1)"
  fi
  if kv_has bench; then
    kv_cfg=configs/llama-3.1-8b.json
    kv_tok=$(python3 -c 'import json, sys
c = json.load(open(sys.argv[1]))
kvh = c.get("num_key_value_heads", c["num_attention_heads"]); hd = c.get("head_dim") or c["hidden_size"] // c["num_attention_heads"]
print(c["num_hidden_layers"] * kvh * hd * 2 * 2)' "$kv_cfg")
    read -r kv_wfloor _ < <(python3 scripts/decode_floor.py "$kv_cfg")
    kv_lat() {  # name, context, extra args: one latency run, its ms per step on stdout
      local name=$1 len=$2; shift 2
      timeout 300 "$bin/kvasir" bench latency --device cuda --load-format dummy --model "$kv_cfg" --batch-size 1 \
        --input-len "$len" --output-len 64 --num-iters 1 --num-iters-warmup 1 --max-num-batched-tokens 16384 "$@" \
        >"$OUT/kvfp8_lat_$name.log" 2>&1
      grep -oE '\(([0-9.]+) ms per step\)' "$OUT/kvfp8_lat_$name.log" | grep -oE '[0-9.]+' | head -1
    }
    for len in ${KVASIR_KV_LENS:-32000}; do
      for w in bf16 fp8; do
        [[ $w == fp8 ]] && wargs="--quantization fp8" || wargs=""
        a=() f=()
        for ((r = 1; r <= ${KVASIR_KV_ROUNDS:-2}; r++)); do
          a+=("$(kv_lat "${w}w_${len}_auto_r$r" "$len" $wargs)")
          f+=("$(kv_lat "${w}w_${len}_fp8_r$r" "$len" $wargs --kv-cache-dtype fp8)")
        done
        ma=$(printf '%s\n' "${a[@]}" | sort -g | head -1); mf=$(printf '%s\n' "${f[@]}" | sort -g | head -1)
        wf=$kv_wfloor; [[ $w == fp8 ]] && wf=$(awk -v x="$kv_wfloor" 'BEGIN{printf "%.3f", x / 2}')
        fl_a=$(awk -v w="$wf" -v l="$len" -v t="$kv_tok" 'BEGIN{printf "%.2f", w + (l + 32) * t / 4.32e12 * 1e3}')
        fl_f=$(awk -v w="$wf" -v l="$len" -v t="$kv_tok" 'BEGIN{printf "%.2f", w + (l + 32) * t / 2 / 4.32e12 * 1e3}')
        note "kvfp8 b1 ctx $len, $w weights: bf16 cache ${a[*]} ms/step (floor $fl_a) | fp8 cache ${f[*]} (floor $fl_f) | best fp8/bf16 $(awk -v x="$mf" -v y="$ma" 'BEGIN{if (y > 0) printf "%.3f", x / y; else print "n/a"}') (bar 0.75)"
        # --calculate-kv-scales: the scales from the prompt's K and V (one read-back per layer in the
        # first step), then the same kernels: the same step time expected.
        note "kvfp8 b1 ctx $len, $w weights, fp8 cache with --calculate-kv-scales: $(kv_lat "${w}w_${len}_fp8calc" "$len" $wargs --kv-cache-dtype fp8 --calculate-kv-scales) ms/step"
      done
      # The FP8 cache's decode kernels side by side (FP8 weights): the default (mma_bulk), all_heads
      # (our own plan's CUDA-core kernel) and FlashInfer's e4m3 decode (opt-in).
      note "kvfp8 b1 ctx $len, fp8 cache by decode kernel: mma_bulk $(kv_lat "fp8k_mb_$len" "$len" --quantization fp8 --kv-cache-dtype fp8) | all_heads $(KVASIR_CUDA_DECODE=own KVASIR_CUDA_ATTN=all_heads kv_lat "fp8k_ah_$len" "$len" --quantization fp8 --kv-cache-dtype fp8) | FlashInfer $(KVASIR_CUDA_DECODE_FI_FP8=1 kv_lat "fp8k_fi_$len" "$len" --quantization fp8 --kv-cache-dtype fp8)"
      # The attention ops alone (eager, per-op device time: compare the two, not with the steps).
      # Prefill (own kernel for FP8, FlashInfer's for bf16) and decode attention both.
      for c in auto fp8; do
        KVASIR_CUDA_PROFILE=1 kv_lat "prof_${len}_$c" "$len" --quantization fp8 --kv-cache-dtype "$c" >/dev/null
        note "  profile ctx $len, $c cache: $(grep -oE '(attention\((decode|prefill)\)|write_kv|rope\+write_kv)=[0-9.]+\([0-9]+\)' "$OUT/kvfp8_lat_prof_${len}_$c.log" | tr '\n' ' ')"
      done
    done
    # Batch 64 at 2k contexts: past FlashInfer's decode (8 sequences), both caches run mma_bulk
    # (an FP8 cache's f16 path).
    kv_b64() {  # name, cache
      timeout 300 "$bin/kvasir" bench latency --device cuda --load-format dummy --model "$kv_cfg" --batch-size 64 \
        --input-len 2048 --output-len 64 --num-iters 1 --num-iters-warmup 1 --quantization fp8 --kv-cache-dtype "$2" \
        >"$OUT/kvfp8_b64_$1.log" 2>&1
      grep -oE '\(([0-9.]+) ms per step\)' "$OUT/kvfp8_b64_$1.log" | grep -oE '[0-9.]+' | head -1
    }
    note "kvfp8 b64 ctx 2048, fp8 weights: bf16 cache $(kv_b64 auto auto) ms/step | fp8 cache $(kv_b64 fp8 fp8) | fp8 cache, FlashInfer up to 64 sequences (KVASIR_CUDA_DECODE_FI_MAX_SEQS=64) $(KVASIR_CUDA_DECODE_FI_MAX_SEQS=64 kv_b64 fp8fi fp8) [$(grep -E '^decode attention calls' "$OUT/kvfp8_b64_fp8fi.log")]"
    # The KV capacity the engine plans at --gpu-memory-utilization 0.9 (vLLM's "KV cache size" line).
    for c in auto fp8; do
      timeout 200 "$bin/kvasir" bench throughput --model "$kv_cfg" --load-format dummy --device cuda --quantization fp8 \
        --num-prompts 8 --input-len 128 --output-len 8 --gpu-memory-utilization 0.9 --kv-cache-dtype "$c" >"$OUT/kvfp8_cap_$c.log" 2>&1
      note "  capacity, $c cache: rc=$? $(grep -oE 'KV cache size: [0-9]+ tokens[^)]*\)' "$OUT/kvfp8_cap_$c.log" | head -1)"
    done
  fi
  if kv_has tp; then  # offline KVASIR_KV_TP_PROMPTS (1000) x 1000/1000, FP8 weights, each cache
    for c in auto fp8; do
      timeout 400 "$bin/kvasir" bench throughput --model "$kv_cfg" --load-format dummy --device cuda --quantization fp8 \
        --num-prompts "${KVASIR_KV_TP_PROMPTS:-1000}" --input-len 1000 --output-len 1000 --gpu-memory-utilization 0.9 \
        --kv-cache-dtype "$c" >"$OUT/kvfp8_tp_$c.log" 2>&1
      note "kvfp8 throughput ${KVASIR_KV_TP_PROMPTS:-1000} x 1000/1000, fp8 weights, $c cache: rc=$? $(grep -E '^Throughput' "$OUT/kvfp8_tp_$c.log") | $(grep -oE 'KV cache size: [0-9]+ tokens' "$OUT/kvfp8_tp_$c.log" | head -1)"
    done
  fi
fi
if has l2pf; then
  KVASIR_CUDA_PROFILE=1 KVASIR_CUDA_L2_PREFETCH_MB=40 timeout 120 "$bin/kvasir" bench latency --load-format dummy --device cuda \
    --input-len 128 --output-len 8 --num-iters 1 --batch-size 1 --model configs/llama-3.1-8b.json >"$OUT/l2pf_profile.log" 2>&1
  note "l2pf records (profiled batch-1 bf16 step, 40 MB): $(grep -iE 'l2_prefetch' "$OUT/l2pf_profile.log" | head -1)"
  KVASIR_CUDA_L2_PREFETCH_MB=40 timeout 300 "$bin/cuda_e2e_test" --gtest_filter='CudaEndToEnd.*:*W4a16*' >"$OUT/l2pf_e2e.log" 2>&1
  note "l2pf e2e at 40 MB: rc=$? $(grep -E '^\[  PASSED' "$OUT/l2pf_e2e.log" | head -1) $(grep -c '^\[  FAILED  \]' "$OUT/l2pf_e2e.log") failed"
  KVASIR_CUDA_L2_PREFETCH_MB=24 KVASIR_CUDA_L2_PREFETCH_EVERY=1 timeout 300 "$bin/cuda_e2e_test" --gtest_filter='CudaEndToEnd.*:*W4a16*' >"$OUT/l2pf_e2e_every.log" 2>&1
  note "l2pf e2e, every linear at 24 MB: rc=$? $(grep -E '^\[  PASSED' "$OUT/l2pf_e2e_every.log" | head -1) $(grep -c '^\[  FAILED  \]' "$OUT/l2pf_e2e_every.log") failed"
  KVASIR_CUDA_L2_PREFETCH_MB=40 timeout 200 compute-sanitizer --tool memcheck "$bin/cuda_e2e_test" \
    --gtest_filter='CudaEndToEnd.LlamaShapedModelMatchesCpu:CudaEndToEnd.Fp8LlamaShapedModelFollowsCpuW8A8ThroughTheGemv' >"$OUT/l2pf_memcheck.log" 2>&1
  note "l2pf memcheck: rc=$? $(grep -E 'ERROR SUMMARY' "$OUT/l2pf_memcheck.log" | tail -1)"
  l2pf_lat() {  # model flags..., then env: decode ms per step at batch 1
    local name=$1 flags=$2; shift 2
    env "$@" timeout 120 "$bin/kvasir" bench latency $flags --load-format dummy --device cuda --input-len 128 \
      --output-len 64 --num-iters 2 --batch-size 1 >"$OUT/l2pf_$name.log" 2>&1
    grep -oE '\(([0-9.]+) ms per step\)' "$OUT/l2pf_$name.log" | grep -oE '[0-9.]+' | head -1
  }
  for round in $(seq 1 "${KVASIR_L2PF_ROUNDS:-2}"); do
    for m in "bf16:--model configs/llama-3.1-8b.json" "fp8:--model configs/llama-3.1-8b.json --quantization fp8" \
             "int4:--model configs/llama-3.1-8b-gptq-int4.json" "qwen3moe:--model configs/qwen3-30b-a3b.json"; do
      n=${m%%:*} f=${m#*:}
      note "l2pf r$round $n b1 (ms/step): off $(l2pf_lat "${n}_0_r$round" "$f") | 24 MB $(l2pf_lat "${n}_24_r$round" "$f" KVASIR_CUDA_L2_PREFETCH_MB=24) | 40 MB $(l2pf_lat "${n}_40_r$round" "$f" KVASIR_CUDA_L2_PREFETCH_MB=40) | every linear, 24 MB $(l2pf_lat "${n}_e24_r$round" "$f" KVASIR_CUDA_L2_PREFETCH_MB=24 KVASIR_CUDA_L2_PREFETCH_EVERY=1)"
    done
  done
fi
if has w4rows; then
  # Issue 15: where the W4A16 GEMV hands over to the GEMM (KVASIR_W4A16_GEMV_ROWS, default 16): the
  # W4A16 op and e2e tests with the GEMM from 9 tokens, then batches 1, 8 (controls: the GEMV
  # either way), 9, 12 and 16 at 16 and at 8 in KVASIR_W4R_ROUNDS interleaved rounds (2).
  KVASIR_W4A16_GEMV_ROWS=8 timeout 400 "$bin/cuda_ops_test" --gtest_filter='CudaW4a16.*' >"$OUT/w4rows_ops_test.log" 2>&1
  note "w4rows op tests, GEMM from 9 tokens: rc=$? $(grep -E '^\[  PASSED' "$OUT/w4rows_ops_test.log" | head -1) $(grep -c '^\[  FAILED  \]' "$OUT/w4rows_ops_test.log") failed"
  grep -E "Failure|bound|FAILED" "$OUT/w4rows_ops_test.log" | head -10
  KVASIR_W4A16_GEMV_ROWS=8 timeout 300 "$bin/cuda_e2e_test" --gtest_filter='*W4a16*' >"$OUT/w4rows_e2e_test.log" 2>&1
  note "w4rows e2e, GEMM from 9 tokens: rc=$? $(grep -E '^\[  PASSED' "$OUT/w4rows_e2e_test.log" | head -1) $(grep -c '^\[  FAILED  \]' "$OUT/w4rows_e2e_test.log") failed; $(grep -oE 'greedy agreement [0-9]+ / [0-9]+' "$OUT/w4rows_e2e_test.log" | tr '\n' ' ')"
  w4r_lat() {  # name, batch, env...: decode ms per step
    local name=$1 bs=$2; shift 2
    env "$@" timeout 120 "$bin/kvasir" bench latency --model configs/llama-3.1-8b-gptq-int4.json --load-format dummy \
      --device cuda --input-len 128 --output-len 64 --num-iters 2 --batch-size "$bs" >"$OUT/w4rows_$name.log" 2>&1
    grep -oE '\(([0-9.]+) ms per step\)' "$OUT/w4rows_$name.log" | grep -oE '[0-9.]+' | head -1
  }
  for round in $(seq 1 "${KVASIR_W4R_ROUNDS:-2}"); do
    for bs in 1 8 9 12 16; do
      note "w4rows r$round b$bs (ms/step): GEMV to 16 $(w4r_lat "16_b${bs}_r$round" "$bs") | GEMV to 8 $(w4r_lat "8_b${bs}_r$round" "$bs" KVASIR_W4A16_GEMV_ROWS=8)"
    done
  done
fi
if has w4a16; then
  w4_has() { [[ " ${KVASIR_W4_PARTS:-tests memcheck bench} " == *" $1 "* ]]; }
  if w4_has tests; then
    timeout 400 "$bin/cuda_ops_test" --gtest_filter='CudaW4a16.*' >"$OUT/w4a16_ops_test.log" 2>&1
    note "w4a16 op tests: rc=$? $(grep -E '^\[  PASSED' "$OUT/w4a16_ops_test.log" | head -1) $(grep -c '^\[  FAILED  \]' "$OUT/w4a16_ops_test.log") failed"
    grep -E "Failure|bound|FAILED" "$OUT/w4a16_ops_test.log" | head -10
    KVASIR_W4A16_WGMMA_STREAM=17 timeout 400 "$bin/cuda_ops_test" --gtest_filter='CudaW4a16.*' >"$OUT/w4a16_ops_test_stream.log" 2>&1
    note "w4a16 op tests, stream-K on every GEMM: rc=$? $(grep -E '^\[  PASSED' "$OUT/w4a16_ops_test_stream.log" | head -1) $(grep -c '^\[  FAILED  \]' "$OUT/w4a16_ops_test_stream.log") failed"
    timeout 300 "$bin/cuda_e2e_test" --gtest_filter='*W4a16*' >"$OUT/w4a16_e2e_test.log" 2>&1
    note "w4a16 e2e: rc=$? $(grep -E '^\[  PASSED' "$OUT/w4a16_e2e_test.log" | head -1) $(grep -c '^\[  FAILED  \]' "$OUT/w4a16_e2e_test.log") failed; $(grep -oE 'greedy agreement [0-9]+ / [0-9]+' "$OUT/w4a16_e2e_test.log" | tr '\n' ' ')"
    grep -E "Failure|FAILED" "$OUT/w4a16_e2e_test.log" | head -10
  fi
  if w4_has memcheck && command -v compute-sanitizer >/dev/null; then
    # The kernels on every path (GEMV, gated GEMV, GEMM split and not, act-order gather, dummies)
    # at shapes small enough for memcheck's pace.
    timeout 400 compute-sanitizer --tool memcheck --leak-check no "$bin/cuda_ops_test" \
      --gtest_filter='CudaW4a16.EveryFormat*:CudaW4a16.Merged*:CudaW4a16.GateUp*:CudaW4a16.Dummy*:CudaW4a16.EightBit*' \
      >"$OUT/memcheck_w4a16.log" 2>&1
    note "memcheck, w4a16 ops: rc=$? $(grep -E 'ERROR SUMMARY' "$OUT/memcheck_w4a16.log" | tail -1)"
    KVASIR_W4A16_WGMMA_STREAM=17 timeout 400 compute-sanitizer --tool memcheck --leak-check no "$bin/cuda_ops_test" \
      --gtest_filter='CudaW4a16.EveryFormat*:CudaW4a16.Merged*:CudaW4a16.Dummy*' >"$OUT/memcheck_w4a16_stream.log" 2>&1
    note "memcheck, w4a16 ops, stream-K on every GEMM: rc=$? $(grep -E 'ERROR SUMMARY' "$OUT/memcheck_w4a16_stream.log" | tail -1)"
  fi
  w4_lat() {  # name, config, extra args: prints the decode ms per step
    local name=$1 cfg=$2; shift 2
    timeout 200 "$bin/kvasir" bench latency --model "$cfg" --load-format dummy --device cuda \
      --input-len 128 --output-len 128 --num-iters 3 "$@" >"$OUT/w4_lat_$name.log" 2>&1
    grep -oE '\(([0-9.]+) ms per step\)' "$OUT/w4_lat_$name.log" | grep -oE '[0-9.]+' | head -1
  }
  w4med() { tr ' ' '\n' | grep -E '^[0-9.]+$' | sort -g | awk '{a[NR]=$1} END {if (NR) print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2); else print 0}'; }
  if w4_has bench; then
    int4_cfg=configs/llama-3.1-8b-gptq-int4.json
    # The floor: every linear's int4 codes + one f16 scale per 128 weights, the bf16 lm_head.
    floor=$(python3 -c "
import json; c = json.load(open('$int4_cfg')); h = c['hidden_size']; i = c['intermediate_size']
hd = c.get('head_dim') or h // c['num_attention_heads']; q = c['num_attention_heads'] * hd; kv = c['num_key_value_heads'] * hd
p = c['num_hidden_layers'] * (h * (q + 2 * kv) + q * h + 3 * h * i); g = c['quantization_config']['group_size']
b = p / 2 + p / g * 2 + c['vocab_size'] * h * 2; print('%.3f %.2f' % (b / 4.32e12 * 1e3, b / 1e9))")
    fl=${floor% *}
    i1=""; b1=""; i64=""; b64=""
    for round in $(seq 1 "${KVASIR_W4_ROUNDS:-3}"); do
      i1+="$(w4_lat "int4_b1_r$round" $int4_cfg --batch-size 1) "
      b1+="$(w4_lat "bf16_b1_r$round" configs/llama-3.1-8b.json --batch-size 1) "
      i64+="$(w4_lat "int4_b64_r$round" $int4_cfg --batch-size 64) "
      b64+="$(w4_lat "bf16_b64_r$round" configs/llama-3.1-8b.json --batch-size 64) "
    done
    mi=$(echo "$i1" | w4med); mb=$(echo "$b1" | w4med); mi64=$(echo "$i64" | w4med); mb64=$(echo "$b64" | w4med)
    note "w4a16 latency b1 (ms/step): int4 [$i1] median $mi (bar 1.40: $(awk -v a="$mi" 'BEGIN {print (a > 0 && a <= 1.40) ? "met" : "NOT met"}'); $(awk -v a="$mi" -v f="$fl" 'BEGIN {printf "%.2f", a / f}')x the floor ${fl} ms = ${floor#* } GB / 4.32 TB/s) | bf16 [$b1] median $mb"
    note "w4a16 latency b64 (ms/step): int4 [$i64] median $mi64 | bf16 [$b64] median $mb64 | int4/bf16 $(awk -v a="$mi64" -v b="$mb64" 'BEGIN {if (b > 0) printf "%.3f (bar 0.60: %s)", a / b, (a / b <= 0.60 ? "met" : "NOT met"); else print "n/a"}')"
    note "  int4 run kept: $(grep -oE 'W4A16 weights [0-9]+ \([0-9.]+ MiB\)' "$OUT/w4_lat_int4_b1_r1.log" | head -1) (Llama-3.1-8B: 224 linears)"
    [[ -z $mi || $mi == 0 ]] && tail -5 "$OUT/w4_lat_int4_b1_r1.log"
    # The GEMM's batches: wgmma at the default (KVASIR_W4A16_WGMMA_STREAM: cluster splits chosen
    # from the cluster capacities, logged once as "clusters resident at once", up to 64 tokens,
    # stream-K from 65), cluster splits only, stream-K on every GEMM, and mma.sync, beside bf16.
    for bs in ${KVASIR_W4_GEMM_BATCHES:-32 64 128 256}; do
      note "w4a16 GEMM b$bs (ms/step): wgmma $(w4_lat "int4_b${bs}_wgmma" $int4_cfg --batch-size "$bs") | cluster splits only $(KVASIR_W4A16_WGMMA_STREAM=0 w4_lat "int4_b${bs}_cluster" $int4_cfg --batch-size "$bs") | stream-K only $(KVASIR_W4A16_WGMMA_STREAM=17 w4_lat "int4_b${bs}_stream" $int4_cfg --batch-size "$bs") | mma.sync $(KVASIR_W4A16_GEMM_WGMMA=0 w4_lat "int4_b${bs}_mma" $int4_cfg --batch-size "$bs") | bf16 $(w4_lat "bf16_b${bs}_gemm" configs/llama-3.1-8b.json --batch-size "$bs")"
    done
    note "  $(grep -ohE 'clusters resident at once.*' "$OUT"/w4_lat_int4_b*_wgmma.log | head -1)"
    KVASIR_CUDA_PROFILE=1 w4_lat int4_b1_profile $int4_cfg --batch-size 1 >/dev/null
    grep -A30 '^profile' "$OUT/w4_lat_int4_b1_profile.log" | head -20
  fi
fi
if has matrix; then
  # Issue 19's benchmark matrix, each run's JSON kept as $OUT/matrix_*.json and all of them merged
  # into $OUT/matrix.json: batch-1/8/64 latency at prompt lengths 128..128k x output 128, offline
  # throughput (prompts x input x output), and `bench serve` against a dummy-weight server that
  # keeps a real vocabulary (.carry/vocab.gguf), at each concurrency: TTFT/TPOT/ITL/E2EL
  # percentiles and goodput. Knobs (defaults in brackets) shrink it, e.g. for a CPU dry run:
  # KVASIR_BIN (the carried kvasir), KVASIR_MATRIX_PARTS ["latency offline online"],
  # KVASIR_MATRIX_MODEL [$model], KVASIR_MATRIX_DEVICE [cuda], KVASIR_MATRIX_ENGINE_ARGS (added to
  # every engine), KVASIR_MATRIX_LENS ["128 1024 8192 32768 130944": 128k less the output, so
  # prompt + output stay within Llama-3.1's 131072 positions], KVASIR_MATRIX_OUT_LEN [128],
  # KVASIR_MATRIX_BATCHES ["1 8 64"], KVASIR_MATRIX_ITERS [2], KVASIR_MATRIX_KV_GB [100: KV cache
  # a latency run may take beside the weights; bigger runs are skipped and say so],
  # KVASIR_MATRIX_OFFLINE ["1000x1000x1000 1000x128x128"], KVASIR_MATRIX_CONC ["1 16 64 256"],
  # KVASIR_MATRIX_ONLINE_LENS ["1000 200"], KVASIR_MATRIX_ROUNDS [4: requests = max(16, rounds x
  # concurrency)], KVASIR_MATRIX_GOODPUT ["ttft:1000 tpot:14": the acceptance SLOs, 2x the
  # batch-64 decode step], KVASIR_MATRIX_TOKENIZER [.carry/vocab.gguf], KVASIR_MATRIX_SERVE_ARGS.
  # The whole matrix on an H200 takes longer than one 10-minute device call: run its parts in
  # separate calls, e.g. KVASIR_MATRIX_PARTS=latency, then "offline online".
  kv=${KVASIR_BIN:-$bin/kvasir}
  mx_skip() {  # name, reason: said in the summary and kept in matrix.json
    note "matrix $1: skipped ($2)"
    printf '{"skipped": "%s"}\n' "$2" >"$OUT/matrix_$1.json"
  }
  mx_model=${KVASIR_MATRIX_MODEL:-$model}
  mx_dev=${KVASIR_MATRIX_DEVICE:-cuda}
  mx_eng=(--load-format dummy --device "$mx_dev" ${KVASIR_MATRIX_ENGINE_ARGS:-})
  mx_parts=${KVASIR_MATRIX_PARTS:-"latency offline online"}
  mx_out=${KVASIR_MATRIX_OUT_LEN:-128}
  # KV bytes per token (bf16) and the model's positions, from its config.
  read -r mx_kv_per_tok mx_max_pos < <(python3 -c '
import json, sys
c = json.load(open(sys.argv[1]))
heads = c.get("num_key_value_heads", c["num_attention_heads"])
hd = c.get("head_dim") or c["hidden_size"] // c["num_attention_heads"]
print(c["num_hidden_layers"] * heads * hd * 2 * 2, c.get("max_position_embeddings", 1 << 30))' "$mx_model")
  mx_kv_limit=$(awk -v g="${KVASIR_MATRIX_KV_GB:-100}" 'BEGIN{printf "%.0f", g * 1e9}')
  if [[ " $mx_parts " == *" latency "* ]]; then
    for len in ${KVASIR_MATRIX_LENS:-128 1024 8192 32768 130944}; do
      for b in ${KVASIR_MATRIX_BATCHES:-1 8 64}; do
        name="lat_i${len}_o${mx_out}_b$b"
        need=$((b * (len + mx_out + 1) * mx_kv_per_tok))
        if (( len + mx_out > mx_max_pos )); then
          mx_skip "$name" "prompt + output $((len + mx_out)) > the model's $mx_max_pos positions"
          continue
        elif (( need > mx_kv_limit )); then
          mx_skip "$name" "KV cache $(awk -v b=$need 'BEGIN{printf "%.1f", b / 1e9}') GB > KVASIR_MATRIX_KV_GB ${KVASIR_MATRIX_KV_GB:-100}"
          continue
        fi
        # Prefill in chunks of up to KVASIR_MATRIX_CHUNK tokens (16384), never below the default 2048.
        mx_chunk=$(( len * b < ${KVASIR_MATRIX_CHUNK:-16384} ? len * b : ${KVASIR_MATRIX_CHUNK:-16384} ))
        (( mx_chunk < 2048 )) && mx_chunk=2048
        timeout "${KVASIR_MATRIX_LAT_TIMEOUT:-300}" "$kv" bench latency --model "$mx_model" "${mx_eng[@]}" \
          --input-len "$len" --output-len "$mx_out" --batch-size "$b" --num-iters "${KVASIR_MATRIX_ITERS:-2}" \
          --num-iters-warmup 1 --max-num-batched-tokens "$mx_chunk" \
          --output-json "$OUT/matrix_$name.json" >"$OUT/matrix_$name.log" 2>&1
        rc=$?
        if [[ $rc -ne 0 ]] && grep -qiE 'out of memory|cannot allocate|does not fit|not enough' "$OUT/matrix_$name.log"; then
          mx_skip "$name" "did not fit: $(grep -iE 'out of memory|cannot allocate|does not fit|not enough' "$OUT/matrix_$name.log" | head -1 | cut -c1-120 | tr -d '"\\')"
        else
          note "matrix $name: rc=$rc $(grep -E '^(prefill|decode)' "$OUT/matrix_$name.log" | tr '\n' ' ')"
        fi
      done
    done
  fi
  if [[ " $mx_parts " == *" offline "* ]]; then
    for spec in ${KVASIR_MATRIX_OFFLINE:-1000x1000x1000 1000x128x128}; do
      IFS=x read -r n in out <<<"$spec"
      name="tp_${n}x${in}x${out}"
      timeout "${KVASIR_MATRIX_TP_TIMEOUT:-400}" "$kv" bench throughput --model "$mx_model" "${mx_eng[@]}" \
        --num-prompts "$n" --input-len "$in" --output-len "$out" --output-json "$OUT/matrix_$name.json" \
        >"$OUT/matrix_$name.log" 2>&1
      note "matrix $name: rc=$? $(grep -E '^Throughput' "$OUT/matrix_$name.log") $(grep -E 'device steps' "$OUT/matrix_$name.log" | head -1)"
    done
  fi
  if [[ " $mx_parts " == *" online "* ]]; then
    tokz=${KVASIR_MATRIX_TOKENIZER:-$root/.carry/vocab.gguf}
    read -r on_in on_out <<<"${KVASIR_MATRIX_ONLINE_LENS:-1000 200}"
    port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
    "$kv" serve --model "$mx_model" "${mx_eng[@]}" --tokenizer "$tokz" --port "$port" --served-model-name matrix \
      --max-num-seqs 256 ${KVASIR_MATRIX_SERVE_ARGS:-} >"$OUT/matrix_serve.log" 2>&1 &
    srv=$!
    up=
    for _ in $(seq 1 "${KVASIR_MATRIX_SERVE_WAIT:-300}"); do
      python3 -c 'import sys, urllib.request; urllib.request.urlopen(sys.argv[1], timeout=2)' \
        "http://127.0.0.1:$port/health" 2>/dev/null && { up=1; break; }
      kill -0 $srv 2>/dev/null || break
      sleep 1
    done
    if [[ -z $up ]]; then
      note "matrix online: the server did not come up: $(tail -3 "$OUT/matrix_serve.log" | tr '\n' ' ')"
    else
      for c in ${KVASIR_MATRIX_CONC:-1 16 64 256}; do
        n=$(( c * ${KVASIR_MATRIX_ROUNDS:-4} > 16 ? c * ${KVASIR_MATRIX_ROUNDS:-4} : 16 ))
        name="serve_c$c"
        timeout "${KVASIR_MATRIX_SERVE_TIMEOUT:-300}" "$kv" bench serve --base-url "http://127.0.0.1:$port" \
          --model matrix --tokenizer "$tokz" --dataset-name random --random-input-len "$on_in" \
          --random-output-len "$on_out" --ignore-eos --num-prompts "$n" --max-concurrency "$c" \
          --percentile-metrics ttft,tpot,itl,e2el --metric-percentiles 50,90,99 \
          --goodput ${KVASIR_MATRIX_GOODPUT:-ttft:1000 tpot:14} --save-result --result-dir "$OUT" \
          --result-filename "matrix_$name.json" --label "$name" >"$OUT/matrix_$name.log" 2>&1
        rc=$?
        note "matrix $name ($n x $on_in/$on_out): rc=$rc $(python3 -c '
import json, sys
r = json.load(open(sys.argv[1]))
print("out %.0f tok/s, TTFT p50/p99 %.1f/%.1f ms, TPOT p50/p99 %.2f/%.2f ms, ITL p99 %.2f ms, goodput %.2f req/s, %d failed"
      % (r["output_throughput"], r["p50_ttft_ms"], r["p99_ttft_ms"], r["p50_tpot_ms"], r["p99_tpot_ms"],
         r["p99_itl_ms"], r["request_goodput"] or 0, r["failed"]))' "$OUT/matrix_$name.json" 2>&1 | tail -1)"
      done
    fi
    kill $srv 2>/dev/null
    wait $srv 2>/dev/null
    note "matrix server: $(grep -hE 'device steps|engine loop' "$OUT/matrix_serve.log" | tail -2 | tr '\n' ';')"
  fi
  python3 -c '
import glob, json, os, sys
runs = {}
for p in sorted(glob.glob(os.path.join(sys.argv[1], "matrix_*.json"))):
    try:
        runs[os.path.basename(p)[len("matrix_"):-len(".json")]] = json.load(open(p))
    except ValueError as e:
        runs[os.path.basename(p)] = {"error": str(e)}
json.dump(runs, open(os.path.join(sys.argv[1], "matrix.json"), "w"), indent=1)
print(len(runs))' "$OUT" >"$OUT/matrix_merge.log" 2>&1
  note "matrix: $(cat "$OUT/matrix_merge.log") results in matrix.json"
fi
if has profile; then
  # Per-op device time (every step eager, events around each op) at long-context batch 256
  # (prefill in chunks, then decode) as the throughput run sees it; default decode attention,
  # then v1 (KVASIR_CUDA_ATTN=1) for the A/B.
  for v in 0 1; do
    KVASIR_CUDA_ATTN=$v KVASIR_CUDA_PROFILE=1 timeout 150 "$bin/kvasir" bench latency --model $model --load-format dummy \
      --device cuda --batch-size 256 --input-len 1024 --output-len 8 --num-iters 1 --num-iters-warmup 0 \
      --max-num-batched-tokens 8192 >"$OUT/lat_b256_profile_attn$v.log" 2>&1
    note "b256 x 1024 profile attn$v: rc=$? $(grep -E '^(prefill|decode)' "$OUT/lat_b256_profile_attn$v.log" | tr '\n' ' ')"
    note "  $(grep -oE 'attention\((decode|prefill)\)=[0-9.]+\([0-9]+\)|gemv[^ ]*=[0-9.]+\([0-9]+\)|linear[^ ]*=[0-9.]+\([0-9]+\)' "$OUT/lat_b256_profile_attn$v.log" | tr '\n' ' ')"
  done
fi
ncu_bin=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu 2>/dev/null | head -1)
if has ncu && [[ -n $ncu_bin ]]; then
  # Per-kernel device time and DRAM bytes of whole decode steps (ncu runs kernels one at a time, so
  # PDL overlap is gone: the sum over a step is the kernels' own time), at batch 1 and batch 256
  # x 1024 context, then the full section set on one all-heads decode launch and its combine.
  nm="gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum,launch__grid_size,launch__registers_per_thread"
  timeout 200 $ncu_bin --clock-control none --cache-control none --metrics $nm --csv --page raw \
    --launch-skip ${KVASIR_NCU_B1_SKIP:-1600} --launch-count ${KVASIR_NCU_B1_COUNT:-700} "$bin/kvasir" bench latency --model $model \
    --load-format dummy --device cuda --batch-size 1 --input-len 128 --output-len 16 --num-iters 1 \
    --num-iters-warmup 0 >"$OUT/ncu_b1.csv" 2>"$OUT/ncu_b1.err"
  note "ncu b1: rc=$? $(grep -c '^\"' "$OUT/ncu_b1.csv") rows"
  [[ -n ${KVASIR_NCU_B1_ONLY:-} ]] || timeout 240 $ncu_bin --clock-control none --cache-control none --metrics $nm --csv --page raw \
    --launch-skip ${KVASIR_NCU_B256_SKIP:-2600} --launch-count 700 "$bin/kvasir" bench latency --model $model \
    --load-format dummy --device cuda --batch-size 256 --input-len 1024 --output-len 8 --num-iters 1 \
    --num-iters-warmup 0 --max-num-batched-tokens 65536 >"$OUT/ncu_b256.csv" 2>"$OUT/ncu_b256.err"
  note "ncu b256: rc=$? $(grep -c '^\"' "$OUT/ncu_b256.csv") rows"
  [[ -n ${KVASIR_NCU_B1_ONLY:-} ]] || timeout 240 $ncu_bin --clock-control none --set full -k regex:'decode_(all_heads|mma_bulk)_kernel|decode_combine' --launch-skip 64 \
    --launch-count 2 "$bin/kvasir" bench latency --model $model --load-format dummy --device cuda --batch-size 256 \
    --input-len 1024 --output-len 4 --num-iters 1 --num-iters-warmup 0 --max-num-batched-tokens 65536 \
    >"$OUT/ncu_v3.txt" 2>&1
  note "ncu v3 full: rc=$? $(grep -E 'Duration|DRAM Throughput' "$OUT/ncu_v3.txt" | tr -s ' ' | head -4 | tr '\n' ';')"
fi
if has w4ncu && [[ -n $ncu_bin ]]; then
  # Issue 15, the W4A16 GEMM at batch 64 under ncu: per-kernel time and DRAM bytes of decode steps
  # with GPTQ INT4 and with bf16 weights (Llama-3.1-8B shape, dummy weights; ncu runs kernels one
  # at a time), then the full section set (stall reasons, throughputs) on a few wgmma GEMM launches.
  w4_args="--load-format dummy --device cuda --batch-size 64 --input-len 128 --output-len 8 --num-iters 1 --num-iters-warmup 0 --max-num-batched-tokens 8192"
  nm="gpu__time_duration.sum,dram__bytes_read.sum,launch__grid_size,launch__cluster_dim_z,launch__registers_per_thread"
  for w in int4 bf16; do
    [[ $w == int4 ]] && cfg=configs/llama-3.1-8b-gptq-int4.json || cfg=configs/llama-3.1-8b.json
    timeout 150 $ncu_bin --clock-control none --cache-control none --metrics $nm --csv --page raw --launch-skip 1500 \
      --launch-count 700 "$bin/kvasir" bench latency --model $cfg $w4_args >"$OUT/w4ncu_$w.csv" 2>"$OUT/w4ncu_$w.err"
    note "w4ncu $w: rc=$?"
  done
  python3 scripts/ncu_kernel_table.py "$OUT/w4ncu_int4.csv" "$OUT/w4ncu_bf16.csv" | tee "$OUT/w4ncu_table.txt"
  timeout 200 $ncu_bin --clock-control none --set full -k regex:w4a16_wgmma --launch-skip 300 --launch-count 4 \
    "$bin/kvasir" bench latency --model configs/llama-3.1-8b-gptq-int4.json $w4_args >"$OUT/w4ncu_full.txt" 2>&1
  note "w4ncu full: rc=$? $(grep -E 'Duration|DRAM Throughput|Compute \(SM\) Throughput|Issue Slots Busy|No Eligible' "$OUT/w4ncu_full.txt" | tr -s ' ' | head -5 | tr '\n' ';')"
fi
if has structured; then
  # Structured outputs on the device: 64 concurrent requests under a long JSON schema
  # (scripts/bench_structured.sh) against the same load unconstrained, interleaved rounds, one server (dummy
  # Llama-3.1-8B weights with GPT-2's real byte-level vocabulary, carried as .carry/vocab.gguf, so
  # the grammar and its masks are real). Then the grammar library's own timings on this host.
  KVASIR_BIN="$bin/kvasir" SO_TOKENIZER="$root/.carry/vocab.gguf" \
    timeout 560 bash scripts/bench_structured.sh "$OUT/structured" --model $model --load-format dummy --device cuda \
    --tokenizer "$root/.carry/vocab.gguf" --max-num-seqs 256 --gpu-memory-utilization 0.9 ${KVASIR_SO_ARGS:-} \
    >"$OUT/structured.log" 2>&1
  note "structured${KVASIR_SO_ARGS:+ ($KVASIR_SO_ARGS)}: rc=$? $(tail -8 "$OUT/structured.log" | tr '\n' ';')"
  note "  $(grep -hE 'grammar masks|device steps|engine loop|runner, host' "$OUT/structured/serve.log" | tr '\n' ';')"
  if [[ -x "$bin/grammar_bench" ]]; then
    timeout 120 "$bin/grammar_bench" "$root/.carry/vocab.gguf" "$root/.carry/json_schema" >"$OUT/grammar_bench.log" 2>&1
    note "grammar bench (host CPU of the GPU machine): rc=$? $(tail -6 "$OUT/grammar_bench.log" | tr '\n' ' ')"
  fi
fi
if has peer && [[ -f .carry/hf_llama8b.py ]]; then
  # A background llama.cpp build is paused meanwhile: the peer's eager runs are host-bound.
  lc_running=; [[ -f $lc/pid && ! -f $lc/done ]] && lc_running=$(cat $lc/pid)
  [[ -n $lc_running ]] && kill -STOP -- -"$lc_running" 2>/dev/null
  PYTHONUNBUFFERED=1 timeout 240 python3 .carry/hf_llama8b.py >"$OUT/peer.log" 2>&1
  [[ -n $lc_running ]] && kill -CONT -- -"$lc_running" 2>/dev/null
  tail -8 "$OUT/peer.log"
  note "peer (HF transformers): $(tail -3 "$OUT/peer.log" | tr '\n' ' ')"
fi
if has gguf_bench && [[ -f $gguf ]]; then
  # After the llama.cpp build (so neither engine shares the CPUs with it): kvasir on the GGUF (F16
  # weights become bf16 on the device; Q4_K/Q6_K stay in their blocks), then llama.cpp on the same file.
  lc_wait "${KVASIR_LC_WAIT:-420}"
  if ! has lconly; then
    # Batch 1 with a 512-token prompt: its prefill is llama-bench's pp512, its 128 decode steps
    # (at 512-640 tokens of context) stand beside tg128; batch 64 x 128/128 beside batched-bench.
    timeout 150 "$bin/kvasir" bench latency --model $gguf --device cuda --batch-size 1 --input-len 512 \
      --output-len 128 --num-iters 3 >"$OUT/gguf_lat_b1.log" 2>&1
    note "kvasir gguf b1 512/128: rc=$? $(grep -E '^(prefill|decode)' "$OUT/gguf_lat_b1.log" | tr '\n' ' ')"
    note "  $(grep -E 'device steps' "$OUT/gguf_lat_b1.log" | head -1)"
    timeout 150 "$bin/kvasir" bench latency --model $gguf --device cuda --batch-size 64 --input-len 128 \
      --output-len 128 --num-iters 3 >"$OUT/gguf_lat_b64.log" 2>&1
    note "kvasir gguf b64 128/128: rc=$? $(grep -E '^(prefill|decode)' "$OUT/gguf_lat_b64.log" | tr '\n' ' ')"
    note "  $(grep -E 'device steps' "$OUT/gguf_lat_b64.log" | head -1)"
    if [[ $gguf_type != f16 ]]; then
      # Batch 1 and 8 with Q4_K/Q6_K on the generic GEMV (KVASIR_GGUF_KQUANT_GEMV=0) beside the
      # K-quant kernel's runs (gguf_kquant_gemv.cu); batch 8 of the default.
      for bsz in 1 8; do
        in=128; [[ $bsz == 1 ]] && in=512
        for kq in default 0; do
          kenv=X=1; [[ $kq == 0 ]] && kenv=KVASIR_GGUF_KQUANT_GEMV=0
          env $kenv timeout 150 "$bin/kvasir" bench latency --model $gguf \
            --device cuda --batch-size $bsz --input-len $in --output-len 128 --num-iters 3 >"$OUT/gguf_lat_b${bsz}_kq$kq.log" 2>&1
          note "kvasir gguf b$bsz $in/128, K-quant GEMV $kq: rc=$? $(grep -E '^decode' "$OUT/gguf_lat_b${bsz}_kq$kq.log")"
        done
      done
      # One token's K-quant GEMV: the default above streams it through the ring at 2 CTAs per SM
      # (gguf_kquant_stream.cu); beside it the per-tile kernel (0) and 2 or 3 by tile rounds (4).
      for st in 0 4; do
        KVASIR_GGUF_KQUANT_STREAM=$st timeout 150 "$bin/kvasir" bench latency --model $gguf --device cuda --batch-size 1 \
          --input-len 512 --output-len 128 --num-iters 3 >"$OUT/gguf_lat_b1_stream$st.log" 2>&1
        note "kvasir gguf b1 512/128, KVASIR_GGUF_KQUANT_STREAM=$st: rc=$? $(grep -E '^decode' "$OUT/gguf_lat_b1_stream$st.log")"
      done
      # Batched decode of block weights: batch 16 (one K-quant GEMV pass per step), batch 32 on the
      # K-quant GEMM (gguf_kquant_gemm.cu), and batch 32 / 64 with the GEMM off
      # (KVASIR_GGUF_KQUANT_GEMM_ROWS=0: the GEMV's passes up to 32, dequantize + cuBLASLt above).
      for bsz in 16 32; do
        timeout 150 "$bin/kvasir" bench latency --model $gguf --device cuda --batch-size $bsz --input-len 128 \
          --output-len 128 --num-iters 3 >"$OUT/gguf_lat_b$bsz.log" 2>&1
        note "kvasir gguf b$bsz 128/128: rc=$? $(grep -E '^(prefill|decode)' "$OUT/gguf_lat_b$bsz.log" | tr '\n' ' ')"
      done
      for bsz in 32 64; do
        KVASIR_GGUF_KQUANT_GEMM_ROWS=0 timeout 150 "$bin/kvasir" bench latency --model $gguf --device cuda \
          --batch-size $bsz --input-len 128 --output-len 128 --num-iters 3 >"$OUT/gguf_lat_b${bsz}_nogemm.log" 2>&1
        note "kvasir gguf b$bsz 128/128, K-quant GEMM off: rc=$? $(grep -E '^decode' "$OUT/gguf_lat_b${bsz}_nogemm.log")"
      done
      KVASIR_GGUF_GEMV=exact timeout 150 "$bin/kvasir" bench latency --model $gguf --device cuda --batch-size 1 \
        --input-len 512 --output-len 128 --num-iters 3 >"$OUT/gguf_lat_b1_exact.log" 2>&1
      note "kvasir gguf b1 512/128, KVASIR_GGUF_GEMV=exact (float32 GEMV): rc=$? $(grep -E '^decode' "$OUT/gguf_lat_b1_exact.log")"
    fi
  fi
  lb=$lc/build-cuda/bin
  if [[ -x $lb/llama-bench ]]; then
    timeout 200 $lb/llama-bench -m $gguf -ngl 99 -fa 1 -p 512 -n 128 -r 3 -o md >"$OUT/llama_bench.log" 2>&1
    note "llama-bench: rc=$? $(grep -E 'pp512|tg128' "$OUT/llama_bench.log" | tr -s ' ' | tr '\n' ' ')"
    timeout 200 $lb/llama-batched-bench -m $gguf -ngl 99 -fa on -c 20480 -b 2048 -ub 512 -npp 128 -ntg 128 \
      -npl 1,8,16,32,64 >"$OUT/llama_batched.log" 2>&1
    note "llama-batched-bench: rc=$?"
    grep -E '^\|' "$OUT/llama_batched.log" | tail -7
    for l in $(grep -E '^\|' "$OUT/llama_batched.log" | tail -5 | tr -d ' '); do note "  $l"; done
  else
    note "llama.cpp: no binaries"
  fi
fi

[[ -f $lc/started && ! -f $lc/done ]] && note "llama.cpp build still running: $(grep -E '^\[[0-9]+/' $lc/build.log | tail -1 | cut -c1-60)"
echo
echo "================ summary ================"
for s in "${summary[@]}"; do echo "$s"; done
# Only 8 files come back from $OUT: everything in one archive (the summary above is in the reply).
tar czf /tmp/logs.tgz -C "$OUT" . 2>/dev/null && rm -f "$OUT"/* && mv /tmp/logs.tgz "$OUT/logs.tgz"
