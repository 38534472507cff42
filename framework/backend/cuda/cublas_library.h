// cublas_library.h: cuBLAS, opened the first time a CUDA device is set up, not when a
// program starts. libcublas and the libcublasLt it pulls in are over half a gigabyte; the
// dynamic loader applies their relocations (hundreds of thousands of pointers, each a page
// it writes) before main, about a tenth of a second of every process's life, paid by every
// program linked with dplab: a CPU-only test, a tutorial, each rank of a coursework grade.
// So the backend calls cuBLAS through this table of function pointers, filled by dlopen and
// dlsym once, and the programs do not link -lcublas at all.
// Read next: cuda_devices.cpp (where the first device asks for it).
#pragma once
#include <cublas_v2.h>

namespace dplab::cuda {

// The cuBLAS entry points dplab calls, with cuBLAS's own signatures. GemmEx and
// GemmStridedBatchedEx are written out: cuBLAS 13's header also declares C++ overloads of
// them (a legacy compute type), so decltype cannot pick one.
struct CublasLibrary {
  decltype(&cublasCreate) create;
  decltype(&cublasDestroy) destroy;
  decltype(&cublasSetStream) set_stream;
  decltype(&cublasSgemm) sgemm;
  decltype(&cublasSgemmStridedBatched) sgemm_strided_batched;
  cublasStatus_t (*gemm_ex)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int m, int n,
                            int k, const void* alpha, const void* A, cudaDataType Atype, int lda,
                            const void* B, cudaDataType Btype, int ldb, const void* beta,
                            void* C, cudaDataType Ctype, int ldc, cublasComputeType_t,
                            cublasGemmAlgo_t);
  cublasStatus_t (*gemm_strided_batched_ex)(
      cublasHandle_t, cublasOperation_t, cublasOperation_t, int m, int n, int k,
      const void* alpha, const void* A, cudaDataType Atype, int lda, long long strideA,
      const void* B, cudaDataType Btype, int ldb, long long strideB, const void* beta, void* C,
      cudaDataType Ctype, int ldc, long long strideC, int batch, cublasComputeType_t,
      cublasGemmAlgo_t);
};

// Opens libcublas.so.<major this build was compiled against> on the first call (thread-safe);
// throws CudaError naming the file and the loader's reason when it cannot, or when a symbol
// is missing (a cuBLAS older than the headers).
const CublasLibrary& cublas();

}  // namespace dplab::cuda
