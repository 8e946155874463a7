// Tensor parallelism of the generic decoder on the CPU backend: a model split over 2-4 ranks
// (forked processes over the shm communicator, once over TCP on loopback) gives the unsplit
// model's logits within float32 reduction-order bounds (relative L2 < 1e-5) and the same greedy
// tokens, on the tiny HF Llama 3 (TP=2 and TP=4, where its 2 KV heads are replicated) and on
// SmolLM2's Q4_1 GGUF (TP=3: it has 9 heads, so TP=2 is refused with vLLM's message). Also the
// shard arithmetic on its own.
#include "model/tensor_parallel.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "backend/cpu/cpu_backend.h"
#include "dist/communicator_test_util.h"
#include "dist/shm_communicator.h"
#include "dist/tcp_communicator.h"
#include "loader/weight_source.h"
#include "model/decoder_model.h"
#include "model/registry.h"

namespace kvasir {
namespace {

constexpr int kDecodeSteps = 8;

// The batches of one sequence: its prompt, then one token per decode step (KV blocks of 16).
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
    for (int b = 0; b * 16 < end; ++b) blocks.push_back(b);
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
    batch.attn.block_size = 16;
    batch.num_logits = 1;
    batch.logits_indices = last.data();
  }
};

// Greedy generation: the logits of every step ([steps + 1, vocab] into `logits`) and the tokens.
Status generate(const std::string& path, const std::vector<int32_t>& prompt, TensorParallelGroup tp,
                float* logits, int32_t* tokens) {
  KVASIR_ASSIGN_OR_RETURN(auto weights, open_weights(path));
  KVASIR_ASSIGN_OR_RETURN(ModelConfig config, load_model_config(*weights));
  CpuBackendOptions bo;
  bo.num_threads = 1;
  // kExact: the fast path quantizes activations to 8 bits per block, where a reduction-order
  // difference of one ulp can flip a rounding and move a logit far past float32 bounds.
  bo.precision = MatmulPrecision::kExact;
  CpuBackend backend(bo);
  ModelOptions mo;
  mo.max_num_tokens = 64;
  mo.max_num_logits = 4;
  mo.tp = tp;
  KVASIR_ASSIGN_OR_RETURN(auto model, DecoderModel::create(config, *weights, backend, mo));
  KVASIR_ASSIGN_OR_RETURN(KvCache cache, model->allocate_kv_cache(4, 16));
  Sequence s;
  s.ids = prompt;
  const int64_t vocab = config.vocab_size;
  int begin = 0;
  for (int step = 0; step <= kDecodeSteps; ++step) {
    s.step(begin, static_cast<int>(s.ids.size()));
    begin = static_cast<int>(s.ids.size());
    float* row = logits + step * vocab;
    KVASIR_RETURN_IF_ERROR(model->forward(s.batch, cache, row));
    const int32_t next = static_cast<int32_t>(std::max_element(row, row + vocab) - row);
    tokens[step] = next;
    s.ids.push_back(next);
  }
  return Status();
}

double rel_l2(const float* a, const float* b, size_t n) {
  double num = 0, den = 0;
  for (size_t i = 0; i < n; ++i) {
    num += (double{a[i]} - b[i]) * (double{a[i]} - b[i]);
    den += double{b[i]} * b[i];
  }
  return std::sqrt(num / den);
}

