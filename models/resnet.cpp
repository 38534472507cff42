// resnet.cpp: BasicBlock and ResNet (see resnet.h). Convolutions before a BatchNorm have
// no bias: the BatchNorm's own bias would cancel it.
#include "models/resnet.h"

#include "framework/ops/ops.h"

namespace dplab::models {

namespace {
std::shared_ptr<nn::Conv2d> conv3x3(int64_t in, int64_t out, int64_t stride) {
  return std::make_shared<nn::Conv2d>(
      in, out, 3, nn::Conv2dOptions{.stride = stride, .padding = 1, .bias = false});
}
}  // namespace

BasicBlock::BasicBlock(int64_t in, int64_t out, int64_t s)
    : in_channels(in), out_channels(out), stride(s) {
  conv1 = register_module("conv1", conv3x3(in, out, stride));
  bn1 = register_module("bn1", std::make_shared<nn::BatchNorm2d>(out));
  relu = register_module("relu", std::make_shared<nn::ReLU>());
  conv2 = register_module("conv2", conv3x3(out, out, 1));
  bn2 = register_module("bn2", std::make_shared<nn::BatchNorm2d>(out));
  if (stride != 1 || in != out) {
    // 1x1 projection: [N, in, H, W] -> [N, out, H/stride, W/stride], to match the main path.
    downsample = register_module(
        "downsample",
        std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::Module>>{
            std::make_shared<nn::Conv2d>(in, out, 1,
                                         nn::Conv2dOptions{.stride = stride, .bias = false}),
            std::make_shared<nn::BatchNorm2d>(out)}));
  }
}

Tensor BasicBlock::forward(const Tensor& x) {
  Tensor h = relu->forward(bn1->forward(conv1->forward(x)));
  h = bn2->forward(conv2->forward(h));
  Tensor shortcut = downsample ? downsample->forward(x) : x;
  return relu->forward(add(h, shortcut));  // d(a+b) sends the gradient to both paths
}

std::shared_ptr<nn::Module> BasicBlock::make_empty_copy() const {
  return std::make_shared<BasicBlock>(in_channels, out_channels, stride);
}

bool BasicBlock::rebind_child(const std::string& name,
                              const std::shared_ptr<nn::Module>& replacement) {
  auto bn = std::dynamic_pointer_cast<nn::BatchNorm>(replacement);
  if (!bn) return false;
  if (name == "bn1") bn1 = bn;
  else if (name == "bn2") bn2 = bn;
  else return false;
  return true;
}

ResNet::ResNet(std::vector<int64_t> blocks_, int64_t classes)
    : blocks(std::move(blocks_)), num_classes(classes) {
  DPLAB_CHECK(blocks.size() == 3 && blocks[0] > 0 && blocks[1] > 0 && blocks[2] > 0,
              "ResNet: expected 3 positive block counts (one per stage), got {} stages",
              blocks.size());
  conv1 = register_module("conv1", conv3x3(1, 16, 1));
  bn1 = register_module("bn1", std::make_shared<nn::BatchNorm2d>(16));
  relu = register_module("relu", std::make_shared<nn::ReLU>());
  const int64_t widths[3] = {16, 32, 64};
  std::shared_ptr<nn::Sequential>* stages[3] = {&layer1, &layer2, &layer3};
  int64_t in = 16;
  for (int i = 0; i < 3; ++i) {
    auto stage = std::make_shared<nn::Sequential>();
    for (int64_t b = 0; b < blocks[i]; ++b) {
      const int64_t stride =
          (i > 0 && b == 0) ? 2 : 1;  // the first block of stages 2, 3 halves H, W
      stage->push_back(std::make_shared<BasicBlock>(in, widths[i], stride));
      in = widths[i];
    }
    *stages[i] = register_module("layer" + std::to_string(i + 1), stage);
  }
  fc = register_module("fc", std::make_shared<nn::Linear>(64, num_classes));
}

Tensor ResNet::forward(const Tensor& x) {
  DPLAB_CHECK(x.dim() == 4 && x.size(1) == 1, "ResNet: expected input [N, 1, H, W], got {}",
              shape_str(x.shape()));
  Tensor h = relu->forward(bn1->forward(conv1->forward(x)));  // [N, 16, H, W]
  h = layer3->forward(layer2->forward(layer1->forward(h)));   // [N, 64, H/4, W/4]
  h = mean(h, {2, 3});                                        // global average pool: [N, 64]
  return fc->forward(h);                                      // [N, num_classes]
}

std::shared_ptr<nn::Module> ResNet::make_empty_copy() const {
  return std::make_shared<ResNet>(blocks, num_classes);
}

bool ResNet::rebind_child(const std::string& name, const std::shared_ptr<nn::Module>& replacement) {
  auto bn = std::dynamic_pointer_cast<nn::BatchNorm>(replacement);
  if (name != "bn1" || !bn) return false;
  bn1 = bn;
  return true;
}

}  // namespace dplab::models
