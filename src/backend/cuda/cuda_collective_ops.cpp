// CudaBackend's tensor-parallel collectives: recorded like every op and run on the backend's
// stream through the group's dist::DeviceCommunicator. A call the custom all-reduce takes is
// graphable (fixed buffers, one kernel); one that goes to NCCL makes its step run eagerly.
#include <algorithm>

#include "backend/cuda/cuda_backend_impl.h"
#include "backend/cuda/cuda_check.h"

namespace kvasir {

void CudaBackend::bind_device() const { KVASIR_CUDA_CHECK(cudaSetDevice(opts_.device)); }

void CudaBackend::all_reduce_sum(Tensor& t) {
  KVASIR_CHECK_MSG(comm_ != nullptr, "this CUDA backend has no device communicator");
  KVASIR_CHECK(t.device == Device::kCuda);
  const Elem e = elem_of(t.dtype);
  const size_t bytes = static_cast<size_t>(t.numel()) * (e == Elem::kBf16 ? 2 : 4);
  OpRecord& op = queue_->add(OpKind::kAllReduce, comm_->capturable_all_reduce(bytes));
  op.elem = static_cast<int32_t>(e);
  op.all_reduce.data = t.data;
  op.all_reduce.count = t.numel();
}

void CudaBackend::all_gather_columns(const Tensor& local, Tensor& out) {
  KVASIR_CHECK_MSG(comm_ != nullptr, "this CUDA backend has no device communicator");
  KVASIR_CHECK(local.dtype == DType::kF32 && out.dtype == DType::kF32 && local.rows() == out.rows());
  const int64_t world = comm_->world_size();
  KVASIR_CHECK(local.cols() * world >= out.cols());
  const size_t per_rank = static_cast<size_t>(local.numel()) * sizeof(float);
  void* gathered = device_scratch(gathered_, gathered_cap_, per_rank * static_cast<size_t>(world));
  cuda::AllGatherColumnsOp& r =
      queue_->add(OpKind::kAllGatherColumns, comm_->capturable_all_gather(per_rank)).all_gather_columns;
  r.local = local.data;
  r.gathered = gathered;
  r.out = out.data;
  r.rows = local.rows();
  r.local_cols = local.cols();
  r.out_cols = out.cols();
  r.world = world;
}

void CudaBackend::exec_all_reduce(const cuda::AllReduceOp& op, Elem elem, cudaStream_t s) {
  const Status st = comm_->all_reduce_sum(op.data, static_cast<size_t>(op.count),
                                          elem == Elem::kBf16 ? DType::kBF16 : DType::kF32, s);
  KVASIR_CHECK_MSG(st.ok(), st.to_string().c_str());
}

void CudaBackend::exec_all_gather_columns(const cuda::AllGatherColumnsOp& op, cudaStream_t s) {
  const size_t row_bytes = static_cast<size_t>(op.local_cols) * sizeof(float);
  const size_t per_rank = static_cast<size_t>(op.rows) * row_bytes;
  const Status st = comm_->all_gather(op.local, op.gathered, per_rank, s);
  KVASIR_CHECK_MSG(st.ok(), st.to_string().c_str());
  for (int64_t r = 0; r < op.world; ++r) {
    const int64_t first = r * op.local_cols;
    const int64_t cols = std::min(op.local_cols, op.out_cols - first);
    if (cols <= 0) continue;
    KVASIR_CUDA_CHECK(cudaMemcpy2DAsync(static_cast<float*>(op.out) + first, static_cast<size_t>(op.out_cols) * sizeof(float),
                                        static_cast<const uint8_t*>(op.gathered) + static_cast<size_t>(r) * per_rank,
                                        row_bytes, static_cast<size_t>(cols) * sizeof(float), static_cast<size_t>(op.rows),
                                        cudaMemcpyDeviceToDevice, s));
  }
}

}  // namespace kvasir
