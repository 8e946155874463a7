// Backend: the one op interface every device implements (CPU is the reference and test oracle;
// CUDA implements the same table and is tested op by op against it). Ops take Tensor views and
// plain host-side metadata; they never know about requests, blocks' meaning or the scheduler.
// Must not allocate on the hot path: buffers come from allocate() at start. Host arrays passed
// to ops (ids, positions, metadata) must stay unchanged until the next read-back (copy_to_host,
// sample, synchronize): a device backend may stage them lazily and replay the step as a graph.
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>

#include "backend/draft_verify.h"
#include "backend/moe_params.h"
#include "backend/tensor.h"
#include "common/check.h"
#include "common/status.h"

namespace kvasir {

class Buffer {
 public:
  virtual ~Buffer() = default;
  virtual void* data() = 0;
  virtual size_t size() const = 0;
};

// Where each scheduled token's K/V goes and what each sequence attends to (vLLM's names).
// All pointers are host memory; a device backend copies them once per forward.
struct AttentionMetadata {
  int num_seqs = 0;
  int num_tokens = 0;
  const int32_t* query_start_loc = nullptr;  // [num_seqs + 1] token offsets of each sequence
  const int32_t* seq_lens = nullptr;         // [num_seqs] context length including new tokens
  const int32_t* block_tables = nullptr;     // [num_seqs, max_blocks_per_seq]
  int max_blocks_per_seq = 0;
  const int64_t* slot_mapping = nullptr;     // [num_tokens] block_id * block_size + offset
  int block_size = 16;
};

struct AttentionParams {
  float scale = 1.0f;
  int sliding_window = 0;  // 0: full attention; else a query at p sees keys (p - window, p]
  float softcap = 0.0f;    // 0: off; else scores = softcap * tanh(scores / softcap)
  // Attention sinks (gpt-oss): one learned logit per query head that joins each query's softmax
  // denominator and contributes no value, so a head can attend to "nothing". f32 [num_heads] on
  // the backend's device; data == nullptr: no sinks.
  Tensor sinks;
};

struct RopeParams {
  int rotary_dim = 0;          // leading dims of each head that rotate
  bool neox = true;            // true: rotate halves (HF); false: interleaved pairs (GPT-J)
  const float* inv_freq = nullptr;  // [rotary_dim / 2] host table, scaling already applied
  float attention_factor = 1.0f;    // YaRN mscale on cos/sin
};

// One row of on-device sampling: steps 5-10 of sample/sampler.h (greedy, temperature, min-p,
// top-k, top-p, the Philox draw). Rows that need logit edits or logprobs use the host Sampler.
struct DeviceSamplingRow {
  float temperature = 0.0f;  // 0: greedy
  float top_p = 1.0f;
  float min_p = 0.0f;
  int32_t top_k = 0;         // 0 or >= vocab: off
  uint64_t rng_key = 0;      // rng_key_for_request (sample/philox.h)
  uint64_t position = 0;     // num_generated_tokens: the draw's counter
};

// DeepSeek multi-head latent attention (MLA), absorbed form: what one layer's mla_attention needs
// besides its query and cache. The per-head matrices come from kv_b_proj, split and made dense at
// load, so the op never sees a quantized block; the rope part of q is rotated inside the op.
struct MlaParams {
  Tensor w_uk_t;     // [heads, kv_lora_rank, qk_nope_dim]: W_UK^T, absorbed into the query
  Tensor w_uv;       // [heads, v_head_dim, kv_lora_rank]: W_UV, applied to the latent output
  RopeParams rope;   // rotary_dim = qk_rope_dim (the whole rope part of q and of k_pe)
  float scale = 1.0f;  // softmax scale: 1 / sqrt(qk_nope_dim + qk_rope_dim), times YaRN's mscale^2
};

// Device memory as the runtime reports it (zeros on the CPU).
struct DeviceMemoryInfo {
  size_t free_bytes = 0;
  size_t total_bytes = 0;
};

// What a backend does beyond the op table, so that device policy is read from the backend rather
// than decided by its callers (plain data; Backend::capabilities()).
struct BackendCapabilities {
  DType activation_dtype = DType::kF32;  // what activations are computed in
  DType kv_cache_dtype = DType::kF32;    // element type of the paged KV cache
  bool device_sampling = false;          // sample() works: token ids come back, not logits
  bool device_token_bitmask = false;     // apply_token_bitmask() works on device logits
  bool sampled_token_feedback = false;   // sample_async / collect_sampled / embedding_fed work
  // Steps of an identical op sequence replay a captured graph (CUDA graphs): callers that can pad
  // pure-decode batches (the device-sampling path) pad them to decode_bucket() sizes and block
  // tables to a power of two, so few distinct step shapes exist.
  bool decode_batch_buckets = false;
  bool graph_replay = false;  // graphs are actually captured (false under --enforce-eager)
  int max_graphs = 0;         // captured step shapes kept; further shapes run eagerly

