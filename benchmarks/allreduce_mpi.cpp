// allreduce_mpi.cpp: the reference point for bench_allreduce: MPI_Allreduce (OpenMPI's
// tuned algorithms over its shared-memory btl, "vader") on the same sizes.
// Usage (bench_allreduce launches it): mpirun -np N allreduce_mpi BYTES...
// Rank 0 prints one line per size: "<bytes> <seconds per all-reduce>".
// Read next: allreduce.cpp.
#include <mpi.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  for (int a = 1; a < argc; ++a) {
    const long long bytes = std::atoll(argv[a]);
    const long long n = bytes / 4;  // float32 elements, as in bench_allreduce
    std::vector<float> buf(static_cast<size_t>(n), 1.0f);
    // same iteration rule as bench_allreduce: ~256 MiB of payload, 3 to 200 calls
    const int iters = static_cast<int>(std::clamp<long long>((256LL << 20) / bytes, 3, 200));
    MPI_Allreduce(MPI_IN_PLACE, buf.data(), static_cast<int>(n), MPI_FLOAT, MPI_SUM,
                  MPI_COMM_WORLD);  // warm-up
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    for (int i = 0; i < iters; ++i)
      MPI_Allreduce(MPI_IN_PLACE, buf.data(), static_cast<int>(n), MPI_FLOAT, MPI_SUM,
                    MPI_COMM_WORLD);
    double local = (MPI_Wtime() - t0) / iters, slowest = 0;
    MPI_Reduce(&local, &slowest, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
    if (rank == 0) std::printf("%lld %.9f\n", bytes, slowest);
  }
  MPI_Finalize();
  return 0;
}
