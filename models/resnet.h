// resnet.h: a small ResNet with BatchNorm for 28x28 grey images, torchvision's names.
//   conv1 3x3 1->16, bn1, ReLU                        [N, 16, 28, 28]
//   layer1: BasicBlock 16->16, stride 1               [N, 16, 28, 28]
//   layer2: BasicBlock 16->32, stride 2 (projection)  [N, 32, 14, 14]
//   layer3: BasicBlock 32->64, stride 2 (projection)  [N, 64, 7, 7]
//   global average pool, fc 64->10                    [N, 10]
// blocks = {1, 1, 1} blocks per stage by default ({2, 2, 2} is ResNet-14-like).
// It is the model with buffers (BatchNorm running statistics): the one that shows why
// DataParallel broadcasts buffers and why SyncBatchNorm exists.
// Read next: models.h.
#pragma once
#include <memory>
#include <vector>

#include "framework/nn/layers.h"

namespace dplab::models {

// out = relu(bn2(conv2(relu(bn1(conv1(x))))) + shortcut(x)); the shortcut is x itself, or
// downsample = Sequential(conv 1x1 stride s, BatchNorm2d) when the shape changes.
class BasicBlock : public nn::Module {
 public:
  BasicBlock(int64_t in_channels, int64_t out_channels, int64_t stride = 1);
  Tensor forward(const Tensor& x) override;  // [N, in, H, W] -> [N, out, H/stride, W/stride]
  std::string name() const override { return "BasicBlock"; }
  std::shared_ptr<nn::Module> make_empty_copy() const override;
  // convert_sync_batchnorm swaps bn1 / bn2 in the module tree; this points the members at
  // the new layers too, or forward would keep calling the old ones.
  bool rebind_child(const std::string& name,
                    const std::shared_ptr<nn::Module>& replacement) override;

  int64_t in_channels, out_channels, stride;
  std::shared_ptr<nn::Conv2d> conv1, conv2;
  std::shared_ptr<nn::BatchNorm> bn1, bn2;  // BatchNorm2d, or SyncBatchNorm once converted
  std::shared_ptr<nn::ReLU> relu;
  std::shared_ptr<nn::Sequential> downsample;  // null when the shortcut is the identity
};

class ResNet : public nn::Module {
 public:
  explicit ResNet(std::vector<int64_t> blocks = {1, 1, 1}, int64_t num_classes = 10);
  Tensor forward(const Tensor& x) override;  // [N, 1, H, W] -> [N, num_classes]
  std::string name() const override { return "ResNet"; }
  std::shared_ptr<nn::Module> make_empty_copy() const override;
  bool rebind_child(const std::string& name,
                    const std::shared_ptr<nn::Module>& replacement) override;

  std::vector<int64_t> blocks;
  int64_t num_classes;
  std::shared_ptr<nn::Conv2d> conv1;
  std::shared_ptr<nn::BatchNorm> bn1;  // BatchNorm2d, or SyncBatchNorm once converted
  std::shared_ptr<nn::ReLU> relu;
  std::shared_ptr<nn::Sequential> layer1, layer2, layer3;
  std::shared_ptr<nn::Linear> fc;
};

}  // namespace dplab::models
