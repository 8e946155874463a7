// Pipeline parallelism of the generic decoder on the CPU backend: the layers split into 2 stages
// (and 2 stages of 2 tensor-parallel ranks each), forked processes over the shm communicators
// (and a 2x2 group over TCP whose stage groups meet over shared memory or TCP by simulated host),
// give the whole model's logits within float32 reduction-order bounds (relative L2 < 1e-5, exact
// matmuls) and the same greedy tokens, every rank the same logits bit for bit. The prompts run
// together as one batch per step, so each step is cut into micro-batches that cross the stage
// boundary one after another. Tiny Llama 3, Gemma 3 (tied embeddings: the last stage binds the
// embedding for its lm_head) and Qwen3-MoE, SmolLM2's Q4_1 GGUF, and the families tensor
// parallelism refuses (DeepSeek-V2's MLA with dense and MoE layers, GPT-OSS); 3 and 4 stages (middle
// stages with neither embedding nor head) and VLLM_PP_LAYER_PARTITION. Also which tensors a stage
// reads and the KV bytes it needs per block, the layer split (vLLM's get_pp_indices) and the
// micro-batch cut on their own.
#include "model/pipeline_parallel.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "common/json.h"
#include "common/mapped_file.h"
#include "dist/host_identity.h"
#include "dist/parallel_layout.h"
#include "dist/tcp_communicator.h"
#include "dist/tcp_subgroup.h"
#include "model/tensor_parallel_test_util.h"

