// matmul_bench: weight-streaming throughput of cpu::matmul on decode (n=1) and prefill shapes.
// Reports us per call and GB/s of weight bytes. "cold" cycles through enough copies of the weight
// matrix (>= 96 MB, like a whole model) that every call streams from L3/DRAM; "hot" reuses one.
//   matmul_bench [--types q4_1,q8_0] [--threads 1,2] [--n 1,128] [--isa avx2|avx512|amx] [--exact|--q8]
//                [--shapes 576x576,1536x576]  (m x k)  [--packed]: give matmul the weights' packed panels
//                (packed_q32.h) as the CPU backend does; "cold" then streams copies of the panels.
//                The last column is G multiply-adds per second (m k n / the fastest call).
//   matmul_bench --model smollm2|gemma3 [--threads 1,2] [--n 1]: every matmul of one forward step of
//                the model (distinct weights per layer, the GGUF's types), as tokens/s of matmul time.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <ctime>
#include <vector>

#include "backend/cpu/quant/cpu_isa.h"
#include "backend/cpu/quant/matmul.h"
#include "backend/cpu/quant/packed_q32.h"
#include "backend/cpu/quant/quant_test_util.h"
#include "backend/cpu/thread_pool.h"

namespace {

using kvasir::DType;
using kvasir::ThreadPool;
using namespace kvasir::cpu;

const char* mode_name(ActQuant m) { return m == ActQuant::kQ8 ? "q8" : m == ActQuant::kQ16 ? "q16" : "f32"; }

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  size_t b = 0;
  while (b <= s.size()) {
    const size_t e = s.find(',', b);
    out.push_back(s.substr(b, e == std::string::npos ? std::string::npos : e - b));
    if (e == std::string::npos) break;
    b = e + 1;
  }
  return out;
}

DType parse_type(const std::string& s) {
  for (uint32_t id = 0; id < 40; ++id) {
    auto info = kvasir::dtype_info(id);
    if (info && info->name == s) return static_cast<DType>(id);
  }
  std::fprintf(stderr, "unknown type %s\n", s.c_str());
  std::exit(2);
}

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// CPU time of the calling thread: with one thread, robust to other load on the machine.
double thread_cpu_s() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

struct Mat {
  DType type;
  int64_t m, k;
  int count;  // how many such matrices per forward step
};

// The linear layers of one forward step, with the types of the GGUFs in models/.
std::vector<Mat> model_mats(const std::string& name) {
  if (name == "smollm2") {  // SmolLM2-135M-Instruct.Q4_1: 30 layers, hidden 576, ffn 1536, 3 kv heads
    return {{DType::kQ4_1, 576, 576, 60}, {DType::kQ4_1, 192, 576, 60}, {DType::kQ4_1, 1536, 576, 60},
            {DType::kQ4_1, 576, 1536, 30}, {DType::kQ8_0, 49152, 576, 1}};
  }
  if (name == "gemma3") {  // gemma-3-270m Q4_K_M: 18 layers, hidden 640, q 1024, kv 256, ffn 2048
    return {{DType::kQ5_0, 1024, 640, 18}, {DType::kQ5_0, 256, 640, 27}, {DType::kQ8_0, 256, 640, 9},
            {DType::kQ4_K, 640, 1024, 18}, {DType::kQ5_0, 2048, 640, 36}, {DType::kQ4_K, 640, 2048, 9},
            {DType::kQ6_K, 640, 2048, 9},  {DType::kQ8_0, 262144, 640, 1}};
  }
  std::fprintf(stderr, "unknown model %s (smollm2|gemma3)\n", name.c_str());
  std::exit(2);
}