  // Batches of up to this many sequences are their own bucket (a batch-1 verify step of k = 4
  // drafts is 5 one-query rows: padding it to 8 would cost 3 rows of GEMV work for nothing).
  int exact_decode_buckets_up_to = 2;

  // The padded size of a pure-decode batch of n sequences: n itself without buckets; else every
  // size up to exact_decode_buckets_up_to, then 1, 2, 4 and multiples of 8 (vLLM's capture
  // sizes), capped at max_num_seqs but never below n.
  int decode_bucket(int n, int max_num_seqs) const {
    if (!decode_batch_buckets) return n;
    const int b = n <= exact_decode_buckets_up_to ? n : (n <= 2 ? 2 : (n <= 4 ? 4 : (n + 7) / 8 * 8));
    return std::max(n, std::min(b, max_num_seqs));
  }
};

// How the CPU path treats activations inside quantized matmuls (ignored by dense-only backends).
enum class MatmulPrecision { kExact, kFast };

class Backend {
 public:
  virtual ~Backend() = default;
  virtual Device device() const = 0;
  virtual std::string name() const = 0;
  // Activation element type this backend computes in (F32 on CPU).
  virtual DType activation_dtype() const = 0;
  // Element type of the paged KV cache it allocates and attends over (--kv-cache-dtype).
  virtual DType kv_cache_dtype() const { return activation_dtype(); }
  // --calculate-kv-scales: FP8 caches are made with cache_scale 0 ("not yet known"), and the first
  // write_kv to each sets its scales from that write's K and V, as vLLM computes them on the first
  // forward pass: max |K| / 200 and max |V| / 100 (1 where the maximum is 0), kept from then on.
  virtual bool calculates_kv_scales() const { return false; }

  virtual StatusOr<std::unique_ptr<Buffer>> allocate(size_t bytes) = 0;
  // Makes a weight usable by this backend: the CPU reads it in place; a GPU copies it over.
  // A GPU backend may also accept host_weight.data == nullptr (--load-format dummy): it then
  // fills the tensor with deterministic random values on the device. Unimplemented when no
  // kernel of this backend reads the weight's type (checked at load, so no op ever meets it).
  virtual StatusOr<Tensor> upload_weight(const Tensor& host_weight, std::unique_ptr<Buffer>* owner) = 0;
  // The same for a vocabulary table (token embedding, lm_head). A backend told to lower its
  // matrices' precision (CPU --dtype bfloat16) keeps these as stored: their rounding moves every
  // logit and every input embedding at once, and flipped greedy continuations at ordinary margins.
  virtual StatusOr<Tensor> upload_vocab_table(const Tensor& host_weight, std::unique_ptr<Buffer>* owner) {
    return upload_weight(host_weight, owner);
  }
  virtual void copy_to_host(const Tensor& src, void* dst) = 0;
  virtual void synchronize() = 0;
  // Starts the device on the work recorded so far without waiting for it, for a caller about to
  // wait on host work of its own (grammar masks) before recording the rest of the step. Backends
  // that launch every op at once have nothing to do.
  virtual void submit() {}

