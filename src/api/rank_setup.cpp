#include "api/rank_setup.h"

#include <unistd.h>

#include <chrono>
#include <cstdlib>

#include "dist/shm_communicator.h"
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

// Every stage's ranks join a shared-memory group of their own for their tensor-parallel
// collectives; rank 0 names the groups (one nonce broadcast over the whole group).
StatusOr<std::unique_ptr<dist::Communicator>> join_stage_group(dist::Communicator& world,
                                                               const dist::ParallelLayout& layout) {
  uint64_t nonce = 0;
  if (world.rank() == 0)
    nonce = static_cast<uint64_t>(getpid()) * 1'000'003u +
            static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
  KVASIR_RETURN_IF_ERROR(world.broadcast(&nonce, sizeof(nonce), 0));
  dist::ShmCommunicatorOptions o;
  o.group_id = "pp-" + std::to_string(nonce) + "-stage" + std::to_string(layout.pp_rank(world.rank()));
  o.rank = layout.tp_rank(world.rank());
  o.world_size = layout.tensor_parallel;
  KVASIR_ASSIGN_OR_RETURN(auto c, dist::ShmCommunicator::create(o));
  return std::unique_ptr<dist::Communicator>(std::move(c));
}

}  // namespace

StatusOr<RankSetup> set_up_rank(const EngineArgs& args, TensorParallelProcesses* tp) {
  RankSetup r;
#ifdef KVASIR_HAVE_CUDA
  // The CUDA backend drives GPU r for rank r and its device communicator (a custom all-reduce over
  // CUDA IPC) assumes one host, so a group over TCP (--nnodes, mpirun) runs on the CPU only.
  if (tp != nullptr && tp->over_tcp &&
      (args.device == "cuda" || (args.device == "auto" && cuda_device_count() > 0)))
    return unimplemented("tensor parallelism over --nnodes or mpirun runs on the CPU backend only (not supported yet "
                         "on CUDA, whose ranks must share one host); pass --device cpu");
#endif
  LoadOptions lo = LoadOptions::from(args);
  const dist::ParallelLayout layout = args.parallel_layout();
  if (tp != nullptr && tp->comm->world_size() != layout.world_size())
    return internal_error("the group has " + std::to_string(tp->comm->world_size()) + " ranks, the layout " +
                          std::to_string(layout.world_size()));
  if (tp != nullptr && layout.pipeline_parallel > 1) {
    dist::Communicator& world = *tp->comm;
    lo.model.pp = PipelineParallelGroup{layout.pp_rank(world.rank()), layout.pipeline_parallel, &world};
    lo.model.layer_partition = pipeline_layer_partition();
    if (layout.tensor_parallel > 1) {
      // Each stage's own tensor-parallel group is a shared-memory one: its ranks must share a host.
      if (tp->over_tcp)
        return unimplemented("--pipeline-parallel-size with --tensor-parallel-size > 1 over --nnodes or mpirun is not "
                             "supported yet (a stage's tensor-parallel ranks meet over shared memory); use "
                             "--tensor-parallel-size 1 with --pipeline-parallel-size across hosts");
      KVASIR_ASSIGN_OR_RETURN(r.stage_comm, join_stage_group(world, layout));
      lo.model.tp = TensorParallelGroup{layout.tp_rank(world.rank()), layout.tensor_parallel, r.stage_comm.get(),
                                        args.enable_expert_parallel};
    }
  } else if (tp != nullptr) {
    lo.model.tp = TensorParallelGroup{tp->comm->rank(), tp->comm->world_size(), tp->comm.get(),
                                      args.enable_expert_parallel};
  }
  KVASIR_ASSIGN_OR_RETURN(r.model, load_model(args.model.empty() ? default_model_path() : args.model, lo));
  r.max_model_len = resolve_max_model_len(args, r.model->config);
  KVASIR_ASSIGN_OR_RETURN(r.num_kv_blocks, plan_num_kv_blocks(*r.model, args));
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
  DraftModelRef draft;
  if (args.speculative.method == "draft_model") {
    KVASIR_ASSIGN_OR_RETURN(r.draft, load_draft_model(args, *r.model, r.num_kv_blocks));
    draft = DraftModelRef{r.draft.model->model.get(), r.draft.cache.get(), args.max_num_batched_tokens};
  }
  r.runner = std::make_unique<ModelRunner>(*r.model->model, *r.cache, rc, draft);
  return r;
}

}  // namespace kvasir