int run_model(const std::string& name, const std::vector<int>& threads, const std::vector<int64_t>& ns, CpuIsa isa,
              ActQuant mode, bool pack) {
  std::mt19937 rng(7);
  struct Layer {
    DType type;
    int64_t m, k;
    std::vector<uint8_t> w;
    size_t group;  // index into model_mats(), for the per-shape breakdown
    std::unique_ptr<PackedQ32> packed;
  };
  const std::vector<Mat> mats = model_mats(name);
  std::vector<Layer> layers;
  size_t total = 0;
  // Interleave the groups like a real forward step (layer by layer), so caches see the same mix.
  int max_count = 0;
  for (const Mat& mat : mats) max_count = std::max(max_count, mat.count);
  for (int i = 0; i < max_count; ++i) {
    for (size_t g = 0; g < mats.size(); ++g) {
      const Mat& mat = mats[g];
      if (i * mat.count / max_count == (i + 1) * mat.count / max_count) continue;
      layers.push_back({mat.type, mat.m, mat.k, testing::random_weights(mat.type, mat.m, mat.k, rng), g, nullptr});
      if (pack && PackedQ32::supports(mat.type)) {
        layers.back().packed = PackedQ32::pack(layers.back().w.data(), mat.type, mat.m, mat.k);
      }
      total += layers.back().w.size();
    }
  }
  std::printf("model=%s isa=%s mode=%s: %zu matmuls, %.1f MB of weights per step\n", name.c_str(),
              std::string(isa_name(isa)).c_str(), mode_name(mode), layers.size(), total / 1e6);
  for (int64_t n : ns) {
    const std::vector<float> x = testing::random_floats(static_cast<size_t>(n) * 2048, rng);
    std::vector<float> y(static_cast<size_t>(n) * 262144);
    for (int th : threads) {
      ThreadPool pool(th);
      MatmulScratch scratch;
      std::vector<double> times, cpu_times;
      std::vector<double> group_cpu(mats.size(), 0.0);
      const double t_end = now_s() + 3.0;
      for (int it = 0; it < 200 && (it < 5 || now_s() < t_end); ++it) {
        const double t0 = now_s(), c0 = thread_cpu_s();
        for (const Layer& l : layers) {
          const double g0 = th == 1 ? thread_cpu_s() : 0;
          matmul(isa, l.w.data(), l.type, l.m, l.k, x.data(), n, y.data(), pool, mode, scratch, l.packed.get());
          if (th == 1 && it > 0) group_cpu[l.group] += thread_cpu_s() - g0;
        }
        times.push_back(now_s() - t0);
        cpu_times.push_back(thread_cpu_s() - c0);
      }
      if (th == 1) {
        for (size_t g = 0; g < mats.size(); ++g) {
          const double per_step = group_cpu[g] / static_cast<double>(times.size() - 1);
          const double bytes = static_cast<double>(*kvasir::row_bytes(mats[g].type, mats[g].k)) *
                               static_cast<double>(mats[g].m) * mats[g].count;
          std::printf("  %-5s %6lldx%-5lld x%-3d cpu %7.3f ms/step  %6.2f GB/s\n",
                      std::string(kvasir::dtype_name(mats[g].type)).c_str(), static_cast<long long>(mats[g].m),
                      static_cast<long long>(mats[g].k), mats[g].count, per_step * 1e3, bytes / per_step / 1e9);
        }
      }
      times.erase(times.begin());  // warm-up
      cpu_times.erase(cpu_times.begin());
      std::sort(times.begin(), times.end());
      std::sort(cpu_times.begin(), cpu_times.end());
      const double best = times.front(), med = times[times.size() / 2], cpu = cpu_times.front();
      std::printf("n=%lld threads=%d: best %.2f ms (%.1f steps/s, %.2f GB/s), median %.2f ms (%.1f steps/s)",
                  static_cast<long long>(n), th, best * 1e3, 1 / best, total / best / 1e9, med * 1e3, 1 / med);
      if (th == 1) std::printf(", caller cpu %.2f ms (%.1f steps/s)", cpu * 1e3, 1 / cpu);
      std::printf("\n");
      std::fflush(stdout);
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> types = {"q4_1", "q8_0"};
  std::vector<int> threads = {1, 2};
  std::vector<int64_t> ns = {1, 128};
  std::vector<std::pair<int64_t, int64_t>> shapes = {{576, 576}, {1536, 576}, {576, 1536}, {49152, 576}};
  CpuIsa isa = active_isa();
  ActQuant mode = ActQuant::kQ16;
  std::string model;
  bool pack = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const std::string v = i + 1 < argc ? argv[i + 1] : "";
    if (a == "--types") { types = split(v); ++i; }
    else if (a == "--threads") { threads.clear(); for (auto& t : split(v)) threads.push_back(std::stoi(t)); ++i; }
    else if (a == "--n") { ns.clear(); for (auto& t : split(v)) ns.push_back(std::stoll(t)); ++i; }
    else if (a == "--isa") { isa = v == "avx2" ? CpuIsa::kAvx2 : v == "amx" ? CpuIsa::kAmx : CpuIsa::kAvx512; ++i; }
    else if (a == "--exact") { mode = ActQuant::kF32; }
    else if (a == "--q8") { mode = ActQuant::kQ8; }
    else if (a == "--packed") { pack = true; }
    else if (a == "--model") { model = v; ++i; }
    else if (a == "--shapes") {
      shapes.clear();
      for (auto& t : split(v)) shapes.emplace_back(std::stoll(t.substr(0, t.find('x'))), std::stoll(t.substr(t.find('x') + 1)));
      ++i;
    } else { std::fprintf(stderr, "unknown flag %s\n", a.c_str()); return 2; }
  }
  if (!cpu_supports(isa)) isa = CpuIsa::kAvx2;
  if (!model.empty()) return run_model(model, threads, ns, isa, mode, pack);
  std::printf("isa=%s mode=%s\n", std::string(isa_name(isa)).c_str(), mode_name(mode));
  std::printf("%-6s %6s %6s %5s %3s | %10s %8s | %10s %8s | %10s %8s | %10s %8s | %7s\n", "type", "m", "k", "n",
              "thr", "hot us", "GB/s", "cold us", "GB/s", "cpu us", "GB/s", "min us", "GB/s", "GMAC/s");
  std::mt19937 rng(42);
  for (const std::string& tn : types) {
    const DType t = parse_type(tn);
    for (const auto& shape : shapes) {
      const int64_t m = shape.first, k = shape.second;
      if (!matmul_supported(t, k).ok()) continue;
      const size_t bytes = *kvasir::row_bytes(t, k) * static_cast<size_t>(m);
      const size_t copies = std::max<size_t>(1, (size_t{96} << 20) / bytes);
      std::vector<uint8_t> one = testing::random_weights(t, m, k, rng);
      std::vector<uint8_t> all(bytes * copies);
      for (size_t c = 0; c < copies; ++c) std::memcpy(all.data() + c * bytes, one.data(), bytes);
      // Packed copies of the same weights: one per GGUF copy, so "cold" streams panels too.
      std::vector<std::unique_ptr<PackedQ32>> packs;
      if (pack && PackedQ32::supports(t)) {
        const size_t pack_copies = std::max<size_t>(1, copies * bytes / PackedQ32::pack(one.data(), t, m, k)->bytes());
        for (size_t c = 0; c < pack_copies; ++c) packs.push_back(PackedQ32::pack(one.data(), t, m, k));
      }
      for (int64_t n : ns) {
        const std::vector<float> x = testing::random_floats(static_cast<size_t>(n * k), rng);
        std::vector<float> y(static_cast<size_t>(n * m));
        for (int th : threads) {
          ThreadPool pool(th);
          MatmulScratch scratch;
          auto run = [&](const uint8_t* w) {
            // The packed copy that goes with GGUF copy w ("one": the first).
            const size_t c = w == one.data() ? 0 : static_cast<size_t>(w - all.data()) / bytes;
            const PackedQ32* pw = packs.empty() ? nullptr : packs[c % packs.size()].get();
            matmul(isa, w, t, m, k, x.data(), n, y.data(), pool, mode, scratch, pw);
          };
          double res[2], cpu = 1e30, fastest = 1e30;
          for (int cold = 0; cold < 2; ++cold) {
            for (int i = 0; i < 3; ++i) run(one.data());
            // Several timed batches; report the best batch (least disturbed by other load).
            const double budget = 0.25;
            double best = 1e30;
            size_t idx = 0;
            for (int batch = 0; batch < 5; ++batch) {
              int iters = 0;
              const double t0 = now_s(), c0 = thread_cpu_s();
              double t1 = t0;
              while (t1 - t0 < budget / 5 || iters < 3) {
                const double t_call = t1;
                run(cold ? all.data() + (idx++ % copies) * bytes : one.data());
                ++iters;
                t1 = now_s();
                // The fastest single call: a call the OS did not interrupt (short calls only).
                if (!cold) fastest = std::min(fastest, t1 - t_call);
              }
              best = std::min(best, (t1 - t0) / iters);
              if (!cold) cpu = std::min(cpu, (thread_cpu_s() - c0) / iters);
            }
            res[cold] = best;
          }
          // Thread CPU time means nothing once work runs on other threads too.
          if (th > 1) cpu = 0;
          std::printf("%-6s %6lld %6lld %5lld %3d | %10.2f %8.2f | %10.2f %8.2f | %10.2f %8.2f | %10.2f %8.2f | %7.1f\n",
                      tn.c_str(), static_cast<long long>(m), static_cast<long long>(k), static_cast<long long>(n), th,
                      res[0] * 1e6, bytes / res[0] / 1e9, res[1] * 1e6, bytes / res[1] / 1e9, cpu * 1e6,
                      cpu > 0 ? bytes / cpu / 1e9 : 0.0, fastest * 1e6, bytes / fastest / 1e9,
                      static_cast<double>(m * k * n) / fastest / 1e9);
          std::fflush(stdout);
        }
      }
    }
  }
  return 0;
}
