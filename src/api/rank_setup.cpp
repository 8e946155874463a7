#include "api/rank_setup.h"

#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <string>
#include <vector>

#include "common/log.h"
#include "dist/host_identity.h"
#include "dist/tcp_subgroup.h"
#include "loader/weight_source.h"
#include "model/pipeline_parallel.h"
#include "model/registry.h"
#include "model/tensor_parallel.h"
#include "setup/draft_model.h"
#include "setup/kv_cache_sizing.h"
#ifdef KVASIR_HAVE_CUDA
#include "backend/cuda/cuda_backend.h"
#endif

namespace kvasir {

Status check_tensor_parallel_model(const EngineArgs& args) {
  const bool ep = args.enable_expert_parallel;
  if ((args.tensor_parallel_size <= 1 && !ep) || args.load_format != "auto") return Status();
  // A checkpoint or config that cannot be read is rank 0's load to report, with its own message.
  auto weights = open_weights(args.model.empty() ? default_model_path() : args.model);
  if (!weights.ok()) return Status();
  auto loaded = load_model_config(**weights);
  if (!loaded.ok()) return Status();
  const ModelConfig& config = *loaded;
  const WeightSource& src = **weights;
  const Status s = check_tensor_parallel(
      config, args.tensor_parallel_size,
      [&src](const WeightSpec& spec) { return src.has_tensor(spec.gguf.name) || src.has_tensor(spec.hf.name); }, ep);
  if (s.ok()) return s;
  return Status(s.code(), "--tensor-parallel-size " + std::to_string(args.tensor_parallel_size) +
                              (ep ? " --enable-expert-parallel" : "") + ": " + s.message());
}

std::string pipeline_layer_partition() {
  const char* p = std::getenv("VLLM_PP_LAYER_PARTITION");
  return p == nullptr ? std::string() : std::string(p);
}

Status check_pipeline_parallel_model(const EngineArgs& args) {
  // With --load-format dummy each rank's DecoderModel::create says it instead.
  if (args.pipeline_parallel_size <= 1 || args.load_format != "auto") return Status();
  // A checkpoint or config that cannot be read is rank 0's load to report, with its own message.
  auto weights = open_weights(args.model.empty() ? default_model_path() : args.model);
  if (!weights.ok()) return Status();
  auto config = load_model_config(**weights);
  if (!config.ok()) return Status();
  const Status s = check_pipeline_parallel(*config, args.pipeline_parallel_size, pipeline_layer_partition());
  if (s.ok()) return s;
  return Status(s.code(), "--pipeline-parallel-size " + std::to_string(args.pipeline_parallel_size) + ": " + s.message());
}

namespace {

// The ranks of this rank's tensor-parallel group (its stage's, or the whole group's).
std::vector<int> tensor_parallel_members(const dist::ParallelLayout& layout, int rank) {
  std::vector<int> members;
  for (int t = 0; t < layout.tensor_parallel; ++t) members.push_back(layout.rank(layout.pp_rank(rank), t));
  return members;
}

// Every stage's ranks join a group of their own for their tensor-parallel collectives: over
// shared memory when the stage sits on one host, over TCP when it spans hosts (vLLM's order puts
// a stage's ranks next to each other, so with a multiple of tensor_parallel ranks per node each
// stage is one node; mpirun --map-by node spreads them). Rank 0 names the groups (one nonce
// broadcast over the whole group).
StatusOr<std::unique_ptr<dist::Communicator>> join_stage_group(const TensorParallelProcesses& tp,
                                                               const dist::ParallelLayout& layout,
                                                               const dist::HostMap& hosts) {
  dist::Communicator& world = *tp.comm;
  uint64_t nonce = 0;
  if (world.rank() == 0)
    nonce = static_cast<uint64_t>(getpid()) * 1'000'003u +
            static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
  KVASIR_RETURN_IF_ERROR(world.broadcast(&nonce, sizeof(nonce), 0));
  const int stage = layout.pp_rank(world.rank());
  dist::SubgroupOptions o;
  o.group_id = "pp-" + std::to_string(nonce) + "-stage" + std::to_string(stage);
  o.members = tensor_parallel_members(layout, world.rank());
  o.address = tp.address;
  const bool one_host = hosts.on_one_host(o.members);
  if (layout.tp_rank(world.rank()) == 0)
    KVASIR_LOG_INFO("pipeline stage %d: its tensor-parallel ranks %d..%d meet over %s", stage, o.members.front(),
                    o.members.back(), one_host ? "shared memory (one host)" : "TCP (across hosts)");
  return dist::join_subgroup(world, hosts, o);
}

bool runs_on_cuda(const EngineArgs& args) {
#ifdef KVASIR_HAVE_CUDA
  return args.device == "cuda" || (args.device == "auto" && cuda_device_count() > 0);
#else
  (void)args;
  return false;
#endif
}

}  // namespace

StatusOr<RankSetup> set_up_rank(const EngineArgs& args, TensorParallelProcesses* tp) {
  RankSetup r;
  LoadOptions lo = LoadOptions::from(args);
  const dist::ParallelLayout layout = args.parallel_layout();
  if (tp != nullptr && tp->comm->world_size() != layout.world_size())
    return internal_error("the group has " + std::to_string(tp->comm->world_size()) + " ranks, the layout " +
                          std::to_string(layout.world_size()));
  // Which host each rank is on: learnt over TCP (every rank states its own); a group over shared
  // memory is on this host by construction.
  dist::HostMap hosts;
  if (tp != nullptr) {
    if (tp->over_tcp) {
      KVASIR_ASSIGN_OR_RETURN(hosts, dist::exchange_host_ids(*tp->comm, dist::this_host_id()));
    } else {
      hosts = dist::HostMap(std::vector<std::string>(static_cast<size_t>(tp->comm->world_size()), "this host"));
    }
    lo.placement = RankPlacement{tp->local_rank, tp->ranks_on_host};
    lo.tp_on_one_host = hosts.on_one_host(tensor_parallel_members(layout, tp->comm->rank()));
    // Every rank takes the same path here (hosts is the same everywhere), so none is left waiting.
    if (runs_on_cuda(args) && layout.pipeline_parallel > 1 && hosts.num_hosts() > 1)
      return unimplemented("--pipeline-parallel-size over several hosts is not supported yet on CUDA (the stages' "
                           "hidden states cross hosts only on the CPU backend); pass --device cpu, or keep the "
                           "stages on one host");
  }
  if (tp != nullptr && layout.pipeline_parallel > 1) {
    dist::Communicator& world = *tp->comm;
    lo.model.pp = PipelineParallelGroup{layout.pp_rank(world.rank()), layout.pipeline_parallel, &world};
    lo.model.layer_partition = pipeline_layer_partition();
    if (layout.tensor_parallel > 1) {
      KVASIR_ASSIGN_OR_RETURN(r.stage_comm, join_stage_group(*tp, layout, hosts));
      lo.model.tp = TensorParallelGroup{layout.tp_rank(world.rank()), layout.tensor_parallel, r.stage_comm.get(),
                                        args.enable_expert_parallel};
    }
  } else if (tp != nullptr) {
    lo.model.tp = TensorParallelGroup{tp->comm->rank(), tp->comm->world_size(), tp->comm.get(),
                                      args.enable_expert_parallel};
  }
  KVASIR_ASSIGN_OR_RETURN(r.model, load_model(args.model.empty() ? default_model_path() : args.model, lo));
  r.max_model_len = resolve_max_model_len(args, r.model->config);
  // A draft model loads before the target's cache is planned: its weights are then in use, and on
  // a device its cache shares the target's budget.
  CompanionKv companion;
  if (args.speculative.method == "draft_model") {
    KVASIR_ASSIGN_OR_RETURN(r.draft, load_draft_model(args, *r.model));
    companion = draft_kv_companion(r.draft, args);
  }
  KVASIR_ASSIGN_OR_RETURN(r.num_kv_blocks, plan_num_kv_blocks(*r.model, args, companion));
  if (tp != nullptr) {
    KVASIR_ASSIGN_OR_RETURN(r.num_kv_blocks, agree_num_kv_blocks(*tp->comm, r.num_kv_blocks));
  }
  // Before anything is sized by it: a max_model_len past the cache would admit requests that
  // can never finish.
  KVASIR_ASSIGN_OR_RETURN(r.max_model_len, fit_max_model_len_to_kv_cache(args, r.max_model_len, r.num_kv_blocks));
  r.cache = std::make_unique<KvCache>();
  KVASIR_ASSIGN_OR_RETURN(*r.cache, r.model->model->allocate_kv_cache(r.num_kv_blocks, args.block_size));
  RunnerConfig rc;
  rc.block_size = args.block_size;
  rc.max_model_len = r.max_model_len;
  rc.seed = args.seed;
  rc.eos_token_ids = r.model->eos_token_ids;
  rc.max_num_seqs = args.max_num_seqs;
  rc.speculative = args.speculative;
  // Async scheduling's device half, where the backend can feed sampled ids on the device (vLLM's
  // async scheduling keeps them on the GPU likewise).
  rc.overlap_steps = args.async_scheduling_on(r.model->backend->device() != Device::kCpu);
  DraftModelRef draft;
  if (args.speculative.method == "draft_model") {
    KVASIR_RETURN_IF_ERROR(allocate_draft_kv_cache(r.draft, args, r.num_kv_blocks));
    draft = DraftModelRef{r.draft.model->model.get(), r.draft.cache.get(), args.max_num_batched_tokens};
  } else if (args.speculative.method == "eagle" || args.speculative.method == "eagle3") {
    KVASIR_ASSIGN_OR_RETURN(r.eagle_head, load_eagle_head(args, *r.model, r.num_kv_blocks));
    draft.cache = r.eagle_head.cache.get();
    draft.eagle_head = r.eagle_head.head.get();
  }
  r.runner = std::make_unique<ModelRunner>(*r.model->model, *r.cache, rc, draft);
  return r;
}

}  // namespace kvasir
