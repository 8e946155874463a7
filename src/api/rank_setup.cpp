#include "api/rank_setup.h"

#include "loader/weight_source.h"
#include "model/registry.h"
#include "model/tensor_parallel.h"
#include "setup/draft_model.h"
#include "setup/kv_cache_sizing.h"

namespace kvasir {

Status check_tensor_parallel_model(const EngineArgs& args) {
  if (args.tensor_parallel_size <= 1 || args.load_format != "auto") return Status();
  // A checkpoint or config that cannot be read is rank 0's load to report, with its own message.
  auto weights = open_weights(args.model.empty() ? default_model_path() : args.model);
  if (!weights.ok()) return Status();
  auto loaded = load_model_config(**weights);
  if (!loaded.ok()) return Status();
  const ModelConfig& config = *loaded;
  const WeightSource& src = **weights;
  const Status s = check_tensor_parallel(config, args.tensor_parallel_size, [&src](const WeightSpec& spec) {
    return src.has_tensor(spec.gguf.name) || src.has_tensor(spec.hf.name);
  });
  if (s.ok()) return s;
  return Status(s.code(), "--tensor-parallel-size " + std::to_string(args.tensor_parallel_size) + ": " + s.message());
}

StatusOr<RankSetup> set_up_rank(const EngineArgs& args, TensorParallelProcesses* tp) {
  RankSetup r;
  LoadOptions lo = LoadOptions::from(args);
  if (tp != nullptr) lo.model.tp = TensorParallelGroup{tp->comm->rank(), tp->comm->world_size(), tp->comm.get()};
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
