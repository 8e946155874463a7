#include "backend/cpu/quant/matmul.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <string>

#include "backend/cpu/quant/dequantize.h"
#include "backend/cpu/quant/kernels.h"
#include "common/check.h"
#include "quant/dequantize.h"

namespace kvasir::cpu {
namespace {

constexpr int64_t kTileRows = 4;
// Activation rows processed per pass over a weight tile: small enough to stay in L2 while the
// tile's rows are reused against every one of them, so weights stream from memory once per pass.
constexpr size_t kActChunkBytes = size_t{1} << 20;
// Below this many multiply-adds a second thread costs more than it saves (~1 us of work).
constexpr int64_t kMinParallelMacs = int64_t{1} << 16;
// Dynamic load balancing: runs of row tiles per thread (more = better balance, more atomics).
constexpr int64_t kRunsPerThread = 8;
// Quantizing activations is worth a parallel region only for large batches.
constexpr int64_t kMinParallelQuantElems = int64_t{1} << 16;
// Input rows from which the AMX tiles take over from the AVX-512 q8 tiles (same results; the
// tile unit pays off once a 16-row activation tile is mostly full).
constexpr int64_t kAmxMinRows = 16;

bool is_dense(DType t) { return t == DType::kF32 || t == DType::kF16 || t == DType::kBF16; }

struct Plan {
  TileFn tile = nullptr;
  ActFormat format = ActFormat::kF32;
  DequantFn dequant = nullptr;  // generic tile only
  size_t act_stride = 0;        // bytes between activation rows as the tile reads them
  int planes = 1;               // activation rows the tile reads per input row (kQ16: 2)
  TileFn amx_tile = nullptr;    // AMX tile for batches of at least kAmxMinRows input rows
};

Plan make_plan(CpuIsa isa, const KernelSet& ks, DType t, int64_t k, ActQuant mode) {
  Plan p;
  p.act_stride = static_cast<size_t>(k) * sizeof(float);
  if (is_dense(t)) {
    p.tile = ks.f32_tile(t);
    return p;
  }
  if (mode != ActQuant::kF32) {
    p.tile = ks.q8_tile(t, &p.format);
    if (p.tile != nullptr) {
      p.act_stride = p.format == ActFormat::kQ8_32 ? Act32Layout::row_bytes(k) : ActKLayout::row_bytes(k);
      p.planes = mode == ActQuant::kQ16 ? 2 : 1;
      if (isa == CpuIsa::kAmx && p.format == ActFormat::kQ8_32 && cpu_supports(CpuIsa::kAmx)) {
        p.amx_tile = amx::amx_tile_fn(t);
      }
      return p;
    }
  }
  p.format = ActFormat::kF32;
  p.tile = ks.dequant_f32_tile;
  p.dequant = ks.dequant(t);
  if (p.dequant == nullptr) p.dequant = ref_dequant_fn(t);
  return p;
}

size_t thread_scratch_bytes(int64_t k) { return align_up(tile_scratch_floats(k) * sizeof(float), 64); }

bool use_amx(const Plan& p, int64_t n) { return p.amx_tile != nullptr && n >= kAmxMinRows; }

// Input rows the activation buffer holds: AMX tiles read whole 16-row groups.
int64_t padded_rows(const Plan& p, int64_t n) {
  return use_amx(p, n) ? (n + kAmxTileCols - 1) / kAmxTileCols * kAmxTileCols : n;
}

size_t act_scratch_bytes(const Plan& p, int64_t n) {
  return p.format == ActFormat::kF32 ? 0 : p.act_stride * static_cast<size_t>(p.planes * padded_rows(p, n));
}

size_t per_thread_bytes(const Plan& p, int64_t k, int64_t n) {
  const size_t b = thread_scratch_bytes(k);
  return use_amx(p, n) ? std::max(b, align_up(amx_scratch_bytes(k), 64)) : b;
}

}  // namespace

void MatmulScratch::Free::operator()(void* p) const { std::free(p); }

void MatmulScratch::reserve(size_t bytes) {
  if (bytes <= capacity_) return;
  const size_t cap = align_up(bytes, 4096);
  void* p = std::aligned_alloc(64, cap);
  KVASIR_CHECK_MSG(p != nullptr, "MatmulScratch: out of memory");
  buf_.reset(p);
  capacity_ = cap;
}

void* MatmulScratch::get(size_t bytes) {
  // Grow by half again, so a slowly rising batch size does not reallocate every step.
  if (bytes > capacity_) reserve(std::max(bytes, capacity_ + capacity_ / 2));
  return buf_.get();
}

Status matmul_supported(DType wtype, int64_t k) {
  if (k <= 0) return invalid_argument("matmul: k must be positive, got " + std::to_string(k));
  if (!quant::dequantize_supported(wtype) || wtype == DType::kQ8_1 || wtype == DType::kQ8_K) {
    return unimplemented("matmul: weight type " + std::string(dtype_name(wtype)) + " is not supported");
  }
  if (!row_bytes(wtype, k)) {
    return invalid_argument("matmul: k=" + std::to_string(k) + " is not a multiple of the " +
                            std::string(dtype_name(wtype)) + " block size");
  }
  return Status();
}

size_t matmul_scratch_bytes(DType wtype, int64_t k, int64_t n, int num_threads, ActQuant mode) {
  const Plan p = make_plan(active_isa(), kernel_set(active_isa()), wtype, k, mode);
  return act_scratch_bytes(p, n) + static_cast<size_t>(std::max(num_threads, 1)) * per_thread_bytes(p, k, n);
}

void matmul(CpuIsa isa, const void* w, DType wtype, int64_t m, int64_t k, const float* x, int64_t n, float* y,
            ThreadPool& pool, ActQuant mode, MatmulScratch& scratch) {
  KVASIR_CHECK_MSG(matmul_supported(wtype, k).ok(), "matmul: unsupported weight type or k");
  KVASIR_CHECK(m >= 0 && n >= 0);
  if (m == 0 || n == 0) return;
  const KernelSet& ks = kernel_set(isa);
  const Plan plan = make_plan(isa, ks, wtype, k, mode);
  const size_t rb = *row_bytes(wtype, k);
  const int num_threads = pool.num_threads();
  const size_t act_bytes = act_scratch_bytes(plan, n);
  const size_t per_thread = per_thread_bytes(plan, k, n);
  const bool amx = use_amx(plan, n);
  auto* base = static_cast<uint8_t*>(scratch.get(act_bytes + static_cast<size_t>(num_threads) * per_thread));

  const uint8_t* act = reinterpret_cast<const uint8_t*>(x);
  if (plan.format != ActFormat::kF32) {
    const bool k32 = plan.format == ActFormat::kQ8_32;
    const QuantActFn quantize = plan.planes == 2 ? (k32 ? ks.quantize_act32_planes : ks.quantize_actk_planes)
                                                 : (k32 ? ks.quantize_act32 : ks.quantize_actk);
    const size_t in_stride = static_cast<size_t>(plan.planes) * plan.act_stride;
    auto quantize_rows = [&](int64_t b, int64_t e) {
      for (int64_t j = b; j < e; ++j) quantize(x + j * k, k, base + static_cast<size_t>(j) * in_stride);
    };
    if (n > 1 && n * k >= kMinParallelQuantElems) {
      pool.parallel_for(n, quantize_rows);
    } else {
      quantize_rows(0, n);
    }
    act = base;
    if (amx) {
      // The padding rows are read by the tiles, never stored: keep them defined.
      const size_t used = in_stride * static_cast<size_t>(n);
      std::memset(base + used, 0, act_bytes - used);
    }
  }

  const int64_t tile_rows = amx ? kAmxTileRows : kTileRows;
  const TileFn tile = amx ? plan.amx_tile : plan.tile;
  const int64_t num_tiles = (m + tile_rows - 1) / tile_rows;
  // Input rows per pass; the tile sees planes * that many activation rows (AMX: whole 16-row groups).
  int64_t chunk = std::max<int64_t>(1, static_cast<int64_t>(kActChunkBytes / (plan.planes * plan.act_stride)));
  if (amx) chunk = std::max(kAmxTileCols, chunk / kAmxTileCols * kAmxTileCols);
  const size_t in_stride = static_cast<size_t>(plan.planes) * plan.act_stride;
  const bool parallel = num_threads > 1 && num_tiles >= 2 && m * k * n >= kMinParallelMacs;
  // Row tiles are handed out in runs of `grain` (about kRunsPerThread per thread) to whichever
  // thread is free: a thread slowed by other load on its core takes fewer runs instead of making
  // the others wait at the end. Results do not depend on who computes what.
  const int64_t grain =
      parallel ? std::max<int64_t>(1, num_tiles / (kRunsPerThread * num_threads)) : num_tiles;
  std::atomic<int64_t> next_tile{0};
  auto body = [&](int share, int) {
    TileArgs a;
    a.w_stride = rb;
    a.k = k;
    a.act_stride = plan.act_stride;
    a.scratch = reinterpret_cast<float*>(base + act_bytes + static_cast<size_t>(share) * per_thread);
    a.ldy = m;
    a.dequant = plan.dequant;
    a.planes = plan.planes;
    for (;;) {
      const int64_t t0 = next_tile.fetch_add(grain, std::memory_order_relaxed);
      if (t0 >= num_tiles) break;
      const int64_t t1 = std::min(t0 + grain, num_tiles);
      for (int64_t c0 = 0; c0 < n; c0 += chunk) {
        a.act = act + static_cast<size_t>(c0) * in_stride;
        a.nc = std::min(chunk, n - c0) * plan.planes;
        for (int64_t t = t0; t < t1; ++t) {
          const int64_t r0 = t * tile_rows;
          a.w = static_cast<const uint8_t*>(w) + static_cast<size_t>(r0) * rb;
          a.nr = static_cast<int>(std::min(tile_rows, m - r0));
          a.y = y + c0 * m + r0;
          tile(a);
        }
      }
    }
  };
  if (parallel) {
    pool.run_on_all(body);
  } else {
    body(0, 1);
  }
}

void matmul(const void* w, DType wtype, int64_t m, int64_t k, const float* x, int64_t n, float* y, ThreadPool& pool,
            ActQuant mode, MatmulScratch& scratch) {
  matmul(active_isa(), w, wtype, m, k, x, n, y, pool, mode, scratch);
}

}  // namespace kvasir::cpu