  // out[i, :] = scale * table[ids[i], :]                      table [vocab, hidden], out [n, hidden]
  virtual void embedding(const Tensor& table, const int32_t* ids, int n, float scale, Tensor& out) = 0;
  // out = x · w^T (+ bias)                                     x [n, in], w [out, in], out [n, out]
  virtual void linear(const Tensor& x, const Tensor& w, const Tensor* bias, Tensor& out) = 0;
  // linear(x, *t.w, t.bias, *t.out) for each of `count` targets reading the same x (a layer's
  // q / k / v, gate / up). Each out is what linear gives; a backend may share work between them
  // (the CPU quantizes x once and runs all products in one parallel region). Default: one linear
  // per target, in order.
  struct LinearTarget {
    const Tensor* w = nullptr;
    const Tensor* bias = nullptr;
    Tensor* out = nullptr;
  };
  virtual void linears(const Tensor& x, const LinearTarget* targets, int count) {
    for (int i = 0; i < count; ++i) linear(x, *targets[i].w, targets[i].bias, *targets[i].out);
  }
  // out = x / rms(x) * w, row-wise                             x [rows, d], w [d]
  virtual void rms_norm(const Tensor& x, const Tensor& w, float eps, Tensor& out) = 0;
  // residual += x; out = rms_norm(residual)                    all [rows, d]
  virtual void add_rms_norm(Tensor& residual, const Tensor& x, const Tensor& w, float eps, Tensor& out) = 0;
  // a += b                                                     same shape
  virtual void add(Tensor& a, const Tensor& b) = 0;
  // In-place rotary embedding                                  q [n, heads, hd], k [n, kv_heads, hd]
  virtual void rope(Tensor& q, Tensor& k, const int32_t* positions, const RopeParams& p) = 0;
  // Writes K/V of the scheduled tokens into the paged cache    k, v [n, kv_heads, hd]
  //                                                            caches [num_blocks, block_size, kv_heads, hd]
  virtual void write_kv(const Tensor& k, const Tensor& v, Tensor& k_cache, Tensor& v_cache,
                        const AttentionMetadata& m) = 0;
  // Causal attention of each scheduled token over its sequence's cached context (prefill,
  // chunked prefill and decode alike)                          q, out [n, heads, hd]
  virtual void attention(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache,
                         const AttentionMetadata& m, const AttentionParams& p, Tensor& out) = 0;
  // MLA (MlaParams). A model checks supports_mla() at load; the ops only KVASIR_CHECK. The latent
  // cache holds one row per token, [c_kv | k_pe] with kv_lora_rank + qk_rope_dim columns, in
  // the KV cache's element type, paged like K (block tables, slot mapping).
  virtual bool supports_mla() const { return false; }
  // Rotates each token's k_pe at its position and writes the row [c_kv | k_pe] through the slot
  // mapping (inputs unchanged)                                 c_kv [n, L], k_pe [n, R]
  //                                                            cache [num_blocks, block_size, 1, L + R]
  virtual void write_latent_kv(const Tensor& c_kv, const Tensor& k_pe, const int32_t* positions,
                               const RopeParams& rope, Tensor& cache, const AttentionMetadata& m) {
    KVASIR_CHECK_MSG(false, (name() + " has no MLA ops").c_str());
  }
  // Causal attention of each scheduled token over its sequence's latent rows, every query head
  // against the one latent "head" (MQA): q_latent = [W_UK^T q_nope | rope(q_pe)], scores =
  // q_latent . row * scale, o_latent = sum softmax * c_kv, out = W_UV o_latent per head.
  //                                                            q [n, heads, qk_nope_dim + R]
  //                                                            out [n, heads, v_head_dim]
  virtual void mla_attention(const Tensor& q, const int32_t* positions, const Tensor& cache,
                             const AttentionMetadata& m, const MlaParams& p, Tensor& out) {
    KVASIR_CHECK_MSG(false, (name() + " has no MLA ops").c_str());
  }
  // out = act(gate) * up                                       gate, up, out [n, d]
  virtual void gated_activation(const Tensor& gate, const Tensor& up, GateActivation act, Tensor& out) = 0;
  // x = cap * tanh(x / cap)
  virtual void softcap(Tensor& x, float cap) = 0;
  // out[i, :] = src[rows[i], :]                                src [n, d], out [k, d]
  virtual void gather_rows(const Tensor& src, const int32_t* rows, int k, Tensor& out) = 0;

  // Mixture of experts (moe_params.h). A model checks supports_moe() and validates its
  // MoeRouting / MoeExpertWeights at load; the ops only KVASIR_CHECK. Ops take their scratch from
  // the backend's own workspace, never from a per-call allocation once it has grown to the largest
  // batch. Batch invariant like every op: a token's ids, weights and output rows are bit-identical
  // whatever else is in the batch.
  virtual bool supports_moe() const { return false; }
  // Each token's top_k experts and their weights       router_logits [T, E] f32,
  //                                                    topk_ids [T, top_k] I32, topk_weights [T, top_k] f32
  virtual void moe_route(const Tensor& router_logits, const MoeRouting& routing, Tensor& topk_ids,
                         Tensor& topk_weights) {
    KVASIR_CHECK_MSG(false, (name() + " has no MoE ops").c_str());
  }
  // out[t] = sum_j topk_weights[t, j] * expert_{topk_ids[t, j]}(x[t]) (MoeExpertWeights' formula)
  //                                                    x, out [T, H] (activation dtype); topk_* from moe_route
  virtual void moe_experts(const Tensor& x, const Tensor& topk_ids, const Tensor& topk_weights,
                           const MoeExpertWeights& experts, Tensor& out) {
    KVASIR_CHECK_MSG(false, (name() + " has no MoE ops").c_str());
  }

