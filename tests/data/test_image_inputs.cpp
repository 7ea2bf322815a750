// data/image_inputs: files for `trainer predict` become exactly the tensors the evaluation path of
// the data pipeline makes of them (decode, resize, the training split's normalisation).
#include <algorithm>
#include <catch2/catch.hpp>

#include "data/dataset.hpp"
#include "data/image_inputs.hpp"
#include "fixtures.hpp"

using namespace trainer;
using namespace trainer::test;

namespace {

// An image folder dataset with a validation split and statistics computed from the training split.
config::DataConfig inputs_folder_cfg(const fs::path& dir, int64_t image_size) {
  config::DataConfig d;
  d.format = config::DataFormat::ImageFolder;
  d.path = (dir / "train").string();
  d.val_path = (dir / "val").string();
  d.image_size = image_size;
  d.normalize.mode = config::NormalizeMode::MeanStd;  // mean and std left to be computed
  return d;
}

}  // namespace

TEST_CASE("image inputs equal the validation samples of the pipeline, bit for bit, also with data.val_resize",
          "[unit]") {
  for (const bool png : {true, false}) {
    for (const auto [size, val_resize] : {std::pair<int64_t, int64_t>{0, 0}, {6, 0}, {6, 8}}) {
      INFO((png ? "png" : "jpeg") << ", data.image_size " << size << ", data.val_resize " << val_resize);
      auto dir = scratch_dir("image_inputs");
      write_image_folder(dir / "train", {"ant", "bee"}, 4, 9, 11, png);
      write_image_folder(dir / "val", {"ant", "bee"}, 3, 9, 11, png);
      auto cfg = inputs_folder_cfg(dir, size);
      cfg.val_resize = val_resize;
      const auto model = resnet(3, 2);
      const auto pair = data::create_datasets(cfg, model, 0);
      const auto spec = data::image_input_spec(cfg, model, 0);
      CHECK(spec.classes == std::vector<std::string>{"ant", "bee"});
      CHECK(std::vector<int64_t>{spec.channels, spec.height, spec.width} == pair.val->sample_shape());
      const auto files = data::expand_image_inputs({(dir / "val").string()}, false);
      REQUIRE(files.size() == 6);
      const auto batch = data::load_image_batch(files, spec);
      for (int64_t i = 0; i < 6; ++i) CHECK(torch::equal(batch[i], pair.val->get(i, 0, false).input));
      if (val_resize == 0) continue;
      // the margin is the validation split's alone: its crops differ from the plain resize's, the
      // training split's samples do not (statistics fixed, so only the geometry can differ)
      auto fixed = cfg;
      fixed.normalize.mean = {0.5};
      fixed.normalize.std = {0.25};
      auto plain = fixed;
      plain.val_resize = 0;
      const auto with = data::create_datasets(fixed, model, 0), without = data::create_datasets(plain, model, 0);
      CHECK(!torch::equal(with.val->get(0, 0, false).input, without.val->get(0, 0, false).input));
      CHECK(torch::equal(with.train->get(0, 0, false).input, without.train->get(0, 0, false).input));
    }
  }
}

TEST_CASE("image inputs of another size are resized as data.image_size does, odd inputs are named", "[unit]") {
  auto dir = scratch_dir("image_inputs_resize");
  write_image_folder(dir / "train", {"ant", "bee"}, 2, 8, 8, true);
  write_image_folder(dir / "val", {"ant", "bee"}, 1, 8, 8, true);
  write_image_folder(dir / "big", {"ant", "bee"}, 1, 20, 14, true);
  auto cfg = inputs_folder_cfg(dir, 0);
  cfg.normalize.mean = {0.5};  // fixed, so the two pipelines below normalise alike
  cfg.normalize.std = {0.25};
  const auto spec = data::image_input_spec(cfg, resnet(3, 2), 0);  // 8x8 inputs
  // a pipeline that reads the 20x14 images with data.image_size 8
  auto resizing = cfg;
  resizing.path = (dir / "big").string();
  resizing.val_path.clear();
  resizing.image_size = 8;
  const auto big = data::create_datasets(resizing, resnet(3, 2), 0).train;
  const auto batch = data::load_image_batch({(dir / "big" / "ant" / "img_0.png").string()}, spec);
  REQUIRE(batch.sizes() == torch::IntArrayRef({1, 3, 8, 8}));
  CHECK(torch::equal(batch[0], big->get(0, 0, false).input));

  CHECK_THROWS_WITH(data::expand_image_inputs({(dir / "none").string()}, false),
                    (dir / "none").string() + ": no such file or folder");
  fs::create_directories(dir / "empty");
  CHECK_THROWS_WITH(data::expand_image_inputs({(dir / "empty").string()}, false),
                    (dir / "empty").string() + ": the folder holds no .jpg/.jpeg/.png images");
  // a folder's image named but not there (a link to nothing) is said, not left out silently
  fs::create_symlink(dir / "nothing.png", dir / "big" / "ant" / "gone.png");
  CHECK_THROWS_WITH(data::expand_image_inputs({(dir / "big").string()}, false),
                    (dir / "big" / "ant" / "gone.png").string() + ": a symbolic link to " +
                        (dir / "nothing.png").string() + ": No such file or directory");
  // data.on_bad_sample: skip leaves it out, as it leaves out a file that does not decode
  const auto kept = data::expand_image_inputs({(dir / "big").string()}, true);
  CHECK_FALSE(kept.empty());
  CHECK(std::find(kept.begin(), kept.end(), (dir / "big" / "ant" / "gone.png").string()) == kept.end());
  write_file(dir / "fake.png", "no pixels here");
  CHECK_THROWS_WITH(data::load_image_batch({(dir / "fake.png").string()}, spec),
                    Catch::Matchers::StartsWith((dir / "fake.png").string()));
}
