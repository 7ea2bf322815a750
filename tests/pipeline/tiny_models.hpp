// The pipeline unit tests' tiny models: a GPT of `n_layer` blocks (n_layer + 2 units) with an odd
// vocabulary, and a ViT of 3 blocks on 8 x 8 images (5 units); dropout as asked, batches of 8.
#pragma once

#include "config/config.hpp"

namespace trainer::test {

inline config::RunConfig tiny_stage_gpt(int64_t n_layer, double dropout = 0) {
  config::RunConfig c;
  c.model.arch = "gpt";
  c.model.vocab_size = 61;  // odd on purpose
  c.model.block_size = 8;
  c.model.n_layer = n_layer;
  c.model.n_head = 2;
  c.model.n_embd = 16;
  c.model.dropout = dropout;
  c.train.batch_size = 8;
  return c;
}

inline config::RunConfig tiny_stage_vit(double dropout = 0, double attention_dropout = 0) {
  config::RunConfig c;
  c.model.arch = "vit";
  c.model.image_size = 8;
  c.model.patch_size = 4;
  c.model.in_channels = 1;
  c.model.num_layers = 3;
  c.model.num_heads = 2;
  c.model.hidden_dim = 8;
  c.model.mlp_dim = 16;
  c.model.num_classes = 5;
  c.model.dropout = dropout;
  c.model.attention_dropout = attention_dropout;
  c.train.batch_size = 8;
  return c;
}

}  // namespace trainer::test