  // Tensor parallelism on the device: a backend made for one rank of a group holds the group's
  // device communicator (CUDA: CudaBackendOptions) and sums and gathers activations where they
  // live, in its own op order (inside its captured graphs where the message allows). The model
  // uses these instead of its CPU communicator whenever device_group_size() > 0 (also at 1: the
  // same path over one rank). 0: this backend has no device communicator.
  virtual int device_group_size() const { return 0; }
  // t = the sum over the group's ranks of their t, in place (f32 or the activation type).
  virtual void all_reduce_sum(Tensor& t) { KVASIR_CHECK_MSG(false, "this backend has no device communicator"); }
  // out [rows, out_cols] = every rank's local [rows, local_cols] side by side in rank order, the
  // last columns past out_cols dropped (vocabulary shards padded to equal widths). f32.
  virtual void all_gather_columns(const Tensor& local, Tensor& out) {
    KVASIR_CHECK_MSG(false, "this backend has no device communicator");
  }

  // Optional on-device sampling: one token per row of float32 logits [num_rows, vocab] that live
  // on this device; only the token ids come back (out_tokens: host [num_rows]).
  virtual bool supports_device_sampling() const { return false; }
  virtual Status sample(const Tensor& logits, const DeviceSamplingRow* rows, int num_rows, int32_t* out_tokens) {
    return unimplemented(name() + " has no device sampling");
  }
  // Optional, with device sampling: overlapped steps (vLLM's async scheduling with the sampled
  // ids fed on the device). sample_async() samples as sample() does but returns once the sampling
  // is queued; collect_sampled() waits for the oldest such step and copies its num_rows tokens out.
  // Until collected, those tokens also stay on the device, where the next step's embedding_fed()
  // reads them, so the host may record and launch that step before they are back. At most two
  // sample_async() steps are uncollected at a time; any other read-back (sample, copy_to_host,
  // synchronize) first completes them, and their tokens are still collected in order afterwards.
  virtual bool supports_sampled_token_feedback() const { return false; }
  virtual Status sample_async(const Tensor& logits, const DeviceSamplingRow* rows, int num_rows) {
    return unimplemented(name() + " cannot feed sampled tokens on the device");
  }
  virtual Status collect_sampled(int32_t* out_tokens) {
    return unimplemented(name() + " cannot feed sampled tokens on the device");
  }
  // embedding() whose token i is row sources[i] of the latest sample_async() where sources[i] >= 0
  // (ids[i] is then ignored), else ids[i]. Host arrays, as embedding()'s.
  virtual void embedding_fed(const Tensor& table, const int32_t* ids, const int32_t* sources, int n, float scale,
                             Tensor& out) {
    KVASIR_CHECK_MSG(false, "this backend cannot feed sampled tokens on the device");
  }
  // With device sampling: a speculative verify step. Samples every row as sample() does, then
  // keeps each request's drafts while they equal its samples (backend/draft_verify.h) and brings
  // back only the emitted tokens: out_num_emitted host [num_requests], out_tokens host [num_rows]
  // holding them packed in request order. Rows no request covers (padding) are sampled and
  // dropped. `drafts`: host [num_draft_tokens]. This default reads every sample back and verifies
  // on the host; a device with a verify kernel does it there.
  virtual Status sample_and_verify(const Tensor& logits, const DeviceSamplingRow* rows, int num_rows,
                                   const DraftVerifyRow* requests, int num_requests, const int32_t* drafts,
                                   int num_draft_tokens, int32_t* out_tokens, int32_t* out_num_emitted) {
    KVASIR_RETURN_IF_ERROR(validate_draft_verify_rows(requests, num_requests, num_rows, num_draft_tokens));
    KVASIR_RETURN_IF_ERROR(sample(logits, rows, num_rows, out_tokens));
    verify_drafts_on_host(out_tokens, requests, num_requests, drafts, out_tokens, out_num_emitted);
    return Status();
  }
  // Optional, with device sampling: grammar masks on device logits before sample(). Row i of
  // `words` ([num_rows, words_per_row], host, XGrammar's layout) applies to logits row
  // logits_rows[i]; a clear bit sets that logit to -inf. Recorded into the step like any op.
  virtual bool supports_device_token_bitmask() const { return false; }
  virtual Status apply_token_bitmask(Tensor& logits, const int32_t* words, int words_per_row,
                                     const int32_t* logits_rows, int num_rows) {
    return unimplemented(name() + " has no device token bitmask");
  }
  // Everything above in one plain struct; devices with more to say override it.
  virtual BackendCapabilities capabilities() const {
    BackendCapabilities c;
    c.activation_dtype = activation_dtype();
    c.kv_cache_dtype = kv_cache_dtype();
    c.device_sampling = supports_device_sampling();
    c.device_token_bitmask = supports_device_token_bitmask();
    c.sampled_token_feedback = supports_sampled_token_feedback();
    return c;
  }
  virtual DeviceMemoryInfo memory_info() { return {}; }
  // One line on device time (busy, idle between steps, graph replays); empty when not measured.
  virtual std::string stats() const { return {}; }
};

}  // namespace kvasir