namespace kvasir {
namespace {

using tp_testing::kBlockSize;

std::string tiny(const std::string& name) { return std::string(KVASIR_SOURCE_DIR) + "/tests/data/tiny/" + name; }
const std::string kSmolLm2 = std::string(KVASIR_SOURCE_DIR) + "/models/SmolLM2-135M-Instruct.Q4_1.gguf";

std::vector<std::vector<int32_t>> golden_prompts(const std::string& name) {
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

struct PipelineRun {
  std::string path;
  int tp = 1;
  int pp = 2;
  std::vector<std::vector<int32_t>> prompts;
  int decode_steps = 8;
  std::string layer_partition;  // VLLM_PP_LAYER_PARTITION; empty: vLLM's even split
  // Non-empty: the group is TCP on loopback, rank r states host id hosts[r], and each stage's
  // tensor-parallel group meets as dist::join_subgroup picks (shared memory on one host, TCP
  // across hosts); stage_groups_over_tcp says which the test expects.
  std::vector<std::string> hosts;
  bool stage_groups_over_tcp = false;
};

// Rank `rank`'s group and its stage's tensor-parallel group (null at run.tp 1).
struct RankGroups {
  std::unique_ptr<dist::Communicator> world, stage;
};

StatusOr<RankGroups> join_groups(const PipelineRun& run, const dist::ParallelLayout& layout, const std::string& group,
                                 int listen_fd, int port, int rank) {
  RankGroups g;
  const bool tcp = !run.hosts.empty();
  KVASIR_ASSIGN_OR_RETURN(g.world, tp_testing::make_comm(tcp, listen_fd, port, group, rank, layout.world_size()));
  if (run.tp == 1) return g;
  const std::string stage_group = group + "-stage" + std::to_string(layout.pp_rank(rank));
  if (!tcp) {
    KVASIR_ASSIGN_OR_RETURN(g.stage, tp_testing::make_comm(false, -1, 0, stage_group, layout.tp_rank(rank), run.tp));
    return g;
  }
  KVASIR_ASSIGN_OR_RETURN(dist::HostMap hosts, dist::exchange_host_ids(*g.world, run.hosts[rank]));
  dist::SubgroupOptions o;
  o.group_id = stage_group;
  for (int t = 0; t < run.tp; ++t) o.members.push_back(layout.rank(layout.pp_rank(rank), t));
  o.address = dynamic_cast<dist::TcpCommunicator&>(*g.world).address();
  KVASIR_ASSIGN_OR_RETURN(g.stage, dist::join_subgroup(*g.world, hosts, o));
  if ((dynamic_cast<dist::TcpCommunicator*>(g.stage.get()) != nullptr) != run.stage_groups_over_tcp)
    return internal_error(std::string("the stage group is not over ") + (run.stage_groups_over_tcp ? "TCP" : "shared memory"));
  return g;
}

constexpr int kMaxBlocksPerSeq = 8;  // 128 tokens a sequence

// Greedy generation of every prompt at once: step 0 prefills all of them as one batch, then each
// step decodes one token of every sequence. Logits [prompts, steps + 1, vocab], tokens
// [prompts, steps + 1].
Status generate_batched(const PipelineRun& run, TensorParallelGroup tp, PipelineParallelGroup pp, float* logits,
                        int32_t* tokens) {
  KVASIR_ASSIGN_OR_RETURN(auto weights, open_weights(run.path));
  KVASIR_ASSIGN_OR_RETURN(ModelConfig config, load_model_config(*weights));
  CpuBackendOptions bo;
  bo.num_threads = 1;
  bo.precision = MatmulPrecision::kExact;  // see tensor_parallel_test_util.h
  CpuBackend backend(bo);
  const int n = static_cast<int>(run.prompts.size());
  int total = 0;
  for (const auto& p : run.prompts) total += static_cast<int>(p.size());
  ModelOptions mo;
  mo.max_num_tokens = total;
  mo.max_num_logits = n;
  mo.tp = tp;
  mo.pp = pp;
  mo.layer_partition = run.layer_partition;
  KVASIR_ASSIGN_OR_RETURN(auto model, DecoderModel::create(config, *weights, backend, mo));
  KVASIR_ASSIGN_OR_RETURN(KvCache cache, model->allocate_kv_cache(n * kMaxBlocksPerSeq, kBlockSize));
  std::vector<std::vector<int32_t>> seqs = run.prompts;
  std::vector<int32_t> blocks(static_cast<size_t>(n * kMaxBlocksPerSeq));
  for (size_t i = 0; i < blocks.size(); ++i) blocks[i] = static_cast<int32_t>(i);
  const int64_t vocab = config.vocab_size, steps = run.decode_steps + 1;
  std::vector<float> out(static_cast<size_t>(n * vocab));
  for (int step = 0; step < steps; ++step) {
    std::vector<int32_t> ids, positions, qsl = {0}, seq_lens, last;
    std::vector<int64_t> slots;
    for (int s = 0; s < n; ++s) {
      const int len = static_cast<int>(seqs[s].size());
      if (len > kMaxBlocksPerSeq * kBlockSize) return invalid_argument("test sequence too long");
      const int begin = step == 0 ? 0 : len - 1;
      for (int p = begin; p < len; ++p) {
        ids.push_back(seqs[s][p]);
        positions.push_back(p);
        slots.push_back(int64_t{s} * kMaxBlocksPerSeq * kBlockSize + p);
      }
      qsl.push_back(static_cast<int32_t>(ids.size()));
      seq_lens.push_back(len);
      last.push_back(qsl.back() - 1);
    }
    ForwardBatch b;
    b.num_tokens = static_cast<int>(ids.size());
    b.input_ids = ids.data();
    b.positions = positions.data();
    b.attn.num_seqs = n;
    b.attn.num_tokens = b.num_tokens;
    b.attn.query_start_loc = qsl.data();
    b.attn.seq_lens = seq_lens.data();
    b.attn.block_tables = blocks.data();
    b.attn.max_blocks_per_seq = kMaxBlocksPerSeq;
    b.attn.slot_mapping = slots.data();
    b.attn.block_size = kBlockSize;
    b.num_logits = n;
    b.logits_indices = last.data();
    KVASIR_RETURN_IF_ERROR(model->forward(b, cache, out.data()));
    for (int s = 0; s < n; ++s) {
      const float* row = out.data() + s * vocab;
      std::memcpy(logits + (int64_t{s} * steps + step) * vocab, row, static_cast<size_t>(vocab) * sizeof(float));
      const int32_t next = static_cast<int32_t>(std::max_element(row, row + vocab) - row);
      tokens[int64_t{s} * steps + step] = next;
      seqs[s].push_back(next);
    }
  }
  return Status();
}

// Runs the model over tp x pp forked ranks and whole, and compares every step's logits and tokens.
void expect_pipeline_equals_whole(const PipelineRun& run) {
  auto weights = open_weights(run.path);
  ASSERT_TRUE(weights.ok()) << run.path << ": " << weights.status().to_string();
  auto config = load_model_config(**weights);
  ASSERT_TRUE(config.ok());
  const dist::ParallelLayout layout{run.tp, run.pp};
  const int world = layout.world_size();
  const size_t vocab = static_cast<size_t>(config->vocab_size);
  const size_t rows = run.prompts.size() * static_cast<size_t>(run.decode_steps + 1);
  const size_t per_rank = rows * vocab * sizeof(float) + rows * sizeof(int32_t);
  void* shared = mmap(nullptr, per_rank * world, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(shared, MAP_FAILED);
  auto logits_of = [&](int r) { return reinterpret_cast<float*>(static_cast<uint8_t*>(shared) + per_rank * r); };
  auto tokens_of = [&](int r) { return reinterpret_cast<int32_t*>(logits_of(r) + rows * vocab); };
  const std::string group = "pp-test-" + std::to_string(getpid()) + "-" + std::to_string(run.tp) + "x" +
                            std::to_string(run.pp);
  int listen_fd = -1, port = 0;
  if (!run.hosts.empty()) {
    ASSERT_EQ(run.hosts.size(), static_cast<size_t>(world));
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
  const auto codes = dist::testing::run_ranks(world, [&](int rank) {
    auto groups = join_groups(run, layout, group, listen_fd, port, rank);
    Status s = groups.status();
    if (s.ok()) {
      s = generate_batched(run, TensorParallelGroup{layout.tp_rank(rank), run.tp, groups->stage.get()},
                           PipelineParallelGroup{layout.pp_rank(rank), run.pp, groups->world.get()}, logits_of(rank),
                           tokens_of(rank));
    }
    if (!s.ok()) std::fprintf(stderr, "rank %d: %s\n", rank, s.to_string().c_str());
    return s.ok() ? 0 : 1;
  });
  if (listen_fd >= 0) close(listen_fd);
  for (int r = 0; r < world; ++r) ASSERT_EQ(codes[r], 0) << "rank " << r;
  std::vector<float> whole(rows * vocab);
  std::vector<int32_t> whole_tokens(rows);
  Status s = generate_batched(run, TensorParallelGroup{}, PipelineParallelGroup{}, whole.data(), whole_tokens.data());
  ASSERT_TRUE(s.ok()) << s.to_string();
  double worst = 0;
  for (size_t row = 0; row < rows; ++row)
    worst = std::max(worst, tp_testing::rel_l2(logits_of(0) + row * vocab, whole.data() + row * vocab, vocab));
  std::printf("[ metrics ] %s TP=%d PP=%d: worst relative L2 of the logits vs one rank over %zu prompts x %d steps: %.3g\n",
              run.path.c_str(), run.tp, run.pp, run.prompts.size(), run.decode_steps + 1, worst);
  EXPECT_LT(worst, 1e-5);
  for (size_t row = 0; row < rows; ++row)
    EXPECT_EQ(tokens_of(0)[row], whole_tokens[row])
        << "prompt " << row / (run.decode_steps + 1) << " step " << row % (run.decode_steps + 1);
  for (int r = 1; r < world; ++r)
    EXPECT_EQ(std::memcmp(logits_of(r), logits_of(0), rows * vocab * sizeof(float)), 0) << "rank " << r;
  munmap(shared, per_rank * world);
}

TEST(PipelineParallelTest, LayersSplitAsVllmDoes) {
  auto layers = [](int n, int size) {
    std::vector<int> counts;
    for (int r = 0; r < size; ++r) {
      auto range = pipeline_stage_layers(n, r, size);
      EXPECT_TRUE(range.ok()) << range.status().to_string();
      counts.push_back(range.ok() ? range->count() : -1);
    }
    return counts;
  };
  EXPECT_EQ(layers(30, 2), (std::vector<int>{15, 15}));
  EXPECT_EQ(layers(30, 4), (std::vector<int>{7, 8, 8, 7}));  // vLLM: the remainder before the last stage
  EXPECT_EQ(layers(7, 2), (std::vector<int>{4, 3}));
  EXPECT_EQ(layers(2, 2), (std::vector<int>{1, 1}));
  auto r = pipeline_stage_layers(30, 2, 4);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->begin, 15);
  EXPECT_EQ(r->end, 23);
  EXPECT_FALSE(pipeline_stage_layers(3, 0, 4).ok());
  EXPECT_NE(pipeline_stage_layers(3, 0, 4).status().message().find("fewer than the pipeline parallel size (4)"),
            std::string::npos);
}

TEST(PipelineParallelTest, VllmLayerPartitionIsHonouredOrRefused) {
  auto r = pipeline_stage_layers(30, 1, 3, "12,10,8");
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->begin, 12);
  EXPECT_EQ(r->end, 22);
  for (const char* bad : {"12,10", "12,10,9", "12,x,8", "30,0,0", ","}) {
    SCOPED_TRACE(bad);
    auto s = pipeline_stage_layers(30, 0, 3, bad);
    EXPECT_FALSE(s.ok());
    EXPECT_NE(s.status().message().find("VLLM_PP_LAYER_PARTITION"), std::string::npos) << s.status().message();
  }
}

TEST(PipelineParallelTest, MicroBatchesAreWholeSequencesCoveringTheBatch) {
  // Five sequences of 1, 9, 2, 2 and 2 tokens.
  const int32_t qsl[] = {0, 1, 10, 12, 14, 16};
  AttentionMetadata m;
  m.num_seqs = 5;
  m.num_tokens = 16;
  m.query_start_loc = qsl;
  EXPECT_EQ(micro_batch_bounds(m, 1), (std::vector<int>{0, 5}));
  EXPECT_EQ(micro_batch_bounds(m, 2), (std::vector<int>{0, 2, 5}));
  EXPECT_EQ(micro_batch_bounds(m, 4), (std::vector<int>{0, 2, 3, 4, 5}));
  // Fewer sequences than parts: one micro-batch per sequence, none empty.
  m.num_seqs = 2;
  EXPECT_EQ(micro_batch_bounds(m, 4), (std::vector<int>{0, 1, 2}));

  m.num_seqs = 5;
  std::vector<int32_t> ids(16), positions(16), seq_lens = {1, 9, 2, 2, 2}, tables(5 * 3);
  std::vector<int64_t> slots(16);
  for (int i = 0; i < 16; ++i) {
    ids[i] = positions[i] = i;
    slots[i] = 100 + i;
  }
  for (int i = 0; i < 15; ++i) tables[i] = i;
  ForwardBatch b;
  b.num_tokens = 16;
  b.input_ids = ids.data();
  b.positions = positions.data();
  b.attn = m;
  b.attn.seq_lens = seq_lens.data();
  b.attn.block_tables = tables.data();
  b.attn.max_blocks_per_seq = 3;
  b.attn.slot_mapping = slots.data();
  int32_t rebased[4];
  const ForwardBatch mb = micro_batch(b, 2, 5, rebased);
  EXPECT_EQ(mb.num_tokens, 6);
  EXPECT_EQ(mb.attn.num_tokens, 6);
  EXPECT_EQ(mb.attn.num_seqs, 3);
  EXPECT_EQ(std::vector<int32_t>(rebased, rebased + 4), (std::vector<int32_t>{0, 2, 4, 6}));
  EXPECT_EQ(mb.input_ids[0], 10);
  EXPECT_EQ(mb.positions[5], 15);
  EXPECT_EQ(mb.attn.slot_mapping[0], 110);
  EXPECT_EQ(mb.attn.seq_lens[0], 2);
  EXPECT_EQ(mb.attn.block_tables[0], 6);
  EXPECT_EQ(mb.num_logits, 0);
}

TEST(PipelineParallelTest, TinyLlamaTwoStagesEqualTheWholeModel) {
  expect_pipeline_equals_whole(PipelineRun{tiny("llama3"), 1, 2, golden_prompts("llama3"), 8});
}

TEST(PipelineParallelTest, TinyGemma3TwoStagesAndTwoByTwoEqualTheWholeModel) {
  // Tied embeddings: the first stage embeds, the last projects with the same table.
  expect_pipeline_equals_whole(PipelineRun{tiny("gemma3"), 1, 2, golden_prompts("gemma3"), 8});
  expect_pipeline_equals_whole(PipelineRun{tiny("gemma3") + "/model.gguf", 2, 2, golden_prompts("gemma3"), 8});
}

TEST(PipelineParallelTest, TinyGemma3ThreeAndFourStagesEqualTheWholeModel) {
  // Middle stages hold neither the embedding nor the head; an uneven partition as asked.
  const auto prompts = golden_prompts("gemma3");
  expect_pipeline_equals_whole(PipelineRun{tiny("gemma3"), 1, 3, prompts, 8});
  expect_pipeline_equals_whole(PipelineRun{tiny("gemma3"), 1, 4, prompts, 8, "1,2,2,1"});
  expect_pipeline_equals_whole(PipelineRun{tiny("gemma3"), 1, 3, prompts, 8, "4,1,1"});
}

TEST(PipelineParallelTest, TinyQwen3MoeTwoStagesAndTwoByTwoEqualTheWholeModel) {
  expect_pipeline_equals_whole(PipelineRun{tiny("qwen3_moe"), 1, 2, golden_prompts("qwen3_moe"), 8});
  expect_pipeline_equals_whole(PipelineRun{tiny("qwen3_moe"), 2, 2, golden_prompts("qwen3_moe"), 8});
}

TEST(PipelineParallelTest, TwoByTwoOverTcpEqualsTheWholeModelWhereverTheStagesSit) {
  // The group over TCP, as across hosts. Two ranks per host in vLLM's order: each stage is one
  // host (its TP group over shared memory); hosts alternating (mpirun --map-by node): each
  // stage's TP group spans both hosts (over TCP).
  const auto prompts = golden_prompts("gemma3");
  PipelineRun stage_per_host{tiny("gemma3"), 2, 2, prompts, 8};
  stage_per_host.hosts = {"host-a", "host-a", "host-b", "host-b"};
  expect_pipeline_equals_whole(stage_per_host);
  PipelineRun stages_span_hosts{tiny("gemma3"), 2, 2, prompts, 8};
  stages_span_hosts.hosts = {"host-a", "host-b", "host-a", "host-b"};
  stages_span_hosts.stage_groups_over_tcp = true;
  expect_pipeline_equals_whole(stages_span_hosts);
}

TEST(PipelineParallelTest, FamiliesThatTensorParallelismRefusesSplitIntoStages) {
  // MLA (its latent cache, dense and MoE layers by index) and GPT-OSS (sinks, alternating sliding
  // layers): a stage's blocks are the whole model's layers [begin, end) with their own indices.
  for (const char* name : {"deepseek_v2", "gpt_oss"}) {
    SCOPED_TRACE(name);
    expect_pipeline_equals_whole(PipelineRun{tiny(name), 1, 2, golden_prompts(name), 8});
  }
}

TEST(PipelineParallelTest, SmolLm2GgufTwoStagesEqualTheWholeModel) {
  if (access(kSmolLm2.c_str(), R_OK) != 0) GTEST_SKIP() << kSmolLm2 << " is not here (scripts/fetch_models.sh)";
  // Its tokenizer's ids of "The capital of France is" and "def fib(n):" (any ids do).
  expect_pipeline_equals_whole(PipelineRun{kSmolLm2, 1, 2, {{504, 3575, 282, 4649, 314}, {1489, 28804, 30, 94, 3733}}, 6});
}

// Records which tensors a model reads.
class RecordingSource final : public WeightSource {
 public:
  explicit RecordingSource(std::unique_ptr<WeightSource> inner) : inner_(std::move(inner)) {}
  WeightFormat format() const override { return inner_->format(); }
  const std::string& path() const override { return inner_->path(); }
  std::vector<std::string> tensor_names() const override { return inner_->tensor_names(); }
  bool has_tensor(std::string_view name) const override { return inner_->has_tensor(name); }
  StatusOr<WeightTensor> tensor(std::string_view name) const override {
    read.emplace_back(name);
    return inner_->tensor(name);
  }
  const GgufFile* gguf() const override { return inner_->gguf(); }
  mutable std::vector<std::string> read;

 private:
  std::unique_ptr<WeightSource> inner_;
};

// A group member for loading alone: a stage's model is built and its cache sized without a word
// between the ranks, so any collective here is a bug.
class NoTrafficCommunicator final : public dist::Communicator {
 public:
  NoTrafficCommunicator(int rank, int size) : rank_(rank), size_(size) {}
  int rank() const override { return rank_; }
  int world_size() const override { return size_; }
  Status all_reduce_sum(void*, size_t, DType) override { return fail(); }
  Status all_gather(const void*, void*, size_t) override { return fail(); }
  Status reduce_scatter_sum(const void*, void*, size_t, DType) override { return fail(); }
  Status broadcast(void*, size_t, int) override { return fail(); }
  Status send(const void*, size_t, int) override { return fail(); }
  Status recv(void*, size_t, int) override { return fail(); }
  Status barrier() override { return fail(); }

 private:
  static Status fail() {
    ADD_FAILURE() << "no communication while loading";
    return internal_error("no communication while loading");
  }
  int rank_, size_;
};

struct StageLoad {
  std::vector<std::string> read;
  size_t kv_bytes_per_block = 0;
};

StageLoad load_stage(const std::string& path, int stage, int stages) {
  StageLoad out;
  auto inner = open_weights(path);
  EXPECT_TRUE(inner.ok());
  if (!inner.ok()) return out;
  RecordingSource src(std::move(inner).value());
  auto config = load_model_config(src);
  EXPECT_TRUE(config.ok());
  CpuBackend backend(CpuBackendOptions{});
  NoTrafficCommunicator comm(stage, stages);
  ModelOptions mo;
  mo.max_num_tokens = 16;
  mo.max_num_logits = 1;
  if (stages > 1) mo.pp = PipelineParallelGroup{stage, stages, &comm};
  src.read.clear();
  auto model = DecoderModel::create(*config, src, backend, mo);
  EXPECT_TRUE(model.ok()) << model.status().to_string();
  if (!model.ok()) return out;
  out.read = src.read;
  out.kv_bytes_per_block = (*model)->kv_cache_bytes_per_block(16);
  return out;
}

bool any_starts_with(const std::vector<std::string>& names, const std::string& prefix) {
  return std::any_of(names.begin(), names.end(), [&](const std::string& n) { return n.rfind(prefix, 0) == 0; });
}

TEST(PipelineParallelTest, AStageReadsOnlyItsWeightsAndCachesOnlyItsLayers) {
  // Tiny Llama 3 (HF names; its own lm_head): layer 0 on stage 0, layer 1 on stage 1.
  const StageLoad whole = load_stage(tiny("llama3"), 0, 1);
  const StageLoad first = load_stage(tiny("llama3"), 0, 2), last = load_stage(tiny("llama3"), 1, 2);
  EXPECT_TRUE(any_starts_with(first.read, "model.layers.0."));
  EXPECT_FALSE(any_starts_with(first.read, "model.layers.1."));
  EXPECT_TRUE(any_starts_with(first.read, "model.embed_tokens"));
  EXPECT_FALSE(any_starts_with(first.read, "lm_head"));
  EXPECT_FALSE(any_starts_with(first.read, "model.norm"));
  EXPECT_TRUE(any_starts_with(last.read, "model.layers.1."));
  EXPECT_FALSE(any_starts_with(last.read, "model.layers.0."));
  EXPECT_FALSE(any_starts_with(last.read, "model.embed_tokens"));
  EXPECT_TRUE(any_starts_with(last.read, "lm_head"));
  EXPECT_TRUE(any_starts_with(last.read, "model.norm"));
  // Each stage's KV cache holds its own layer: half the bytes per block, twice the blocks.
  EXPECT_EQ(first.kv_bytes_per_block * 2, whole.kv_bytes_per_block);
  EXPECT_EQ(last.kv_bytes_per_block * 2, whole.kv_bytes_per_block);
  // Tiny Gemma 3 ties lm_head to the embedding: the last stage reads the embedding for it.
  const StageLoad tied_last = load_stage(tiny("gemma3"), 1, 2);
  EXPECT_TRUE(any_starts_with(tied_last.read, "model.embed_tokens"));
  EXPECT_FALSE(any_starts_with(tied_last.read, "model.layers.0."));
  EXPECT_TRUE(any_starts_with(tied_last.read, "model.layers.5."));
  const StageLoad middle = load_stage(tiny("gemma3"), 1, 3);
  EXPECT_FALSE(any_starts_with(middle.read, "model.embed_tokens"));
  EXPECT_FALSE(any_starts_with(middle.read, "model.norm"));
  EXPECT_TRUE(any_starts_with(middle.read, "model.layers.2."));
  EXPECT_FALSE(any_starts_with(middle.read, "model.layers.4."));
}

TEST(PipelineParallelTest, MoreStagesThanLayersAreRefused) {
  auto weights = open_weights(tiny("llama3"));
  ASSERT_TRUE(weights.ok());
  auto config = load_model_config(**weights);
  ASSERT_TRUE(config.ok());
  const Status s = check_pipeline_parallel(*config, 3);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("2 layers, fewer than the pipeline parallel size (3)"), std::string::npos) << s.message();
}

}  // namespace
}  // namespace kvasir