// The group's communicator for one rank: shared memory, or TCP on loopback (rank 0 listens on the
// socket the parent bound before forking).
StatusOr<std::unique_ptr<dist::Communicator>> make_comm(bool tcp, int listen_fd, int port, const std::string& group,
                                                        int rank, int size) {
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

// Runs `path` split over `tp` ranks and unsplit, and compares every step's logits and tokens.
void expect_split_equals_whole(const std::string& path, int tp, const std::vector<int32_t>& prompt,
                               bool tcp = false) {
  auto weights = open_weights(path);
  ASSERT_TRUE(weights.ok()) << path << ": " << weights.status().to_string();
  auto config = load_model_config(**weights);
  ASSERT_TRUE(config.ok());
  const size_t vocab = static_cast<size_t>(config->vocab_size), steps = kDecodeSteps + 1;
  const size_t per_rank = steps * vocab * sizeof(float) + steps * sizeof(int32_t);
  // Each rank writes its logits and tokens here; the parent reads them after the ranks exit.
  void* shared = mmap(nullptr, per_rank * tp, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(shared, MAP_FAILED);
  auto logits_of = [&](int r) { return reinterpret_cast<float*>(static_cast<uint8_t*>(shared) + per_rank * r); };
  auto tokens_of = [&](int r) { return reinterpret_cast<int32_t*>(logits_of(r) + steps * vocab); };
  const std::string group = "tp-test-" + std::to_string(getpid()) + "-" + std::to_string(tp);
  int listen_fd = -1, port = 0;
  if (tcp) {
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
    auto comm = make_comm(tcp, listen_fd, port, group, rank, tp);
    if (!comm.ok()) {
      std::fprintf(stderr, "rank %d: %s\n", rank, comm.status().to_string().c_str());
      return 1;
    }
    Status s = generate(path, prompt, TensorParallelGroup{rank, tp, comm->get()}, logits_of(rank), tokens_of(rank));
    if (!s.ok()) std::fprintf(stderr, "rank %d: %s\n", rank, s.to_string().c_str());
    return s.ok() ? 0 : 1;
  });
  if (listen_fd >= 0) close(listen_fd);
  for (int r = 0; r < tp; ++r) ASSERT_EQ(codes[r], 0) << "rank " << r;
  std::vector<float> whole(steps * vocab);
  std::vector<int32_t> whole_tokens(steps);
  Status s = generate(path, prompt, TensorParallelGroup{}, whole.data(), whole_tokens.data());
  ASSERT_TRUE(s.ok()) << s.to_string();
  double worst = 0;
  for (size_t step = 0; step < steps; ++step)
    worst = std::max(worst, rel_l2(logits_of(0) + step * vocab, whole.data() + step * vocab, vocab));
  std::printf("[ metrics ] %s TP=%d: worst relative L2 of the logits vs TP=1 over %zu steps: %.3g\n", path.c_str(),
              tp, steps, worst);
  EXPECT_LT(worst, 1e-5);
  for (size_t step = 0; step < steps; ++step) EXPECT_EQ(tokens_of(0)[step], whole_tokens[step]) << "step " << step;
  // Every rank gathered the same logits, bit for bit (the sums are in rank order on every rank).
  for (int r = 1; r < tp; ++r)
    EXPECT_EQ(std::memcmp(logits_of(r), logits_of(0), steps * vocab * sizeof(float)), 0) << "rank " << r;
  munmap(shared, per_rank * tp);
}

const std::string kTinyLlama = std::string(KVASIR_SOURCE_DIR) + "/tests/data/tiny/llama3";
const std::string kSmolLm2 = std::string(KVASIR_SOURCE_DIR) + "/models/SmolLM2-135M-Instruct.Q4_1.gguf";

TEST(TensorParallelTest, TinyLlamaSplitTwoWaysEqualsTheWholeModel) {
  expect_split_equals_whole(kTinyLlama, 2, {1, 17, 42, 99, 3, 250, 7});
}

TEST(TensorParallelTest, TinyLlamaSplitTwoWaysOverTcpEqualsTheWholeModel) {
  expect_split_equals_whole(kTinyLlama, 2, {1, 17, 42, 99, 3, 250, 7}, /*tcp=*/true);
}

TEST(TensorParallelTest, TinyLlamaSplitFourWaysReplicatesItsTwoKvHeads) {
  expect_split_equals_whole(kTinyLlama, 4, {5, 6, 7, 8, 200, 201});
}

TEST(TensorParallelTest, SmolLm2GgufSplitThreeWaysEqualsTheWholeModel) {
  if (access(kSmolLm2.c_str(), R_OK) != 0) GTEST_SKIP() << kSmolLm2 << " is not here (scripts/fetch_models.sh)";
  // Arbitrary ids within its vocabulary.
  expect_split_equals_whole(kSmolLm2, 3, {1, 4093, 198, 1780, 314, 260, 3575, 282, 4649, 47});
}

TEST(TensorParallelTest, ShardsThatCannotBeMadeAreRefusedWithVllmsMessage) {
  ModelConfig c;
  c.architecture = "llama";
  c.num_heads = 9;
  c.num_kv_heads = 3;
  c.intermediate_size = 1536;
  c.vocab_size = 49152;
  auto s = shard_config(c, 0, 2).status();
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("Total number of attention heads (9) must be divisible by tensor parallel size (2)"),
            std::string::npos)
      << s.message();
  c.num_heads = 8;
  c.num_kv_heads = 3;
  EXPECT_FALSE(shard_config(c, 0, 2).ok()) << "3 KV heads cannot be split 2 ways";
  c.num_kv_heads = 2;
  auto four = shard_config(c, 3, 4);
  ASSERT_TRUE(four.ok()) << four.status().to_string();
  EXPECT_EQ(four->num_heads, 2);
  EXPECT_EQ(four->num_kv_heads, 1) << "fewer KV heads than ranks: each rank keeps one";
  EXPECT_EQ(four->intermediate_size, 384);
  EXPECT_EQ(four->vocab_size, 49152) << "the vocabulary stays whole in the config";
}

TEST(TensorParallelTest, VocabShardsCoverTheVocabularyOnceWithEqualPaddedWidths) {
  for (int64_t vocab : {256, 257, 49152, 7}) {
    for (int size : {1, 2, 3, 4}) {
      int64_t next = 0;
      for (int r = 0; r < size; ++r) {
        const VocabShard v = vocab_shard(vocab, r, size);
        EXPECT_EQ(v.begin, next);
        EXPECT_LE(v.rows, v.padded_rows);
        EXPECT_EQ(v.padded_rows, (vocab + size - 1) / size);
        next = v.begin + v.rows;
      }
      EXPECT_EQ(next, vocab) << vocab << " over " << size;
    }
  }
}

TEST(TensorParallelTest, RolesItCannotSplitAreRefusedNotReplicated) {
  ModelConfig c;
  c.architecture = "qwen2";
  c.num_heads = 4;
  c.num_kv_heads = 2;
  c.head_dim = 16;
  c.hidden_size = 64;
  c.intermediate_size = 96;
  c.vocab_size = 256;
  c.num_layers = 1;
  c.layer_is_sliding = {false};
  c.attention_bias = true;
  WeightManifest m = dense_decoder_manifest(c);
  auto s = shard_manifest(m, c, 0, 2, [](const WeightSpec&) { return true; });
  EXPECT_EQ(s.code(), StatusCode::kUnimplemented);
  EXPECT_NE(s.message().find("attn_q.bias"), std::string::npos) << s.message();
}

}  // namespace
}  // namespace kvasir
