// models/whitening.cpp: the patch covariance, the Jacobi eigen-decomposition and the whitening filters
// (model.whiten). LAPACK's filters for the same images: tests/python/test_models_interop.py.
#include <catch2/catch.hpp>

#include "models/whitening.hpp"
#include "test_util.hpp"

using namespace trainer;

namespace {

// (N * positions, C k^2) double: every k x k patch in (C, k, k) order, through torch's unfold
torch::Tensor all_patches(const torch::Tensor& images, int64_t k) {
  const int64_t c = images.size(1);
  return images.to(torch::kDouble).unfold(2, k, 1).unfold(3, k, 1).permute({0, 2, 3, 1, 4, 5}).reshape({-1, c * k * k});
}

}  // namespace

TEST_CASE("whitening: the patch covariance is the mean outer product of every k x k patch", "[unit]") {
  torch::manual_seed(3);
  const auto images = torch::randn({6, 2, 9, 7}) + 0.3;
  for (int64_t k : {1, 2, 3}) {
    INFO(k);
    const auto p = all_patches(images, k);
    const auto want = p.t().mm(p) / p.size(0);
    const auto got = models::patch_covariance(images, k);
    CHECK(got.sizes() == want.sizes());
    CHECK(test::max_abs_diff(got, want) < 1e-12);
  }
  CHECK_THROWS_WITH(models::patch_covariance(images, 8), "a 8x8 whitening patch does not fit images of 9x7 pixels");
  // past 4 million patches a regular grid of positions is read: close to the whole covariance
  const auto big = torch::randn({64, 1, 300, 300}) * 0.5 + torch::linspace(-1, 1, 300).view({1, 1, 1, 300});
  const auto p = all_patches(big, 2);
  CHECK(test::max_abs_diff(models::patch_covariance(big, 2), p.t().mm(p) / p.size(0)) < 0.02);
}

TEST_CASE("whitening: Jacobi eigenvectors diagonalise a symmetric matrix, largest eigenvalue first, signed", "[unit]") {
  torch::manual_seed(5);
  for (int64_t n : {1, 4, 12, 27}) {
    INFO(n);
    const auto b = torch::randn({n, n}, torch::kDouble);
    const auto a = b.mm(b.t()) + torch::diag(torch::linspace(0, 1, n, torch::kDouble));
    const auto [values, vectors] = models::symmetric_eigen(a);
    const auto lapack = std::get<0>(torch::linalg_eigh(a)).flip(0);
    CHECK(test::max_abs_diff(values, lapack) < 1e-10 * lapack.abs().max().item<double>());
    CHECK(test::max_abs_diff(vectors.mm(vectors.t()), torch::eye(n, torch::kDouble)) < 1e-12);  // orthonormal rows
    CHECK(test::max_abs_diff(vectors.mm(a).mm(vectors.t()), torch::diag(values)) < 1e-10 * values[0].item<double>());
    for (int64_t i = 0; i + 1 < n; ++i) CHECK(values[i].item<double>() >= values[i + 1].item<double>());
    for (int64_t i = 0; i < n; ++i) {
      const auto row = vectors[i];
      CHECK(row[row.abs().argmax()].item<double>() > 0);
    }
  }
  // already diagonal (no rotation at all), and a repeated eigenvalue
  const auto d = torch::diag(torch::tensor({1.0, 3.0, 2.0, 3.0}, torch::kDouble));
  const auto [dv, dvec] = models::symmetric_eigen(d);
  CHECK(torch::equal(dv, torch::tensor({3.0, 3.0, 2.0, 1.0}, torch::kDouble)));
  CHECK(dvec[0][1].item<double>() == 1.0);  // the first of equal eigenvalues keeps its place
  CHECK(dvec[1][3].item<double>() == 1.0);
}

TEST_CASE("whitening: the filters decorrelate the patches and come in +- pairs, the same on every call", "[unit]") {
  torch::manual_seed(7);
  // correlated neighbouring pixels, as in images: a smoothed noise field
  auto images = torch::randn({50, 3, 16, 16});
  images = images + images.roll(1, 3) + images.roll(1, 2) + 0.5 * images.roll(1, 1);
  const int64_t k = 2, d = 3 * k * k;
  const auto w = models::whitening_weight(images, k);
  REQUIRE(w.sizes() == std::vector<int64_t>{2 * d, 3, k, k});
  CHECK(torch::equal(w.slice(0, d), -w.slice(0, 0, d)));
  CHECK(torch::equal(w, models::whitening_weight(images, k)));  // plain loops: bit for bit
  // the first d channels' second moments over all patch positions: diag(lambda / (lambda + eps))
  const auto out = torch::conv2d(images, w.slice(0, 0, d)).to(torch::kDouble).permute({0, 2, 3, 1}).reshape({-1, d});
  const auto cov = out.t().mm(out) / out.size(0);
  const auto lambda = std::get<0>(models::symmetric_eigen(models::patch_covariance(images, k)));
  CHECK(test::max_abs_diff(cov, torch::diag(lambda / (lambda + 5e-4))) < 1e-4);
  CHECK(lambda[d - 1].item<double>() < 0.5 * lambda[0].item<double>());  // correlated: not white to start with
}
