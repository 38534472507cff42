// dataloader.cpp: cutting an epoch's indices into batches, and the prefetch thread.
// The thread and the training loop share a queue of at most kQueueDepth ready batches:
// the thread waits while it is full, the loop waits while it is empty, so at most two
// batches beyond the one in use exist (bounded memory) and the loop rarely waits for data.
// An exception in the thread travels through the queue and is rethrown in the loop;
// stopping early sets stop_, wakes the thread and joins it.
// Read next: datasets/fashion_mnist.cpp.
#include "framework/data/dataloader.h"

#include <condition_variable>
#include <deque>
#include <exception>
#include <mutex>
#include <thread>

#include "framework/autograd/grad_mode.h"
#include "framework/error.h"

namespace dplab::data {

namespace detail {

class EpochRun {
 public:
  static constexpr size_t kQueueDepth = 2;

  EpochRun(std::shared_ptr<Dataset> dataset, std::vector<std::vector<int64_t>> batches,
           bool prefetch)
      : dataset_(std::move(dataset)), batches_(std::move(batches)) {
    if (prefetch && !batches_.empty()) worker_ = std::thread([this] { worker_loop(); });
  }

  ~EpochRun() {
    {
      std::lock_guard lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    if (worker_.joinable()) worker_.join();
  }

  EpochRun(const EpochRun&) = delete;
  EpochRun& operator=(const EpochRun&) = delete;

  // The next batch into `out`; false once every batch has been handed out.
  bool next(Example& out) {
    if (consumed_ == batches_.size()) return false;
    const size_t b = consumed_++;
    if (!worker_.joinable()) {  // no prefetch: fetch here, exceptions propagate directly
      out = dataset_->get_batch(batches_[b]);
      return true;
    }
    Item item;
    {
      std::unique_lock lock(mu_);
      cv_.wait(lock, [&] { return !queue_.empty(); });  // the worker always delivers or fails
      item = std::move(queue_.front());
      queue_.pop_front();
    }
    cv_.notify_all();  // room in the queue again
    if (item.error) {
      consumed_ = batches_.size();  // the worker has stopped: this epoch is over
      std::rethrow_exception(item.error);
    }
    out = std::move(item.batch);
    return true;
  }

 private:
  struct Item {
    Example batch;
    std::exception_ptr error;
  };

  void worker_loop() {
    NoGradGuard no_grad;  // grad mode is per thread; data preparation records nothing
    for (const auto& indices : batches_) {
      {
        std::unique_lock lock(mu_);
        cv_.wait(lock, [&] { return stop_ || queue_.size() < kQueueDepth; });
        if (stop_) return;
      }
      Item item;
      try {
        item.batch = dataset_->get_batch(indices);  // the slow part, outside the lock
      } catch (...) {
        item.error = std::current_exception();
      }
      const bool failed = item.error != nullptr;
      {
        std::lock_guard lock(mu_);
        queue_.push_back(std::move(item));
      }
      cv_.notify_all();
      if (failed) return;
    }
  }

  std::shared_ptr<Dataset> dataset_;
  std::vector<std::vector<int64_t>> batches_;
  size_t consumed_ = 0;  // touched by the consumer only

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Item> queue_;  // guarded by mu_
  bool stop_ = false;       // guarded by mu_
  std::thread worker_;      // started last, after every member it uses exists
};

}  // namespace detail

DataLoader::DataLoader(std::shared_ptr<Dataset> dataset, DataLoaderOptions options)
    : dataset_(std::move(dataset)), options_(std::move(options)) {
  DPLAB_CHECK(dataset_ != nullptr, "DataLoader: expected a dataset, got nullptr");
  DPLAB_CHECK(options_.batch_size > 0, "DataLoader: batch_size must be > 0, got {}",
              options_.batch_size);
  DPLAB_CHECK(!(options_.shuffle && options_.sampler),
              "DataLoader: shuffle and sampler are mutually exclusive (a sampler decides the "
              "order; give it a seed instead)");
  if (options_.sampler) {
    sampler_ = options_.sampler;
  } else if (options_.shuffle) {
    sampler_ = std::make_shared<RandomSampler>(dataset_->size(), options_.seed);
  } else {
    sampler_ = std::make_shared<SequentialSampler>(dataset_->size());
  }
}

int64_t DataLoader::len() const {
  const int64_t n = sampler_->size(), b = options_.batch_size;
  return options_.drop_last ? n / b : (n + b - 1) / b;
}

DataLoader::Iterator DataLoader::begin() {
  sampler_->set_epoch(epoch_);
  ++epoch_;
  std::vector<int64_t> order = sampler_->indices();
  DPLAB_CHECK(static_cast<int64_t>(order.size()) == sampler_->size(),
              "DataLoader: the sampler said it yields {} indices but gave {}", sampler_->size(),
              order.size());
  std::vector<std::vector<int64_t>> batches;
  const size_t b = static_cast<size_t>(options_.batch_size);
  for (size_t start = 0; start < order.size(); start += b) {
    const size_t stop = std::min(order.size(), start + b);
    if (options_.drop_last && stop - start < b) break;
    batches.emplace_back(order.begin() + static_cast<std::ptrdiff_t>(start),
                         order.begin() + static_cast<std::ptrdiff_t>(stop));
  }
  return Iterator(
      std::make_shared<detail::EpochRun>(dataset_, std::move(batches), options_.prefetch));
}

DataLoader::Iterator::Iterator(std::shared_ptr<detail::EpochRun> run)
    : run_(std::move(run)), current_(std::make_shared<Example>()) {
  ++*this;  // fetch batch 0 (or find the epoch empty)
}

DataLoader::Iterator& DataLoader::Iterator::operator++() {
  if (!done_ && !run_->next(*current_)) {
    done_ = true;
    run_.reset();  // stops and joins the prefetch thread now, not when the iterator dies
  }
  return *this;
}

}  // namespace dplab::data
