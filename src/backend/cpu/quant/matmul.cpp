#include "backend/cpu/quant/matmul.h"

#include <xmmintrin.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <string>

#include "backend/cpu/quant/dequantize.h"
#include "backend/cpu/quant/kernels.h"
#include "backend/cpu/quant/packed_q32.h"
#include "common/check.h"
#include "quant/dequantize.h"

namespace kvasir::cpu {
namespace {

constexpr int64_t kTileRows = 4;
// Activation rows processed per pass over a weight tile: small enough to stay in L2 while the
// tile's rows are reused against every one of them, so weights stream from memory once per pass.
// A quarter of a 1 MB L2 (Zen 4/5): at 1 MB a 512-row q16 batch of k = 576 (737 KB) fell out of
// L2 beside the weights (matmul_bench --packed q4_1 n=512, one thread on the Zen 5 EPYC, GMAC/s
// at 1 MB / 256 KB: 1536x576 169 / 175, 576x1536 161 / 170, 576x576 161 / 165).
constexpr size_t kActChunkBytes = size_t{1} << 18;
// Below this many multiply-adds a second thread costs more than it saves (~1 us of work).
constexpr int64_t kMinParallelMacs = int64_t{1} << 16;
// Dynamic load balancing: runs of row tiles per thread (more = better balance, more atomics).
constexpr int64_t kRunsPerThread = 8;
// Quantizing activations is worth a parallel region only for large batches.
constexpr int64_t kMinParallelQuantElems = int64_t{1} << 16;
// Which tile ahead of the one being computed a thread prefetches (see prefetch_span). On the 2-core
// EPYC VM, Qwen3-MoE bench decode (Q8_0): 0 -> 58-67 tok/s, 1 -> 76-79, 2 -> 75, 4 no better.
constexpr int64_t kPrefetchTiles = 1;
// Input rows from which the AMX tile on GGUF rows takes over from the AVX-512 q8 tiles where a
// weight has no panels (same results; the tile unit pays off once a 16-row activation tile is
// mostly full).
constexpr int64_t kAmxMinRows = 16;
// Activation rows (input rows x planes) from which the AMX tile on a weight's panels takes over
// from the AVX-512 panel tile (same results). It pays a fixed ~0.3 us per 16-row panel (tile
// configuration, pipeline fill, prefetching the next panel; nibble panels: splitting the nibbles
// into B tiles), then much less per row. Measured on the AMX Xeon (2 vCPUs, shared with builds;
// 2026-12-03), AVX-512 panels / AMX panels, q16 (2 planes):
//   matmul_bench --model smollm2 (weights L3-resident), ms a step, one thread: n=2 10.7-11.0 /
//     10.6, n=4 12.9-13.0 / 11.9, n=7 21.5-23.4 / 18.5-19.9; two threads: n=4 8.5-9.0 / 8.7-9.5,
//     n=7 11.7-12.4 / 11.3-12.3.
//   matmul_bench --packed, 1536x576 q4_1, L2-hot / L3 ("cold") us: one thread n=4 41.1 / 43.9,
//     105 / 82; n=7 74.1 / 65.0, 141 / 101; n=16 160 / 145, 227 / 177; two threads (the tile
//     unit seems shared between the two vCPUs: hot scales worse) n=4 27.5 / 36.1, 57 / 54; n=7
//     44.8 / 50.3, 79 / 68; q8_0 one thread n=7 69.7 / 62.6 hot, 154 / 155 cold.
// So from 7 input rows in q16 (14 in q8): one thread gains everywhere, two threads lose hot and
// gain from L3, and the model's step is no slower; at 4 rows two threads lost in the model too.
// Rows longer than 1024 (k = 1536: down_proj) win only from 32: 576x1536 q4_1 n=8 82.8 / 101 hot,
// 124 / 134 cold; q8_0 n=8 79.2 / 80.3, 164 / 169 (why is not pinned down; for nibble panels,
// splitting each block pair just before use into a ring of B tiles, instead of all at once, was
// slower everywhere).
// With panels the GGUF AMX tile never runs on an AMX host: it repacks its weights on every call
// (n=32 q4_1 / q8_0 1536x576: 321 / 339 us hot, the panels' AMX tile 267 / 250).
constexpr int64_t kPackedAmxMinPlaneRows = 14;
constexpr int64_t kPackedAmxMinPlaneRowsLongRows = 32;
constexpr int64_t kLongRowK = 1024;
// Input rows from which a weight's packed panels (packed_q32.h), where it has them, take over from
// the in-place AVX-512 tile (same results). Batch 1 streams the GGUF bytes (fewest bytes, and
// decode is bound by reading them); from 2 rows on the panels win: their tile needs no cross-lane
// reduction, so each further row costs little (matmul_bench --model smollm2 --threads 1, caller
// CPU ms per step on the 2-vCPU EPYC, in place / packed: n=2 10.9 / 8.3, n=4 17.0 / 11.2, n=8
// 29.8 / 21.1; on the AMX Xeon, L2-hot q4_1 1536x576 us, in place / nibble panels: n=1 35.8 /
// 12.7, n=2 51.7 / 20.6, n=4 85.0 / 33.8, n=8 154 / 70).
constexpr int64_t kPackedMinRows = 2;

bool is_dense(DType t) { return t == DType::kF32 || t == DType::kF16 || t == DType::kBF16; }

struct Plan {
  TileFn tile = nullptr;
  ActFormat format = ActFormat::kF32;
  DequantFn dequant = nullptr;  // generic tile only
  size_t act_stride = 0;        // bytes between activation rows as the tile reads them
  int planes = 1;               // activation rows the tile reads per input row (kQ16: 2)
  TileFn amx_tile = nullptr;    // AMX tile for batches of at least kAmxMinRows input rows
  TileFn packed_tile = nullptr; // tile on PackedQ32 panels, for problems that bring them
  TileFn packed_nibble_tile = nullptr;  // the same on nibble panels (PackedQ32::nibbles())
  TileFn packed_amx_tile = nullptr;     // AMX tile on panels (use_packed_amx)
  TileFn packed_amx_nibble_tile = nullptr;
};

Plan make_plan(CpuIsa isa, const KernelSet& ks, DType t, int64_t k, ActQuant mode) {
  Plan p;
  p.act_stride = static_cast<size_t>(k) * sizeof(float);
  if (is_dense(t)) {
    p.tile = ks.f32_tile(t);
    // BF16 weights in the 8-bit mode: bf16 activations and vdpbf16ps, where the CPU has it. Not
    // in kQ16 (the engine's fast path): bf16 activations cost SmolLM2's --dtype bfloat16 golden
    // continuations 18/20 -> 12/20 for 1.8x the tile's multiply-adds per second.
    if (t == DType::kBF16 && mode == ActQuant::kQ8 && isa != CpuIsa::kAvx2 && cpu_has_avx512_bf16()) {
      p.tile = avx512::bf16_tile_fn();
      p.format = ActFormat::kBF16;
      p.act_stride = ActBf16Layout::row_bytes(k);
    }
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
      if ((isa == CpuIsa::kAvx512 || isa == CpuIsa::kAmx) && p.format == ActFormat::kQ8_32 &&
          PackedQ32::supports(t) && cpu_supports(CpuIsa::kAvx512)) {
        p.packed_tile = avx512::packed_q32_tile(false);
        p.packed_nibble_tile = avx512::packed_q32_tile(true);
        if (isa == CpuIsa::kAmx && cpu_supports(CpuIsa::kAmx)) {
          p.packed_amx_tile = amx::packed_q32_tile(false);
          p.packed_amx_nibble_tile = amx::packed_q32_tile(true);
        }
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

// `packed`: the problem's panels, or nullptr for the smallest batch that might use them.
bool use_packed_amx(const Plan& p, int64_t n, const PackedQ32* packed) {
  const bool long_rows = packed != nullptr && packed->k() > kLongRowK;
  return p.packed_amx_tile != nullptr &&
         n * p.planes >= (long_rows ? kPackedAmxMinPlaneRowsLongRows : kPackedAmxMinPlaneRows);
}

// Which tile computes a problem (every choice gives the same bits).
enum class TileKind { kInPlace, kInPlaceAmx, kPanels, kPanelsAmx };

TileKind tile_kind(const Plan& p, const MatmulProblem& q) {
  if (q.packed != nullptr && p.packed_tile != nullptr && q.n >= kPackedMinRows) {
    return use_packed_amx(p, q.n, q.packed) ? TileKind::kPanelsAmx : TileKind::kPanels;
  }
  return use_amx(p, q.n) ? TileKind::kInPlaceAmx : TileKind::kInPlace;
}

int64_t tile_rows(TileKind kind) {
  switch (kind) {
    case TileKind::kPanels: return 2 * kPackedPanelRows;  // the AVX-512 tile takes panel pairs
    case TileKind::kPanelsAmx: return kPackedPanelRows;
    case TileKind::kInPlaceAmx: return kAmxTileRows;
    case TileKind::kInPlace: break;
  }
  return kTileRows;
}

// Input rows the activation buffer holds: the AMX tile on GGUF rows reads whole 16-row groups (the
// one on panels reads only the rows it is given).
int64_t padded_rows(const Plan& p, int64_t n) {
  return use_amx(p, n) ? (n + kAmxTileCols - 1) / kAmxTileCols * kAmxTileCols : n;
}

size_t act_scratch_bytes(const Plan& p, int64_t n) {
  return p.format == ActFormat::kF32 ? 0 : p.act_stride * static_cast<size_t>(p.planes * padded_rows(p, n));
}

// Sized for either AMX tile (whether the problem brings panels or not: matmul_scratch_bytes does
// not know).
size_t per_thread_bytes(const Plan& p, int64_t k, int64_t n) {
  const size_t b = thread_scratch_bytes(k);
  return use_amx(p, n) || use_packed_amx(p, n, nullptr) ? std::max(b, align_up(amx_scratch_bytes(k), 64)) : b;
}

// A tile's weight rows are one contiguous span, and so are consecutive tiles, but a tile walks
// its rows side by side: a few short strided streams that the hardware prefetcher barely learns
// before the next tile starts. At batch 1 (decode) nothing else hides that latency, so each tile
// first asks for the next tile's span (within the same weight).
void prefetch_span(const uint8_t* p, size_t bytes) {
  for (size_t o = 0; o < bytes; o += 64) _mm_prefetch(reinterpret_cast<const char*>(p + o), _MM_HINT_T0);
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

namespace {

// Where each problem of a grouped call lives in scratch and in the shared tile numbering.
struct ProblemIndex {
  size_t act_offset;    // its quantized activation rows, from the start of the activation region
  int64_t tile_begin;   // its first row tile in the call's tile numbering
  int64_t row_begin;    // its first input row among the rows to quantize
  bool shares_rows;     // reads the previous problem's x: its rows are that problem's, not quantized again
};

// Problem i reads the same activation rows as problem i - 1 (a layer's q / k / v, gate / up).
bool same_rows_as_previous(const MatmulProblem* problems, int i) {
  return i > 0 && problems[i].x == problems[i - 1].x && problems[i].n == problems[i - 1].n;
}

size_t index_bytes(int num_problems) {
  return align_up(sizeof(ProblemIndex) * static_cast<size_t>(num_problems + 1), 64);
}

struct GroupedLayout {
  size_t act_bytes = 0;
  size_t per_thread = 0;
};

GroupedLayout grouped_layout(const Plan& plan, const MatmulProblem* problems, int num_problems, int64_t k) {
  GroupedLayout l;
  for (int i = 0; i < num_problems; ++i) {
    if (!same_rows_as_previous(problems, i)) l.act_bytes += act_scratch_bytes(plan, problems[i].n);
    l.per_thread = std::max(l.per_thread, per_thread_bytes(plan, k, problems[i].n));
  }
  return l;
}

}  // namespace

size_t matmul_scratch_bytes(DType wtype, int64_t k, int64_t n, int num_threads, ActQuant mode) {
  const Plan p = make_plan(active_isa(), kernel_set(active_isa()), wtype, k, mode);
  return index_bytes(1) + act_scratch_bytes(p, n) + static_cast<size_t>(std::max(num_threads, 1)) * per_thread_bytes(p, k, n);
}

size_t matmul_grouped_scratch_bytes(const MatmulProblem* problems, int num_problems, DType wtype, int64_t k,
                                    int num_threads, ActQuant mode) {
  const Plan plan = make_plan(active_isa(), kernel_set(active_isa()), wtype, k, mode);
  const GroupedLayout l = grouped_layout(plan, problems, num_problems, k);
  return index_bytes(num_problems) + l.act_bytes + static_cast<size_t>(std::max(num_threads, 1)) * l.per_thread;
}

void matmul_grouped(CpuIsa isa, const MatmulProblem* problems, int num_problems, DType wtype, int64_t k,
                    ThreadPool& pool, ActQuant mode, MatmulScratch& scratch) {
  KVASIR_CHECK_MSG(matmul_supported(wtype, k).ok(), "matmul: unsupported weight type or k");
  KVASIR_CHECK(num_problems >= 0);
  if (num_problems == 0) return;
  const KernelSet& ks = kernel_set(isa);
  const Plan plan = make_plan(isa, ks, wtype, k, mode);
  const size_t rb = *row_bytes(wtype, k);
  const int num_threads = pool.num_threads();
  const GroupedLayout layout = grouped_layout(plan, problems, num_problems, k);
  const size_t head = index_bytes(num_problems);
  auto* base = static_cast<uint8_t*>(
      scratch.get(head + layout.act_bytes + static_cast<size_t>(num_threads) * layout.per_thread));
  auto* index = reinterpret_cast<ProblemIndex*>(base);
  uint8_t* act_base = base + head;
  uint8_t* thread_base = act_base + layout.act_bytes;

  int64_t total_rows = 0, total_tiles = 0, total_macs = 0;
  size_t act_offset = 0;
  for (int i = 0; i < num_problems; ++i) {
    const MatmulProblem& p = problems[i];
    KVASIR_CHECK(p.m >= 0 && p.n >= 0);
    const bool shares = same_rows_as_previous(problems, i);
    index[i] = {shares ? index[i - 1].act_offset : act_offset, total_tiles, total_rows, shares};
    KVASIR_CHECK_MSG(p.packed == nullptr || (p.packed->type() == wtype && p.packed->m() == p.m && p.packed->k() == k),
                     "matmul: packed weights do not match the problem");
    const int64_t rows = tile_rows(tile_kind(plan, p));
    if (p.n > 0) total_tiles += (p.m + rows - 1) / rows;
    total_macs += p.m * k * p.n;
    if (!shares) {
      total_rows += p.n;
      act_offset += act_scratch_bytes(plan, p.n);
    }
  }
  index[num_problems] = {act_offset, total_tiles, total_rows, false};
  if (total_tiles == 0) return;

  const size_t in_stride = static_cast<size_t>(plan.planes) * plan.act_stride;
  if (plan.format != ActFormat::kF32) {
    const bool k32 = plan.format == ActFormat::kQ8_32;
    const QuantActFn quantize =
        plan.format == ActFormat::kBF16 ? avx512::quantize_act_bf16_fn()
        : plan.planes == 2              ? (k32 ? ks.quantize_act32_planes : ks.quantize_actk_planes)
                                        : (k32 ? ks.quantize_act32 : ks.quantize_actk);
    // Rows numbered across all problems; a range finds its first row's problem once.
    auto quantize_rows = [&](int64_t b, int64_t e) {
      int i = static_cast<int>(std::upper_bound(index, index + num_problems + 1, b,
                                                [](int64_t v, const ProblemIndex& x) { return v < x.row_begin; }) -
                               index) - 1;
      for (int64_t g = b; g < e; ++g) {
        while (g >= index[i + 1].row_begin) ++i;
        const int64_t j = g - index[i].row_begin;
        quantize(problems[i].x + j * k, k, act_base + index[i].act_offset + static_cast<size_t>(j) * in_stride);
      }
    };
    if (total_rows > 1 && total_rows * k >= kMinParallelQuantElems) {
      pool.parallel_for(total_rows, quantize_rows);
    } else {
      quantize_rows(0, total_rows);
    }
    for (int i = 0; i < num_problems; ++i) {
      if (index[i].shares_rows || !use_amx(plan, problems[i].n)) continue;
      // The padding rows are read by the tiles, never stored: keep them defined.
      const size_t used = in_stride * static_cast<size_t>(problems[i].n);
      std::memset(act_base + index[i].act_offset + used, 0, act_scratch_bytes(plan, problems[i].n) - used);
    }
  }

  const bool parallel = num_threads > 1 && total_tiles >= 2 && total_macs >= kMinParallelMacs;
  // Row tiles (of every problem, numbered one after another) are handed out in runs of `grain`
  // (about kRunsPerThread per thread) to whichever thread is free: a thread slowed by other load
  // on its core takes fewer runs instead of making the others wait at the end. Results do not
  // depend on who computes what.
  const int64_t grain =
      parallel ? std::max<int64_t>(1, total_tiles / (kRunsPerThread * num_threads)) : total_tiles;
  std::atomic<int64_t> next_tile{0};
  auto body = [&](int share, int) {
    bool used_panels_amx = false;
    TileArgs a;
    a.w_stride = rb;
    a.k = k;
    a.act_stride = plan.act_stride;
    a.scratch = reinterpret_cast<float*>(thread_base + static_cast<size_t>(share) * layout.per_thread);
    a.dequant = plan.dequant;
    a.planes = plan.planes;
    for (;;) {
      int64_t t0 = next_tile.fetch_add(grain, std::memory_order_relaxed);
      if (t0 >= total_tiles) break;
      const int64_t t1 = std::min(t0 + grain, total_tiles);
      int i = static_cast<int>(std::upper_bound(index, index + num_problems + 1, t0,
                                                [](int64_t v, const ProblemIndex& x) { return v < x.tile_begin; }) -
                               index) - 1;
      for (; t0 < t1; ++i) {
        const int64_t end = std::min(t1, index[i + 1].tile_begin);
        if (end <= t0) continue;
        const MatmulProblem& p = problems[i];
        const TileKind kind = tile_kind(plan, p);
        used_panels_amx |= kind == TileKind::kPanelsAmx;
        const bool packed = kind == TileKind::kPanels || kind == TileKind::kPanelsAmx;
        const bool amx = kind == TileKind::kInPlaceAmx;
        const int64_t rows = tile_rows(kind);
        const bool nibbles = packed && p.packed->nibbles();
        const TileFn panel_tile = kind == TileKind::kPanelsAmx
                                      ? (nibbles ? plan.packed_amx_nibble_tile : plan.packed_amx_tile)
                                      : (nibbles ? plan.packed_nibble_tile : plan.packed_tile);
        const TileFn tile = packed ? panel_tile : amx ? plan.amx_tile : plan.tile;
        const uint8_t* act =
            plan.format == ActFormat::kF32 ? reinterpret_cast<const uint8_t*>(p.x) : act_base + index[i].act_offset;
        // Input rows per pass; the tile sees planes * that many activation rows (AMX: whole
        // 16-row groups).
        int64_t chunk =
            std::max<int64_t>(1, static_cast<int64_t>(kActChunkBytes / (plan.planes * plan.act_stride)));
        if (amx) chunk = std::max(kAmxTileCols, chunk / kAmxTileCols * kAmxTileCols);
        a.ldy = p.m;
        if (packed) {
          a.d_offset = p.packed->d_offset();
          a.m_offset = p.packed->stored_m() ? p.packed->m_offset() : 0;
          a.m_from_d = p.packed->m_from_d();
        }
        for (int64_t c0 = 0; c0 < p.n; c0 += chunk) {
          a.act = act + static_cast<size_t>(c0) * in_stride;
          a.nc = std::min(chunk, p.n - c0) * plan.planes;
          for (int64_t t = t0 - index[i].tile_begin; t < end - index[i].tile_begin; ++t) {
            const int64_t r0 = t * rows;
            a.nr = static_cast<int>(std::min(rows, p.m - r0));
            a.y = p.y + c0 * p.m + r0;
            if (packed) {  // panels stream linearly: the hardware prefetcher keeps up
              a.w = p.packed->panel(t * rows / kPackedPanelRows);
              a.panel_bytes = p.packed->panel_bytes();
              tile(a);
              continue;
            }
            a.w = static_cast<const uint8_t*>(p.w) + static_cast<size_t>(r0) * rb;
            const int64_t pf_row = r0 + kPrefetchTiles * rows;
            if (pf_row < p.m) {
              prefetch_span(static_cast<const uint8_t*>(p.w) + static_cast<size_t>(pf_row) * rb,
                            static_cast<size_t>(std::min(rows, p.m - pf_row)) * rb);
            }
            tile(a);
          }
        }
        t0 = end;
      }
    }
    if (used_panels_amx) amx::release_tiles();
  };
  if (parallel) {
    pool.run_on_all(body);
  } else {
    body(0, 1);
  }
}

void matmul_grouped(const MatmulProblem* problems, int num_problems, DType wtype, int64_t k, ThreadPool& pool,
                    ActQuant mode, MatmulScratch& scratch) {
  matmul_grouped(active_isa(), problems, num_problems, wtype, k, pool, mode, scratch);
}

void matmul(CpuIsa isa, const void* w, DType wtype, int64_t m, int64_t k, const float* x, int64_t n, float* y,
            ThreadPool& pool, ActQuant mode, MatmulScratch& scratch, const PackedQ32* packed) {
  KVASIR_CHECK(m >= 0 && n >= 0);
  const MatmulProblem p{w, m, x, n, y, packed};
  matmul_grouped(isa, &p, 1, wtype, k, pool, mode, scratch);
}

void matmul(const void* w, DType wtype, int64_t m, int64_t k, const float* x, int64_t n, float* y, ThreadPool& pool,
            ActQuant mode, MatmulScratch& scratch, const PackedQ32* packed) {
  matmul(active_isa(), w, wtype, m, k, x, n, y, pool, mode, scratch, packed);
}

}  // namespace kvasir::cpu
