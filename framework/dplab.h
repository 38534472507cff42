// dplab.h: one include for programs and tutorials: tensors, autograd, ops, set_num_threads
// (how many threads the CPU kernels may use, like torch.set_num_threads) and kernels_summary()
// (which CPU kernels run, for a program's "kernels: ..." line).
// (nn, optim, data and io have their own headers under framework/.)
#pragma once
#include "framework/autograd/engine.h"
#include "framework/autograd/grad_mode.h"
#include "framework/autograd/node.h"
#include "framework/backend/cpu/cpu_dispatch.h"  // kernels_summary, the kernel settings
#include "framework/backend/cpu/cpu_threads.h"
#include "framework/ops/ops.h"
#include "framework/tensor/allocator.h"
#include "framework/tensor/random.h"
#include "framework/tensor/tensor.h"
