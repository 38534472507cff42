// test_state_dict.cpp: an optimizer's state dict round trip. Train three steps straight, or
// one step, save, build a new optimizer (as after a restart), load, and two more steps:
// the parameters must come out bit-identical. State that is not finite is refused on load.
#include <doctest/doctest.h>
#include <fmt/format.h>

#include <limits>

#include "framework/optim/adam.h"
#include "framework/optim/sgd.h"
#include "tests/optim/optim_test_util.h"

using namespace dplab;
using namespace dplab::optim_test;

namespace {

template <typename Opt, typename Options>
void check_round_trip(Options options, Device dev) {
  Tensor straight = param({1, -2}, dev);
  Opt reference({straight}, options);
  for (const auto& g : kGrads) {
    set_grad(straight, g);
    reference.step();
  }

  Tensor p = param({1, -2}, dev);
  StateDict sd;
  Metadata meta;
  {
    Opt first({p}, options);
    set_grad(p, kGrads[0]);
    first.step();
    first.state_dict(sd, meta);
  }  // the first optimizer is gone; sd holds the only copy of its state
  Opt resumed({p}, options);
  resumed.load_state_dict(sd, meta);
  for (size_t k = 1; k < kGrads.size(); ++k) {
    set_grad(p, kGrads[k]);
    resumed.step();
  }
  CHECK(p.to_vector<float>() == straight.to_vector<float>());
}

}  // namespace

TEST_CASE("SGD with momentum resumes exactly from its state dict") {
  check_round_trip<optim::SGD>(optim::SGDOptions{.lr = 0.1, .momentum = 0.9, .dampening = 0.2},
                               Device("cpu"));
  check_round_trip<optim::SGD>(optim::SGDOptions{.lr = 0.1, .momentum = 0.9, .nesterov = true},
                               Device("cpu:2"));
}

TEST_CASE("Adam and AdamW resume exactly from their state dicts") {
  check_round_trip<optim::Adam>(optim::AdamOptions{.lr = 0.1, .weight_decay = 0.1}, Device("cpu"));
  check_round_trip<optim::AdamW>(optim::AdamWOptions{.lr = 0.1}, Device("cpu:1"));
}

TEST_CASE("load_state_dict restores hyper-parameters and state onto the parameter's device") {
  Tensor p = param({1, -2});
  optim::Adam saved({p}, {.lr = 0.05});
  set_grad(p, kGrads[0]);
  saved.step();
  StateDict sd;
  Metadata meta;
  saved.state_dict(sd, meta);
  CHECK(meta.at("state.0.step") == "1");
  CHECK(sd.keys() == std::vector<std::string>{"state.0.exp_avg", "state.0.exp_avg_sq"});

  Tensor q = param({1, -2}, Device("cpu:4"));
  optim::Adam loaded({q}, {.lr = 0.5});
  loaded.load_state_dict(sd, meta);
  CHECK(loaded.lr() == 0.05);  // as torch's param_groups: the saved lr wins
  CHECK(loaded.step_count(0) == 1);
  StateDict back;
  Metadata back_meta;
  loaded.state_dict(back, back_meta);
  CHECK(back.at("state.0.exp_avg").device() == Device("cpu:4"));
  CHECK(back.at("state.0.exp_avg").to_vector<float>() ==
        sd.at("state.0.exp_avg").to_vector<float>());
}

TEST_CASE("load_state_dict rejects a state dict of another optimizer or shape") {
  Tensor p = param({1, -2});
  optim::SGD sgd({p}, {.lr = 0.1, .momentum = 0.9});
  set_grad(p, kGrads[0]);
  sgd.step();
  StateDict sd;
  Metadata meta;
  sgd.state_dict(sd, meta);

  optim::Adam adam({p});
  CHECK_THROWS_WITH_AS(adam.load_state_dict(sd, meta),
                       doctest::Contains("the state dict is from SGD"), Error);
  Tensor q = param({1, 2});
  optim::SGD two({p, q}, {.lr = 0.1, .momentum = 0.9});
  CHECK_THROWS_WITH_AS(two.load_state_dict(sd, meta),
                       doctest::Contains("has 2 parameters, the state dict has 1"), Error);
  Tensor wide = param({1, 2, 3});
  optim::SGD other_shape({wide}, {.lr = 0.1, .momentum = 0.9});
  CHECK_THROWS_WITH_AS(other_shape.load_state_dict(sd, meta),
                       doctest::Contains("state.0.momentum_buffer"), Error);
  Metadata no_type = meta;
  no_type.erase("optim.type");
  CHECK_THROWS_WITH_AS(sgd.load_state_dict(sd, no_type), doctest::Contains("optim.type"), Error);
}

TEST_CASE("load_state_dict refuses non-finite state, naming the tensor, and changes nothing") {
  const float nan = std::numeric_limits<float>::quiet_NaN(),
              inf = std::numeric_limits<float>::infinity();
  Tensor p = param({1, -2});
  optim::SGD sgd({p}, {.lr = 0.1, .momentum = 0.9});
  set_grad(p, kGrads[0]);
  sgd.step();
  StateDict sd;
  Metadata meta;
  sgd.state_dict(sd, meta);
  for (float bad : {nan, inf, -inf}) {
    CAPTURE(bad);
    StateDict forged = sd;
    forged.insert("state.0.momentum_buffer", from_vector(std::vector<float>{0.5f, bad}, {2}));
    Tensor q = param({1, -2});
    optim::SGD fresh({q}, {.lr = 0.2, .momentum = 0.5});
    set_grad(q, kGrads[1]);
    fresh.step();
    StateDict before;
    Metadata before_meta;
    fresh.state_dict(before, before_meta);
    CHECK_THROWS_WITH_AS(fresh.load_state_dict(forged, meta),
                         doctest::Contains(fmt::format("\"state.0.momentum_buffer\" holds {} at "
                                                       "element 1",
                                                       bad)
                                               .c_str()),
                         Error);
    StateDict after;
    Metadata after_meta;
    fresh.state_dict(after, after_meta);
    CHECK(after_meta == before_meta);  // lr and momentum as they were
    CHECK(after.at("state.0.momentum_buffer").to_vector<float>() ==
          before.at("state.0.momentum_buffer").to_vector<float>());
  }

  optim::Adam adam({p}, {.lr = 0.05});
  set_grad(p, kGrads[0]);
  adam.step();
  StateDict asd;
  Metadata ameta;
  adam.state_dict(asd, ameta);
  struct Forgery {
    const char* key;
    std::vector<float> values;
    const char* message;
  };
  for (const Forgery& f :
       {Forgery{"state.0.exp_avg", {inf, 0.0f}, "\"state.0.exp_avg\" holds inf at element 0"},
        Forgery{"state.0.exp_avg_sq", {0.0f, nan}, "\"state.0.exp_avg_sq\" holds nan at element 1"},
        Forgery{"state.0.exp_avg_sq",
                {0.25f, -1.0f},
                "\"state.0.exp_avg_sq\" holds -1 at element 1: an average of squared gradients "
                "is never negative"}}) {
    CAPTURE(f.message);
    StateDict forged = asd;
    forged.insert(f.key, from_vector(f.values, {2}));
    Tensor q = param({1, -2});
    optim::Adam fresh({q}, {.lr = 0.5});
    CHECK_THROWS_WITH_AS(fresh.load_state_dict(forged, ameta), doctest::Contains(f.message), Error);
    CHECK(fresh.lr() == 0.5);
    CHECK(fresh.step_count(0) == 0);  // no state came in
  }
}
