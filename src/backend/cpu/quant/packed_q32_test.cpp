#include "backend/cpu/quant/packed_q32.h"

#include <gtest/gtest.h>

#include <sys/mman.h>
#include <unistd.h>

#include <cstring>
#include <random>
#include <vector>

#include "backend/cpu/quant/kernels.h"
#include "backend/cpu/quant/matmul.h"
#include "backend/cpu/quant/quant_test_util.h"
#include "quant/block_formats.h"
#include "quant/dequantize.h"

namespace kvasir::cpu {
namespace {

using quant::bits_from_f32;
using testing::random_floats;
using testing::random_weights;

constexpr DType kTypes[] = {DType::kQ4_0, DType::kQ4_1, DType::kQ5_0, DType::kQ5_1, DType::kQ8_0};

// Every panel value, scaled as the kernel scales it (dw * u + mw), is the GGUF weight.
TEST(PackedQ32, PanelsHoldTheDequantizedWeights) {
  std::mt19937 rng(11);
  const int64_t m = 21, k = 96;
  for (DType t : kTypes) {
    const std::vector<uint8_t> w = random_weights(t, m, k, rng);
    const std::unique_ptr<PackedQ32> p = PackedQ32::pack(w.data(), t, m, k);
    ASSERT_EQ(p->bytes(), 2 * p->panel_bytes());
    std::vector<float> ref(static_cast<size_t>(k));
    for (int64_t r = 0; r < 32; ++r) {
      if (r < m) quant::dequantize_row(t, w.data() + r * *row_bytes(t, k), ref.data(), k);
      for (int64_t i = 0; i < k; ++i) {
        const uint8_t* panel = p->panel(r / 16);
        const uint8_t* blk = panel + (i / 32) * p->value_bytes();
        const int64_t e = i % 32;
        // Nibble panels: values e and e + 16 share a byte (low, high nibble) at e's 8-bit place.
        const bool nib = PackedQ32::nibble_layout(t);
        ASSERT_EQ(p->nibbles(), nib);
        const int64_t at = nib ? e % 16 : e;
        const uint8_t byte = blk[64 * (at / 4) + 4 * (r % 16) + at % 4];
        const uint8_t u = nib ? static_cast<uint8_t>(e < 16 ? byte & 0x0f : byte >> 4) : byte;
        const size_t scale = (i / 32) * kPackedScaleBytes + 2 * (r % 16);
        quant::fp16_t d16 = 0, m16 = 0;
        std::memcpy(&d16, panel + p->d_offset() + scale, 2);
        if (p->stored_m()) std::memcpy(&m16, panel + p->m_offset() + scale, 2);
        const float dw = quant::fp16_to_f32(d16);
        const float mw = p->stored_m() ? quant::fp16_to_f32(m16) : dw * p->m_from_d();
        if (r >= m) {  // padding rows: zero weights and scales
          ASSERT_EQ(u, 0);
          ASSERT_EQ(dw, 0.0f);
          ASSERT_EQ(mw, 0.0f);
          continue;
        }
        ASSERT_FLOAT_EQ(dw * static_cast<float>(u) + mw, ref[i]) << dtype_name(t) << " row " << r << " col " << i;
      }
    }
  }
}

// A batch reads no more memory than decode: the 4- and 8-bit types' panels are their GGUF bytes
// rearranged (the 5-bit types widen to int8, ~1.5x).
TEST(PackedQ32, PanelsOfQ4AndQ8HoldExactlyTheGgufBytes) {
  std::mt19937 rng(3);
  const int64_t m = 48, k = 576;
  for (DType t : kTypes) {
    const std::vector<uint8_t> w = random_weights(t, m, k, rng);
    const size_t gguf = static_cast<size_t>(m) * *row_bytes(t, k);
    const size_t bytes = PackedQ32::pack(w.data(), t, m, k)->bytes();
    if (t == DType::kQ5_0 || t == DType::kQ5_1) {  // int8 values and fp16 d (and m) per row and block
      EXPECT_EQ(bytes, static_cast<size_t>(m * (k / 32)) * (32 + (t == DType::kQ5_1 ? 4 : 2))) << dtype_name(t);
    } else {
      EXPECT_EQ(bytes, gguf) << dtype_name(t);
    }
  }
}

// Batches on the packed panels give the in-place AVX-512 tile's bits at every shape: a row's
// result must not depend on the batch size that picked the kernel (batched == single).
TEST(PackedQ32, MatmulOnPanelsMatchesInPlaceBitwise) {
  if (!cpu_supports(CpuIsa::kAvx512)) GTEST_SKIP() << "no AVX-512 VNNI on this machine: the packed tile cannot run";
  std::mt19937 rng(2026);
  ThreadPool pool1(1), pool2(2);
  MatmulScratch scratch;
  const int64_t ks[] = {32, 64, 96, 128, 160, 576, 1536};
  const int64_t fixed_n[] = {2, 3, 16, 300, 31, 5, 64};
  int cases = 0;
  for (DType t : kTypes) {
    for (int it = 0; it < 10; ++it) {
      const int64_t k = ks[it % 7];
      const int64_t m = 1 + static_cast<int64_t>(rng() % 70);
      const int64_t n = it < 7 ? fixed_n[it] : 2 + static_cast<int64_t>(rng() % 200);
      const std::vector<uint8_t> w = random_weights(t, m, k, rng);
      const std::unique_ptr<PackedQ32> p = PackedQ32::pack(w.data(), t, m, k);
      std::vector<float> x = random_floats(static_cast<size_t>(n * k), rng);
      for (int64_t i = 0; i < k && n > 2; ++i) {  // rows of large and tiny magnitude: scales vary widely
        x[static_cast<size_t>(k + i)] *= 1000.0f;
        x[static_cast<size_t>(2 * k + i)] *= 1e-3f;
      }
      for (ActQuant mode : {ActQuant::kQ8, ActQuant::kQ16}) {
        std::vector<float> ya(static_cast<size_t>(n * m)), yb(static_cast<size_t>(n * m));
        matmul(CpuIsa::kAvx512, w.data(), t, m, k, x.data(), n, yb.data(), pool2, mode, scratch);
        // AMX machines run panels below 32 rows and the AMX tile (on the GGUF bytes) above.
        for (CpuIsa isa : {CpuIsa::kAvx512, CpuIsa::kAmx}) {
          if (!cpu_supports(isa)) continue;
          matmul(isa, w.data(), t, m, k, x.data(), n, ya.data(), it % 2 ? pool1 : pool2, mode, scratch, p.get());
          for (size_t i = 0; i < ya.size(); ++i) {
            ASSERT_EQ(bits_from_f32(ya[i]), bits_from_f32(yb[i]))
                << dtype_name(t) << " isa=" << isa_name(isa) << " m=" << m << " k=" << k << " n=" << n
                << " mode=" << static_cast<int>(mode) << " row " << i / m << " out " << i % m << ": " << ya[i]
                << " vs " << yb[i];
          }
        }
        ++cases;
      }
    }
  }
  EXPECT_EQ(cases, 100);
}

// The panels are what batches read (so the bitwise test above compares two kernels, not one with
// itself): panels of another matrix give that matrix's product from 2 input rows on; a single
// row (decode) reads the GGUF bytes.
TEST(PackedQ32, BatchesReadThePanelsAndDecodeTheGgufBytes) {
  if (!cpu_supports(CpuIsa::kAvx512)) GTEST_SKIP() << "no AVX-512 VNNI on this machine: the packed tile cannot run";
  std::mt19937 rng(5);
  ThreadPool pool(2);
  MatmulScratch scratch;
  const DType t = DType::kQ4_1;
  const int64_t m = 40, k = 128;
  const std::vector<uint8_t> w = random_weights(t, m, k, rng), other = random_weights(t, m, k, rng);
  const std::unique_ptr<PackedQ32> p = PackedQ32::pack(other.data(), t, m, k);
  for (int64_t n : {int64_t{1}, int64_t{2}, int64_t{7}, int64_t{20}}) {
    const std::vector<float> x = random_floats(static_cast<size_t>(n * k), rng);
    std::vector<float> got(static_cast<size_t>(n * m)), want(got.size());
    matmul(CpuIsa::kAvx512, w.data(), t, m, k, x.data(), n, got.data(), pool, ActQuant::kQ16, scratch, p.get());
    matmul(CpuIsa::kAvx512, (n >= 2 ? other : w).data(), t, m, k, x.data(), n, want.data(), pool, ActQuant::kQ16,
           scratch);
    for (size_t i = 0; i < got.size(); ++i) ASSERT_EQ(bits_from_f32(got[i]), bits_from_f32(want[i])) << "n=" << n;
  }
}

// matmul_grouped with packed problems equals one matmul call per problem.
TEST(PackedQ32, GroupedWithPanelsEqualsOneCallPerProblem) {
  if (!cpu_supports(CpuIsa::kAvx512)) GTEST_SKIP() << "no AVX-512 VNNI on this machine: the packed tile cannot run";
  std::mt19937 rng(9);
  ThreadPool pool(2);
  MatmulScratch scratch;
  const DType t = DType::kQ8_0;
  const int64_t k = 160;
  const int64_t ms[] = {5, 37, 17, 64};
  const int64_t ns[] = {9, 1, 40, 0};
  std::vector<std::vector<uint8_t>> ws;
  std::vector<std::unique_ptr<PackedQ32>> ps;
  std::vector<std::vector<float>> xs, grouped(4), single(4);
  MatmulProblem problems[4];
  for (int i = 0; i < 4; ++i) {
    ws.push_back(random_weights(t, ms[i], k, rng));
    ps.push_back(PackedQ32::pack(ws[i].data(), t, ms[i], k));
    xs.push_back(random_floats(static_cast<size_t>(ns[i] * k), rng));
    grouped[i].assign(static_cast<size_t>(ns[i] * ms[i]), -1.0f);
    single[i].assign(grouped[i].size(), -2.0f);
    problems[i] = {ws[i].data(), ms[i], xs[i].data(), ns[i], grouped[i].data(), ps[i].get()};
    matmul(CpuIsa::kAvx512, ws[i].data(), t, ms[i], k, xs[i].data(), ns[i], single[i].data(), pool, ActQuant::kQ16,
           scratch);
  }
  matmul_grouped(CpuIsa::kAvx512, problems, 4, t, k, pool, ActQuant::kQ16, scratch);
  for (int i = 0; i < 4; ++i) {
    for (size_t j = 0; j < grouped[i].size(); ++j) {
      ASSERT_EQ(bits_from_f32(grouped[i][j]), bits_from_f32(single[i][j])) << "problem " << i << " element " << j;
    }
  }
}

// Activation rows that end exactly at an inaccessible page: a tile that reads a row past the ones
// it is given (the AMX panel tile takes no padding) faults instead of passing by luck.
class GuardedRows {
 public:
  explicit GuardedRows(size_t bytes) {
    const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
    len_ = (bytes + page - 1) / page * page + page;
    base_ = static_cast<uint8_t*>(mmap(nullptr, len_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
    EXPECT_NE(base_, MAP_FAILED);
    EXPECT_EQ(mprotect(base_ + len_ - page, page, PROT_NONE), 0);
    rows_ = base_ + len_ - page - bytes;
  }
  ~GuardedRows() { munmap(base_, len_); }
  uint8_t* rows() const { return rows_; }

 private:
  uint8_t* base_;
  uint8_t* rows_;
  size_t len_;
};

constexpr int64_t kSmallBatchNs[] = {2, 3, 4, 7, 8, 9, 15, 16, 17, 31};

// The AMX tile on panels gives the AVX-512 panel tile's bits, called directly (whichever batch
// sizes matmul picks it for): every type, 1 and 2 planes, small batches around its 16-row tiles,
// a partial last panel (m = 37), k from one block to 48.
TEST(PackedQ32, AmxTileOnPanelsGivesTheAvx512PanelTileBits) {
  if (!cpu_supports(CpuIsa::kAmx)) GTEST_SKIP() << "no usable AMX-INT8 on this machine (cpuid or OS permission)";
  std::mt19937 rng(77);
  const int64_t m = 37;
  const KernelSet& ks = kernel_set(CpuIsa::kAvx512);
  int cases = 0;
  for (DType t : kTypes) {
    for (int64_t k : {int64_t{32}, int64_t{576}, int64_t{1536}}) {
      const std::vector<uint8_t> w = random_weights(t, m, k, rng);
      const std::unique_ptr<PackedQ32> p = PackedQ32::pack(w.data(), t, m, k);
      const TileFn amx_tile = amx::packed_q32_tile(p->nibbles());
      const TileFn avx_tile = avx512::packed_q32_tile(p->nibbles());
      ASSERT_NE(amx_tile, nullptr);
      std::vector<float> amx_scratch(amx_scratch_bytes(k) / sizeof(float) + 16);
      std::vector<float> avx_scratch(tile_scratch_floats(k) + 16);
      for (int planes : {1, 2}) {
        const size_t stride = Act32Layout::row_bytes(k);
        for (int64_t n : kSmallBatchNs) {
          std::vector<float> x = random_floats(static_cast<size_t>(n * k), rng);
          for (int64_t i = 0; i < k; ++i) x[static_cast<size_t>(k + i)] *= 1000.0f;  // scales vary widely
          GuardedRows act(stride * static_cast<size_t>(planes * n));
          for (int64_t j = 0; j < n; ++j) {
            uint8_t* row = act.rows() + static_cast<size_t>(j * planes) * stride;
            (planes == 2 ? ks.quantize_act32_planes : ks.quantize_act32)(x.data() + j * k, k, row);
          }
          std::vector<float> ya(static_cast<size_t>(n * m), -1.0f), yb(ya.size(), -2.0f);
          for (int64_t panel = 0; panel * kPackedPanelRows < m; ++panel) {
            TileArgs a;
            a.w = p->panel(panel);
            a.w_stride = 0;
            a.nr = static_cast<int>(std::min<int64_t>(kPackedPanelRows, m - panel * kPackedPanelRows));
            a.k = k;
            a.act = act.rows();
            a.act_stride = stride;
            a.nc = n * planes;
            a.planes = planes;
            a.ldy = m;
            a.d_offset = p->d_offset();
            a.m_offset = p->stored_m() ? p->m_offset() : 0;
            a.m_from_d = p->m_from_d();
            a.scratch = reinterpret_cast<float*>(align_up(reinterpret_cast<uintptr_t>(amx_scratch.data()), 64));
            a.y = ya.data() + panel * kPackedPanelRows;
            amx_tile(a);
            a.scratch = reinterpret_cast<float*>(align_up(reinterpret_cast<uintptr_t>(avx_scratch.data()), 64));
            a.y = yb.data() + panel * kPackedPanelRows;
            avx_tile(a);
          }
          amx::release_tiles();
          for (size_t i = 0; i < ya.size(); ++i) {
            ASSERT_EQ(bits_from_f32(ya[i]), bits_from_f32(yb[i]))
                << dtype_name(t) << " k=" << k << " n=" << n << " planes=" << planes << " row " << i / m << " out "
                << i % m << ": " << ya[i] << " vs " << yb[i];
          }
          ++cases;
        }
      }
    }
  }
  EXPECT_EQ(cases, 5 * 3 * 2 * 10);
}

// Through matmul: an AMX host's choice among its panel tiles (and their scratch and activation
// sizing) gives the AVX-512 host's bits at the same batches, both thread counts.
TEST(PackedQ32, AmxHostMatmulOnPanelsGivesTheAvx512HostBits) {
  if (!cpu_supports(CpuIsa::kAmx)) GTEST_SKIP() << "no usable AMX-INT8 on this machine (cpuid or OS permission)";
  std::mt19937 rng(78);
  ThreadPool pool1(1), pool2(2);
  MatmulScratch scratch;
  const int64_t m = 53;
  int cases = 0;
  for (DType t : kTypes) {
    for (int64_t k : {int64_t{32}, int64_t{576}, int64_t{1536}}) {
      const std::vector<uint8_t> w = random_weights(t, m, k, rng);
      const std::unique_ptr<PackedQ32> p = PackedQ32::pack(w.data(), t, m, k);
      for (ActQuant mode : {ActQuant::kQ8, ActQuant::kQ16}) {
        for (int64_t n : kSmallBatchNs) {
          const std::vector<float> x = random_floats(static_cast<size_t>(n * k), rng);
          std::vector<float> ya(static_cast<size_t>(n * m)), yb(ya.size());
          matmul(CpuIsa::kAmx, w.data(), t, m, k, x.data(), n, ya.data(), n % 2 ? pool1 : pool2, mode, scratch,
                 p.get());
          matmul(CpuIsa::kAvx512, w.data(), t, m, k, x.data(), n, yb.data(), pool2, mode, scratch, p.get());
          for (size_t i = 0; i < ya.size(); ++i) {
            ASSERT_EQ(bits_from_f32(ya[i]), bits_from_f32(yb[i]))
                << dtype_name(t) << " k=" << k << " n=" << n << " mode=" << static_cast<int>(mode) << " row "
                << i / m << " out " << i % m;
          }
          ++cases;
        }
      }
    }
  }
  EXPECT_EQ(cases, 5 * 3 * 2 * 10);
}

}  // namespace
}  // namespace kvasir::cpu
