// GroupCommunicator (tp_communicator.hpp).
#include "dist/tp_communicator.hpp"

#include <chrono>

namespace trainer::dist {
namespace {

template <typename Fn>
auto timed(double& total, Fn&& fn) {
  const auto t0 = std::chrono::steady_clock::now();
  auto done = [&] { total += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(); };
  if constexpr (std::is_void_v<decltype(fn())>) {
    fn();
    done();
  } else {
    auto r = fn();
    done();
    return r;
  }
}

}  // namespace

void GroupCommunicator::all_reduce(torch::Tensor& t, tensor_parallel::ReduceOp op) {
  timed(seconds_, [&] { group_.all_reduce(t, op == tensor_parallel::ReduceOp::Max ? Reduce::Max : Reduce::Sum, "tp"); });
}

torch::Tensor GroupCommunicator::all_gather(const torch::Tensor& t, int64_t dim) {
  return timed(seconds_, [&] { return group_.all_gather(t, dim, "tp"); });
}

torch::Tensor GroupCommunicator::reduce_scatter(const torch::Tensor& t, int64_t dim) {
  return timed(seconds_, [&] { return group_.reduce_scatter(t, dim, "tp"); });
}

}  // namespace trainer::dist
