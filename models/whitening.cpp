#include "models/whitening.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <stdexcept>
#include <string>
#include <vector>

namespace trainer::models {
namespace {

constexpr double kMaxPatches = 4e6;  // about a second of double loops for 12-dim patches (RGB, k = 2)

// The patch positions read along one side: every `stride`-th of the `n` there are.
std::vector<int64_t> positions(int64_t n, int64_t stride) {
  std::vector<int64_t> p;
  for (int64_t i = 0; i < n; i += stride) p.push_back(i);
  return p;
}

// One cyclic Jacobi rotation of the symmetric `a` (n x n, row-major) zeroing a[p][q]; `v` gathers the
// rotations (its columns become the eigenvectors). The smaller rotation angle keeps it stable.
void rotate(std::vector<double>& a, std::vector<double>& v, int64_t n, int64_t p, int64_t q) {
  const double apq = a[p * n + q];
  const double theta = (a[q * n + q] - a[p * n + p]) / (2.0 * apq);
  const double t = (theta >= 0 ? 1.0 : -1.0) / (std::fabs(theta) + std::sqrt(theta * theta + 1.0));
  const double c = 1.0 / std::sqrt(t * t + 1.0), s = t * c;
  // (x, y) -> (c x - s y, s x + c y) on the elements at offsets i and j, for k = 0..n-1
  auto turn = [&](std::vector<double>& m, auto i, auto j) {
    for (int64_t k = 0; k < n; ++k) {
      const double x = m[i(k)], y = m[j(k)];
      m[i(k)] = c * x - s * y;
      m[j(k)] = s * x + c * y;
    }
  };
  auto col = [n](int64_t c0) { return [n, c0](int64_t k) { return k * n + c0; }; };
  auto row = [n](int64_t r0) { return [n, r0](int64_t k) { return r0 * n + k; }; };
  turn(a, col(p), col(q));
  turn(a, row(p), row(q));
  turn(v, col(p), col(q));
}

}  // namespace

torch::Tensor patch_covariance(const torch::Tensor& images, int64_t k) {
  if (images.dim() != 4) throw std::invalid_argument("patch_covariance needs images (N, C, H, W)");
  const auto x = images.to(torch::kFloat).contiguous();
  const int64_t n = x.size(0), c = x.size(1), h = x.size(2), w = x.size(3);
  if (k < 1 || k > h || k > w)
    throw std::invalid_argument("a " + std::to_string(k) + "x" + std::to_string(k) + " whitening patch does not fit images of " +
                                std::to_string(h) + "x" + std::to_string(w) + " pixels");
  int64_t stride = 1;  // a grid of patch positions sparse enough to stay under kMaxPatches
  while (static_cast<double>(n) * std::ceil(double(h - k + 1) / stride) * std::ceil(double(w - k + 1) / stride) > kMaxPatches)
    ++stride;
  const auto rows = positions(h - k + 1, stride), cols = positions(w - k + 1, stride);
  const int64_t d = c * k * k;
  std::vector<double> sum(static_cast<size_t>(d * d), 0.0), patch(static_cast<size_t>(d));
  const float* px = x.data_ptr<float>();
  for (int64_t i = 0; i < n; ++i)
    for (int64_t r : rows)
      for (int64_t q : cols) {
        for (int64_t ch = 0, e = 0; ch < c; ++ch)  // (C, k, k) order: a conv weight's
          for (int64_t dy = 0; dy < k; ++dy)
            for (int64_t dx = 0; dx < k; ++dx, ++e) patch[e] = px[((i * c + ch) * h + r + dy) * w + q + dx];
        for (int64_t a = 0; a < d; ++a)
          for (int64_t b = a; b < d; ++b) sum[a * d + b] += patch[a] * patch[b];
      }
  const double count = static_cast<double>(n) * static_cast<double>(rows.size() * cols.size());
  auto cov = torch::empty({d, d}, torch::kDouble);
  auto* out = cov.data_ptr<double>();
  for (int64_t a = 0; a < d; ++a)
    for (int64_t b = a; b < d; ++b) out[a * d + b] = out[b * d + a] = sum[a * d + b] / count;
  return cov;
}

std::pair<torch::Tensor, torch::Tensor> symmetric_eigen(const torch::Tensor& m) {
  if (m.dim() != 2 || m.size(0) != m.size(1)) throw std::invalid_argument("symmetric_eigen needs a square matrix");
  const int64_t n = m.size(0);
  const auto src = m.to(torch::kDouble).contiguous();
  std::vector<double> a(src.data_ptr<double>(), src.data_ptr<double>() + n * n), v(static_cast<size_t>(n * n), 0.0);
  for (int64_t i = 0; i < n; ++i) v[i * n + i] = 1.0;
  double scale = 0;
  for (double e : a) scale += e * e;
  for (int sweep = 0; sweep < 100; ++sweep) {
    double off = 0;
    for (int64_t p = 0; p < n; ++p)
      for (int64_t q = p + 1; q < n; ++q) off += a[p * n + q] * a[p * n + q];
    if (off <= 1e-30 * scale || off == 0) break;
    for (int64_t p = 0; p < n; ++p)
      for (int64_t q = p + 1; q < n; ++q)
        if (a[p * n + q] != 0) rotate(a, v, n, p, q);
  }
  std::vector<int64_t> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int64_t i, int64_t j) { return a[i * n + i] > a[j * n + j]; });
  auto values = torch::empty({n}, torch::kDouble), vectors = torch::empty({n, n}, torch::kDouble);
  for (int64_t r = 0; r < n; ++r) {
    const int64_t col = order[r];
    values[r] = a[col * n + col];
    int64_t big = 0;  // the largest component, first of equals: made positive
    for (int64_t i = 1; i < n; ++i)
      if (std::fabs(v[i * n + col]) > std::fabs(v[big * n + col])) big = i;
    const double sign = v[big * n + col] < 0 ? -1.0 : 1.0;
    auto* row = vectors.data_ptr<double>() + r * n;
    for (int64_t i = 0; i < n; ++i) row[i] = sign * v[i * n + col];
  }
  return {values, vectors};
}

torch::Tensor whitening_weight(const torch::Tensor& images, int64_t k, double eps) {
  const int64_t c = images.size(1);
  auto [values, vectors] = symmetric_eigen(patch_covariance(images, k));
  // eigenvalues of a covariance are >= 0; rounding can leave a tiny negative one
  auto scaled = vectors / torch::sqrt(values.clamp_min(0) + eps).unsqueeze(1);  // row i: v_i / sqrt(lambda_i + eps)
  auto w = scaled.to(torch::kFloat).reshape({c * k * k, c, k, k});
  return torch::cat({w, -w});  // (2 C k^2, C, k, k)
}

}  // namespace trainer::models
