// dplab.h: one include for programs and tutorials: tensors, autograd, ops.
// (nn, optim, data and io have their own headers under framework/.)
#pragma once
#include "framework/autograd/engine.h"
#include "framework/autograd/grad_mode.h"
#include "framework/autograd/node.h"
#include "framework/ops/ops.h"
#include "framework/tensor/allocator.h"
#include "framework/tensor/random.h"
#include "framework/tensor/tensor.h"
