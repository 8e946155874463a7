// Test-only: runs a model split over N ranks (forked processes over the shm communicator, or TCP
// on loopback) and unsplit, greedy on the same prompts, and compares every step's logits
// (relative L2 < 1e-5 with exact matmuls), the greedy tokens, and that every rank gathered the
// same logits bit for bit. Shared by the tensor-parallel tests of model/ and tests/.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "backend/cpu/cpu_backend.h"
#include "common/json.h"
#include "common/mapped_file.h"
#include "dist/communicator_test_util.h"
#include "dist/shm_communicator.h"
#include "dist/tcp_communicator.h"
#include "loader/dummy_weights.h"
#include "loader/weight_source.h"
#include "model/decoder_model.h"
#include "model/registry.h"
#include "model/tensor_parallel.h"

namespace kvasir::tp_testing {

constexpr int kBlockSize = 16;

// The batches of one sequence: its prompt, then one token per decode step.
struct Sequence {
  std::vector<int32_t> ids, positions, qsl, seq_lens, blocks, last;
  std::vector<int64_t> slots;
  ForwardBatch batch;

  // Rows [begin, end) of `ids` as one step, the sequence's earlier tokens already cached.
  void step(int begin, int end) {
    positions.clear();
    slots.clear();
    for (int p = begin; p < end; ++p) {
      positions.push_back(p);
      slots.push_back(p);
    }
    blocks.clear();
    for (int b = 0; b * kBlockSize < end; ++b) blocks.push_back(b);
    qsl = {0, end - begin};
    seq_lens = {end};
    last = {end - begin - 1};
    batch = ForwardBatch{};
    batch.num_tokens = end - begin;
    batch.input_ids = ids.data() + begin;
    batch.positions = positions.data();
    batch.attn.num_seqs = 1;
    batch.attn.num_tokens = end - begin;
    batch.attn.query_start_loc = qsl.data();
    batch.attn.seq_lens = seq_lens.data();
    batch.attn.block_tables = blocks.data();
    batch.attn.max_blocks_per_seq = static_cast<int>(blocks.size());
    batch.attn.slot_mapping = slots.data();
    batch.attn.block_size = kBlockSize;
    batch.num_logits = 1;
    batch.logits_indices = last.data();
  }
};

struct SplitRun {
  std::string path;
  int tp = 2;
  std::vector<std::vector<int32_t>> prompts;
  int decode_steps = 8;
  bool tcp = false;
  bool expert_parallel = false;  // --enable-expert-parallel: whole experts per rank
  // When set: the model of this HF config.json text with deterministic dummy weights
  // (--load-format dummy), for shapes no tiny checkpoint has; `path` only names it.
  std::string dummy_config;
};

// The run's weights and config: its checkpoint, or its dummy model.
struct RunModel {
  std::unique_ptr<WeightSource> weights;
  ModelConfig config;
};
inline StatusOr<RunModel> open_run_model(const SplitRun& run) {
  RunModel m;
  if (run.dummy_config.empty()) {
    KVASIR_ASSIGN_OR_RETURN(m.weights, open_weights(run.path));
    KVASIR_ASSIGN_OR_RETURN(m.config, load_model_config(*m.weights));
    return m;
  }
  KVASIR_ASSIGN_OR_RETURN(Json j, parse_json(run.dummy_config));
  KVASIR_ASSIGN_OR_RETURN(m.config, model_config_from_hf_json(j, nullptr));
  KVASIR_ASSIGN_OR_RETURN(auto specs, dummy_weight_specs_for(m.config, /*matrices_on_device=*/false));
  KVASIR_ASSIGN_OR_RETURN(m.weights, open_dummy_weights(std::move(specs), /*seed=*/7, run.path));
  return m;
}

inline int longest(const SplitRun& run) {
  size_t n = 0;
  for (const auto& p : run.prompts) n = std::max(n, p.size());
  return static_cast<int>(n) + run.decode_steps + 1;
}

inline std::string tiny(const std::string& name) {
  return std::string(KVASIR_SOURCE_DIR) + "/tests/data/tiny/" + name;
}

// The token ids of a tiny model's golden prompts (tests/data/tiny/<name>/golden.json).
inline std::vector<std::vector<int32_t>> golden_prompts(const std::string& name) {
  std::vector<std::vector<int32_t>> out;
  auto text = read_text_file(tiny(name) + "/golden.json", 1u << 20);
  EXPECT_TRUE(text.ok()) << text.status().to_string();
  if (!text.ok()) return out;
  auto j = parse_json(*text);
  EXPECT_TRUE(j.ok());
  if (!j.ok()) return out;
  for (const Json& p : j->find("prompts")->as_array()) {
    out.emplace_back();
    for (const Json& id : p.find("ids")->as_array()) out.back().push_back(static_cast<int32_t>(id.as_int()));
  }
  return out;
}

// Greedy generation of every prompt: the logits of every step ([prompts, steps + 1, vocab] into
// `logits`) and the tokens ([prompts, steps + 1]).
inline Status generate(const SplitRun& run, TensorParallelGroup tp, float* logits, int32_t* tokens) {
  KVASIR_ASSIGN_OR_RETURN(RunModel run_model, open_run_model(run));
  const ModelConfig& config = run_model.config;
  const auto& weights = run_model.weights;
  CpuBackendOptions bo;
  bo.num_threads = 1;
  // kExact: the fast path quantizes activations per block, where a reduction-order difference of
  // one ulp can flip a rounding and move a logit far past float32 bounds.
  bo.precision = MatmulPrecision::kExact;
  CpuBackend backend(bo);
  ModelOptions mo;
  mo.max_num_tokens = longest(run);
  mo.max_num_logits = 4;
  mo.tp = tp;
  KVASIR_ASSIGN_OR_RETURN(auto model, DecoderModel::create(config, *weights, backend, mo));
  const int blocks = (longest(run) + kBlockSize - 1) / kBlockSize;
  KVASIR_ASSIGN_OR_RETURN(KvCache cache, model->allocate_kv_cache(blocks, kBlockSize));
  const int64_t vocab = config.vocab_size, steps = run.decode_steps + 1;
  for (size_t p = 0; p < run.prompts.size(); ++p) {
    Sequence s;  // each prompt from position 0: it overwrites the previous one's slots
    s.ids = run.prompts[p];
    int begin = 0;
    for (int step = 0; step < steps; ++step) {
      s.step(begin, static_cast<int>(s.ids.size()));
      begin = static_cast<int>(s.ids.size());
      float* row = logits + (static_cast<int64_t>(p) * steps + step) * vocab;
      KVASIR_RETURN_IF_ERROR(model->forward(s.batch, cache, row));
      const int32_t next = static_cast<int32_t>(std::max_element(row, row + vocab) - row);
      tokens[static_cast<int64_t>(p) * steps + step] = next;
      s.ids.push_back(next);
    }
  }
  return Status();
}

inline double rel_l2(const float* a, const float* b, size_t n) {
  double num = 0, den = 0;
  for (size_t i = 0; i < n; ++i) {
    num += (double{a[i]} - b[i]) * (double{a[i]} - b[i]);
    den += double{b[i]} * b[i];
  }
  return std::sqrt(num / den);
}

// The group's communicator for one rank: shared memory, or TCP on loopback (rank 0 listens on the
// socket the parent bound before forking).
inline StatusOr<std::unique_ptr<dist::Communicator>> make_comm(bool tcp, int listen_fd, int port,
                                                               const std::string& group, int rank, int size) {
  if (tcp) {
    dist::TcpCommunicatorOptions o;
    o.master_port = port;
    o.listen_fd = rank == 0 ? dup(listen_fd) : -1;
    o.group_id = group;
    o.rank = rank;
    o.world_size = size;
    KVASIR_ASSIGN_OR_RETURN(auto c, dist::TcpCommunicator::create(o));
    return std::unique_ptr<dist::Communicator>(std::move(c));
  }
  dist::ShmCommunicatorOptions o;
  o.group_id = group;
  o.rank = rank;
  o.world_size = size;
  KVASIR_ASSIGN_OR_RETURN(auto c, dist::ShmCommunicator::create(o));
  return std::unique_ptr<dist::Communicator>(std::move(c));
}

// Runs the model split over run.tp ranks and unsplit, and compares every step's logits and tokens.
inline void expect_split_equals_whole(const SplitRun& run) {
  auto model = open_run_model(run);
  ASSERT_TRUE(model.ok()) << run.path << ": " << model.status().to_string();
  const ModelConfig* config = &model->config;
  const int tp = run.tp;
  const size_t vocab = static_cast<size_t>(config->vocab_size);
  const size_t rows = run.prompts.size() * static_cast<size_t>(run.decode_steps + 1);
  const size_t per_rank = rows * vocab * sizeof(float) + rows * sizeof(int32_t);
  // Each rank writes its logits and tokens here; the parent reads them after the ranks exit.
  void* shared = mmap(nullptr, per_rank * tp, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(shared, MAP_FAILED);
  auto logits_of = [&](int r) { return reinterpret_cast<float*>(static_cast<uint8_t*>(shared) + per_rank * r); };
  auto tokens_of = [&](int r) { return reinterpret_cast<int32_t*>(logits_of(r) + rows * vocab); };
  const std::string group = "tp-test-" + std::to_string(getpid()) + "-" + std::to_string(tp);
  int listen_fd = -1, port = 0;
  if (run.tcp) {
    listen_fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(addr);
    ASSERT_EQ(bind(listen_fd, reinterpret_cast<sockaddr*>(&addr), len), 0);
    ASSERT_EQ(listen(listen_fd, 16), 0);
    ASSERT_EQ(getsockname(listen_fd, reinterpret_cast<sockaddr*>(&addr), &len), 0);
    port = ntohs(addr.sin_port);
  }
  const auto codes = dist::testing::run_ranks(tp, [&](int rank) {
    auto comm = make_comm(run.tcp, listen_fd, port, group, rank, tp);
    if (!comm.ok()) {
      std::fprintf(stderr, "rank %d: %s\n", rank, comm.status().to_string().c_str());
      return 1;
    }
    Status s = generate(run, TensorParallelGroup{rank, tp, comm->get(), run.expert_parallel}, logits_of(rank),
                        tokens_of(rank));
    if (!s.ok()) std::fprintf(stderr, "rank %d: %s\n", rank, s.to_string().c_str());
    return s.ok() ? 0 : 1;
  });
  if (listen_fd >= 0) close(listen_fd);
  for (int r = 0; r < tp; ++r) ASSERT_EQ(codes[r], 0) << "rank " << r;
  std::vector<float> whole(rows * vocab);
  std::vector<int32_t> whole_tokens(rows);
  Status s = generate(run, TensorParallelGroup{}, whole.data(), whole_tokens.data());
  ASSERT_TRUE(s.ok()) << s.to_string();
  double worst = 0;
  for (size_t row = 0; row < rows; ++row)
    worst = std::max(worst, rel_l2(logits_of(0) + row * vocab, whole.data() + row * vocab, vocab));
  std::printf("[ metrics ] %s TP=%d%s: worst relative L2 of the logits vs TP=1 over %zu prompts x %d steps: %.3g\n",
              run.path.c_str(), tp, run.expert_parallel ? " EP" : "", run.prompts.size(), run.decode_steps + 1, worst);
  EXPECT_LT(worst, 1e-5);
  for (size_t row = 0; row < rows; ++row)
    EXPECT_EQ(tokens_of(0)[row], whole_tokens[row])
        << "prompt " << row / (run.decode_steps + 1) << " step " << row % (run.decode_steps + 1);
  // Every rank gathered the same logits, bit for bit (the sums are in rank order on every rank).
  for (int r = 1; r < tp; ++r)
    EXPECT_EQ(std::memcmp(logits_of(r), logits_of(0), rows * vocab * sizeof(float)), 0) << "rank " << r;
  munmap(shared, per_rank * tp);
}

}  // namespace kvasir::tp_testing
