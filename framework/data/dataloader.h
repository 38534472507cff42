// dataloader.h: batches from a Dataset, in sampler order, with the next batch prepared on a
// background thread while the current one trains (torch.utils.data.DataLoader with one
// worker and prefetch_factor 2, but a thread, not a process).
//   data::DataLoader loader(dataset, {.batch_size = 64, .shuffle = true, .seed = 1});
//   for (int epoch = 0; epoch < 10; ++epoch)
//     for (auto& batch : loader) { ... batch.data, batch.target ... }
// Each `for` over the loader is one epoch: it uses epoch() (set_epoch, or the count of
// iterations started so far) so shuffling is seed + epoch: deterministic, new every epoch.
// Read next: sampler.h (orders), datasets/ (Fashion-MNIST and synthetic sets).
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "framework/data/dataset.h"
#include "framework/data/sampler.h"

namespace dplab::data {

struct DataLoaderOptions {
  int64_t batch_size = 64;
  bool shuffle = false;  // a RandomSampler(size, seed); not together with `sampler`
  uint64_t seed = 0;
  bool drop_last = false;  // drop the last batch when it is smaller than batch_size
  bool prefetch = true;    // prepare batches on a background thread (queue of 2)
  std::shared_ptr<Sampler> sampler = nullptr;  // e.g. a DistributedSampler; default: by shuffle
};

namespace detail {
class EpochRun;  // one epoch in progress: batch list, prefetch thread and queue (dataloader.cpp)
}

class DataLoader {
 public:
  DataLoader(std::shared_ptr<Dataset> dataset, DataLoaderOptions options = {});

  // Number of batches per epoch: ceil(n / batch_size), or floor with drop_last, where n is
  // the sampler's size (the whole dataset unless a sampler says otherwise).
  int64_t len() const;
  // The epoch the next iteration uses; each begin() then moves on to epoch + 1.
  void set_epoch(int64_t epoch) { epoch_ = epoch; }
  int64_t epoch() const { return epoch_; }
  const Dataset& dataset() const { return *dataset_; }
  const Sampler& sampler() const { return *sampler_; }

  struct Sentinel {};
  // An input iterator over one epoch. Copies share the epoch; when the last copy goes
  // (the loop ended, or `break`), the prefetch thread is stopped and joined.
  class Iterator {
   public:
    Example& operator*() const { return *current_; }
    Example* operator->() const { return current_.get(); }
    Iterator& operator++();  // rethrows an exception the dataset threw for this batch
    bool operator==(const Sentinel&) const { return done_; }

   private:
    friend class DataLoader;
    explicit Iterator(std::shared_ptr<detail::EpochRun> run);
    std::shared_ptr<detail::EpochRun> run_;
    std::shared_ptr<Example> current_;
    bool done_ = false;
  };

  // Starts an epoch: draws the order, starts the prefetch thread, waits for batch 0.
  Iterator begin();
  Sentinel end() const { return {}; }

 private:
  std::shared_ptr<Dataset> dataset_;
  DataLoaderOptions options_;
  std::shared_ptr<Sampler> sampler_;
  int64_t epoch_ = 0;
};

}  // namespace dplab::data
