// The CUDA backend's mixture-of-experts ops: moe_route and moe_experts check their tensors and
// append one record each; exec_moe_experts picks nothing at run time (the path was chosen from
// counts at record time): the GEMV path up to KVASIR_MOE_GEMV_TOKENS tokens (or for shapes the
// tensor cores cannot take), else the align + grouped GEMM path (moe_kernels.h).
// The per-expert weight pointers go to the device once per layer, as a table built at the layer's
// first call and kept: staging them every step would add E * 48 bytes per layer to each step's
// host-to-device copy (~300 KB for a 48-layer, 128-expert model).
#include <algorithm>
#include <cstring>

#include "backend/cuda/cuda_backend_impl.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/moe_kernels.h"

namespace kvasir {
namespace {

bool is_dev(const Tensor& t) { return t.device == Device::kCuda; }

size_t align256(size_t v) { return (v + 255) / 256 * 256; }

// Every weight and bias view of `w` on this device, of the type the kernels read.
bool views_on_device(const MoeExpertWeights& w) {
  auto ok = [&](const Tensor* views, DType dt) {
    if (views == nullptr) return true;
    for (int e = 0; e < w.num_experts; ++e) {
      if (!is_dev(views[e]) || views[e].dtype != dt) return false;
    }
    return true;
  };
  return ok(w.gate, DType::kBF16) && ok(w.up, DType::kBF16) && ok(w.gate_up, DType::kBF16) &&
         ok(w.down, DType::kBF16) && ok(w.gate_bias, DType::kF32) && ok(w.up_bias, DType::kF32) &&
         ok(w.gate_up_bias, DType::kF32) && ok(w.down_bias, DType::kF32);
}

// Everything a layer's pointer table is built from, in a fixed order.
void moe_key(const MoeExpertWeights& w, std::vector<const void*>& key) {
  key.clear();
  key.push_back(reinterpret_cast<const void*>(static_cast<uintptr_t>(w.num_experts)));
  key.push_back(reinterpret_cast<const void*>(static_cast<uintptr_t>(w.hidden_size)));
  key.push_back(reinterpret_cast<const void*>(static_cast<uintptr_t>(w.intermediate_size)));
  key.push_back(reinterpret_cast<const void*>(static_cast<uintptr_t>(w.gate_up_layout)));
  for (const Tensor* views : {w.gate, w.up, w.gate_up, w.down, w.gate_bias, w.up_bias, w.gate_up_bias, w.down_bias}) {
    key.push_back(views);
    if (views == nullptr) continue;
    for (int e = 0; e < w.num_experts; ++e) key.push_back(views[e].data);
  }
}

cuda::MoeActivation activation_of(GateActivation a) {
  switch (a) {
    case GateActivation::kGeluTanh: return cuda::MoeActivation::kGeluTanh;
    case GateActivation::kSwigluOai: return cuda::MoeActivation::kSwigluOai;
    default: return cuda::MoeActivation::kSilu;
  }
}

}  // namespace

void CudaBackend::moe_route(const Tensor& router_logits, const MoeRouting& r, Tensor& topk_ids, Tensor& topk_weights) {
  const int64_t t_n = router_logits.rows(), e_n = router_logits.cols();
  KVASIR_CHECK(is_dev(router_logits) && is_dev(topk_ids) && is_dev(topk_weights));
  KVASIR_CHECK(router_logits.dtype == DType::kF32 && topk_ids.dtype == DType::kI32 &&
               topk_weights.dtype == DType::kF32);
  KVASIR_CHECK(topk_ids.rows() == t_n && topk_ids.cols() == r.top_k && topk_weights.rows() == t_n &&
               topk_weights.cols() == r.top_k);
  KVASIR_CHECK_MSG(validate_moe_routing(r, e_n).ok(), "moe_route: invalid routing");
  KVASIR_CHECK_MSG(e_n <= cuda::kMoeRouteMaxExperts, "moe_route: the CUDA backend routes at most 1024 experts");
  KVASIR_CHECK(r.correction_bias == nullptr || is_dev(*r.correction_bias));
  if (t_n == 0) return;
  cuda::MoeRouteOp& op = queue_->add(OpKind::kMoeRoute, true).moe_route;
  op.logits = static_cast<const float*>(router_logits.data);
  op.bias = r.correction_bias != nullptr ? static_cast<const float*>(r.correction_bias->data) : nullptr;
  op.ids = static_cast<int32_t*>(topk_ids.data);
  op.weights = static_cast<float*>(topk_weights.data);
  op.num_tokens = t_n;
  op.num_experts = e_n;
  op.top_k = r.top_k;
  op.sigmoid = r.scoring == MoeScoring::kSigmoid ? 1 : 0;
  op.renormalize = r.renormalize ? 1 : 0;
  op.num_groups = r.num_groups;
  op.topk_groups = r.topk_groups;
  op.group_top2 = r.group_score == MoeGroupScore::kTop2Sum ? 1 : 0;
  op.scale = r.routed_scaling_factor;
}

const CudaBackend::MoeTable& CudaBackend::moe_table(const MoeExpertWeights& w) {
  moe_key(w, moe_key_);
  MoeTable& t = moe_tables_[w.down];
  if (t.table != nullptr && t.key == moe_key_) return t;
  if (t.table != nullptr) retired_.push_back(t.table);  // a step recorded so far may still name it
  const int64_t h = w.hidden_size, inter = w.intermediate_size;
  std::vector<cuda::MoeExpertPtrs> host(static_cast<size_t>(w.num_experts));
  bool vec = h % 8 == 0 && inter % 8 == 0;
  auto bias_of = [](const Tensor* views, int e) {
    return views != nullptr ? static_cast<const float*>(views[e].data) : nullptr;
  };
  for (int e = 0; e < w.num_experts; ++e) {
    cuda::MoeExpertPtrs& p = host[static_cast<size_t>(e)];
    if (w.gate_up == nullptr) {
      p.w_gate = w.gate[e].data;
      p.w_up = w.up[e].data;
      p.b_gate = bias_of(w.gate_bias, e);
      p.b_up = bias_of(w.up_bias, e);
    } else {
      const auto* base = static_cast<const uint16_t*>(w.gate_up[e].data);
      const float* bias = bias_of(w.gate_up_bias, e);
      const bool interleaved = w.gate_up_layout == GateUpLayout::kInterleaved;
      p.w_gate = base;
      p.w_up = interleaved ? base + h : base + inter * h;
      p.b_gate = bias;
      p.b_up = bias == nullptr ? nullptr : (interleaved ? bias + 1 : bias + inter);
    }
    p.w_down = w.down[e].data;
    p.b_down = bias_of(w.down_bias, e);
    vec = vec && cuda::aligned16(p.w_gate) && cuda::aligned16(p.w_up) && cuda::aligned16(p.w_down);
  }
  const size_t bytes = host.size() * sizeof(cuda::MoeExpertPtrs);
  bind_device();
  KVASIR_CUDA_CHECK(cudaMalloc(&t.table, bytes));
  // Ordered before every kernel that reads it: they are launched on this stream later.
  KVASIR_CUDA_CHECK(cudaMemcpyAsync(t.table, host.data(), bytes, cudaMemcpyHostToDevice, stream_));
  KVASIR_CUDA_CHECK(cudaStreamSynchronize(stream_));  // `host` dies here
  t.key = moe_key_;
  t.vec = vec;
  return t;
}

void CudaBackend::moe_experts(const Tensor& x, const Tensor& topk_ids, const Tensor& topk_weights,
                              const MoeExpertWeights& w, Tensor& out) {
  const int64_t t_n = x.rows(), h = w.hidden_size, inter = w.intermediate_size, k = topk_ids.cols();
  KVASIR_CHECK(is_dev(x) && is_dev(out) && is_dev(topk_ids) && is_dev(topk_weights));
  KVASIR_CHECK(x.dtype == DType::kBF16 && out.dtype == DType::kBF16 && x.cols() == h && out.cols() == h &&
               out.rows() == t_n);
  KVASIR_CHECK(topk_ids.dtype == DType::kI32 && topk_weights.dtype == DType::kF32 && topk_ids.rows() == t_n &&
               topk_weights.rows() == t_n && topk_weights.cols() == k && k >= 1);
  KVASIR_CHECK_MSG(validate_moe_expert_weights(w).ok(), "moe_experts: invalid expert weights");
  KVASIR_CHECK_MSG(views_on_device(w), "moe_experts: expert weights must be bf16 (biases f32) on this device");
  KVASIR_CHECK_MSG(out.data != x.data, "moe_experts: out must not alias x");
  // Expert parallelism (a rank's share of the experts) is the CPU's only; the model refuses it here.
  KVASIR_CHECK_MSG(w.first_expert >= 0, "moe_experts: first_expert must not be negative");
  if (t_n == 0) return;
  const MoeTable& table = moe_table(w);
  const bool vec = table.vec && cuda::aligned16(x.data);
  const bool gemm = vec && cuda::moe_gemm_supported(h, inter, w.num_experts) &&
                    t_n > tuning_.recording.moe_gemv_max_tokens;
  const int64_t slots = t_n * k;
  // m-blocks of 64 once experts average 32 or more slots, else of 16 (less padding).
  const int block_m = !gemm ? 0 : (slots >= 32 * int64_t{w.num_experts} ? 64 : 16);
  const int64_t max_blocks = gemm ? cuda::moe_max_m_blocks(slots, w.num_experts, block_m) : 0;
  // The GEMV path folds in the moe_route op that produced exactly these ids and weights where that
  // keeps the gate/up kernel's wave count (cuda_tuning.h, KVASIR_MOE_FUSE_ROUTE): each gate/up CTA
  // routes its token, CTAs of the first row block write the ids and weights.
  cuda::MoeRouteOp route{};
  OpRecord* last = queue_->last();
  if (fuse_ && !gemm && cuda::moe_fold_route(tuning_.recording.moe_fuse_route, slots, inter, num_sms_) && last != nullptr && last->kind == OpKind::kMoeRoute && last->moe_route.ids == topk_ids.data &&
      last->moe_route.weights == topk_weights.data && last->moe_route.num_tokens == t_n &&
      last->moe_route.top_k == k && last->moe_route.num_experts == w.num_experts &&
      w.num_experts <= cuda::kMoeFusedRouteMaxExperts) {
    route = last->moe_route;
    queue_->drop_last();
  }
  const int64_t act_rows = gemm ? max_blocks * block_m : slots;
  const size_t sorted_b = align256(static_cast<size_t>(act_rows) * 4);
  const size_t blocks_b = align256(static_cast<size_t>(max_blocks + 1) * 4);
  const size_t act_b = align256(static_cast<size_t>(act_rows * inter) * 2);
  const size_t y_b = gemm ? align256(static_cast<size_t>(slots * h) * 4) : 0;
  auto* base = static_cast<uint8_t*>(
      device_scratch(moe_scratch_, moe_scratch_cap_, gemm ? sorted_b + blocks_b + act_b + y_b : act_b));

  cuda::MoeExpertsOp& op = queue_->add(OpKind::kMoeExperts, true).moe_experts;
  op.x = x.data;
  op.out = out.data;
  op.ids = static_cast<const int32_t*>(topk_ids.data);
  op.weights = static_cast<const float*>(topk_weights.data);
  op.experts = table.table;
  if (gemm) {
    op.sorted_slots = reinterpret_cast<int32_t*>(base);
    op.block_expert = reinterpret_cast<int32_t*>(base + sorted_b);
    op.num_m_blocks = op.block_expert + max_blocks;
    op.act = base + sorted_b + blocks_b;
    op.y = reinterpret_cast<float*>(base + sorted_b + blocks_b + act_b);
  } else {
    op.act = base;
  }
  op.num_tokens = t_n;
  op.hidden = h;
  op.inter = inter;
  op.num_experts = w.num_experts;
  op.first_expert = w.first_expert;
  op.top_k = k;
  const bool interleaved = w.gate_up != nullptr && w.gate_up_layout == GateUpLayout::kInterleaved;
  op.gu_row_stride = interleaved ? 2 * h : h;
  op.gu_bias_stride = interleaved ? 2 : 1;
  op.activation = static_cast<int32_t>(activation_of(w.activation));
  op.block_m = block_m;
  op.max_m_blocks = max_blocks;
  op.vec = vec ? 1 : 0;
  op.alpha = w.swiglu_oai.alpha;
  op.limit = w.swiglu_oai.limit;
  if (route.logits != nullptr) {
    op.route_logits = route.logits;
    op.route_bias = route.bias;
    op.route_groups = static_cast<int32_t>(route.num_groups);
    op.route_topk_groups = static_cast<int32_t>(route.topk_groups);
    op.route_flags = (route.sigmoid ? cuda::kRouteSigmoid : 0) | (route.renormalize ? cuda::kRouteRenormalize : 0) |
                     (route.group_top2 ? cuda::kRouteGroupTop2 : 0);
    op.route_scale = route.scale;
  }
}

void CudaBackend::exec_moe_experts(const cuda::MoeExpertsOp& op, cudaStream_t s) {
  cuda::MoeProblem p;
  p.x = op.x;
  p.out = op.out;
  p.ids = op.ids;
  p.weights = op.weights;
  p.experts = static_cast<const cuda::MoeExpertPtrs*>(op.experts);
  p.num_tokens = op.num_tokens;
  p.hidden = op.hidden;
  p.inter = op.inter;
  p.num_experts = op.num_experts;
  p.first_expert = op.first_expert;
  p.top_k = op.top_k;
  p.gu_row_stride = op.gu_row_stride;
  p.gu_bias_stride = op.gu_bias_stride;
  p.act = static_cast<cuda::MoeActivation>(op.activation);
  p.alpha = op.alpha;
  p.limit = op.limit;
  if (op.route_logits != nullptr) {
    cuda::MoeRouteArgs& r = p.route;
    r.logits = op.route_logits;
    r.bias = op.route_bias;
    r.ids = const_cast<int32_t*>(op.ids);
    r.weights = const_cast<float*>(op.weights);
    r.num_tokens = static_cast<int>(op.num_tokens);
    r.num_experts = static_cast<int>(op.num_experts);
    r.top_k = static_cast<int>(op.top_k);
    r.sigmoid = (op.route_flags & cuda::kRouteSigmoid) != 0;
    r.renormalize = (op.route_flags & cuda::kRouteRenormalize) != 0;
    r.group_top2 = (op.route_flags & cuda::kRouteGroupTop2) != 0;
    r.num_groups = op.route_groups;
    r.topk_groups = op.route_topk_groups;
    r.scale = op.route_scale;
  }
  if (op.block_m == 0) {
    cuda::launch_moe_gemv(p, op.act, op.vec != 0, s);
    return;
  }
  const cuda::MoeGemmScratch sc{op.sorted_slots, op.block_expert, op.num_m_blocks, op.act, op.y};
  cuda::launch_moe_gemm(p, sc, static_cast<int>(op.block_m), op.max_m_blocks, s);
}

}  // namespace kvasir
