// The MPI bootstrap: when the job was started by mpirun, MPI_COMM_WORLD
// already knows every rank, so the bootstrap collectives are MPI's.
//
// Courier initializes MPI only when the program has not (and then finalizes
// it when the bootstrap goes away), so a program that uses MPI itself keeps
// control of MPI's lifetime.
#include "core/bootstrap/bootstrap.hpp"
#include "core/check.hpp"

#if defined(COURIER_HAVE_MPI)

#include <mpi.h>

#include <climits>
#include <vector>

#include "core/bootstrap/collective_messages.hpp"
#include "core/log.hpp"

namespace courier {

namespace {

constexpr std::string_view kComponent = "bootstrap";

std::string mpi_error_text(int code) {
  char text[MPI_MAX_ERROR_STRING] = {};
  int length = 0;
  if (MPI_Error_string(code, text, &length) != MPI_SUCCESS) return "error " + std::to_string(code);
  return std::string(text, static_cast<size_t>(length));
}

void check_mpi(int code, std::string_view call) {
  if (code != MPI_SUCCESS) fail("bootstrap: {} failed: {}", call, mpi_error_text(code));
}

class MpiBootstrap final : public Bootstrap {
 public:
  explicit MpiBootstrap(Logger& log) : log_(log) {
    int initialized = 0;
    check_mpi(MPI_Initialized(&initialized), "MPI_Initialized");
    if (!initialized) {
      // Ask for full thread support: Courier's proxy threads may call the
      // bootstrap while the application thread runs. Whatever the library
      // grants is recorded; the bootstrap itself is called from one thread at
      // a time.
      int provided = MPI_THREAD_SINGLE;
      check_mpi(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided),
                "MPI_Init_thread");
      owns_mpi_ = true;
      if (provided < MPI_THREAD_MULTIPLE) {
        log_.debug(kComponent, "MPI granted thread level {} (asked for MPI_THREAD_MULTIPLE)",
                   provided);
      }
    }
    check_mpi(MPI_Comm_rank(MPI_COMM_WORLD, &rank_), "MPI_Comm_rank");
    check_mpi(MPI_Comm_size(MPI_COMM_WORLD, &size_), "MPI_Comm_size");
    log_.info(kComponent, "MPI bootstrap: rank {} of {}{}", rank_, size_,
              owns_mpi_ ? " (MPI initialized by Courier)" : "");
  }

  ~MpiBootstrap() override {
    if (!owns_mpi_) return;
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized) MPI_Finalize();
  }

  MpiBootstrap(const MpiBootstrap&) = delete;
  MpiBootstrap& operator=(const MpiBootstrap&) = delete;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string_view kind() const override { return "mpi"; }

  std::vector<std::byte> allgather(std::span<const std::byte> mine) override {
    const uint64_t sequence = ++sequence_;
    // Sizes first, so that a mismatch is a clear error on every rank instead
    // of a truncated receive inside MPI_Allgather.
    uint64_t my_size = mine.size();
    std::vector<uint64_t> sizes(static_cast<size_t>(size_));
    check_mpi(
        MPI_Allgather(&my_size, 1, MPI_UINT64_T, sizes.data(), 1, MPI_UINT64_T, MPI_COMM_WORLD),
        "MPI_Allgather of the block sizes");
    if (auto mismatch = describe_size_mismatch(sizes, sequence)) fail("{}", *mismatch);
    if (my_size > static_cast<uint64_t>(INT_MAX)) {
      fail("bootstrap: allgather #{}: blocks of {} bytes exceed MPI's count limit of {} bytes",
           sequence, my_size, INT_MAX);
    }
    std::vector<std::byte> result(static_cast<size_t>(size_) * mine.size());
    const int count = static_cast<int>(my_size);
    check_mpi(
        MPI_Allgather(mine.data(), count, MPI_BYTE, result.data(), count, MPI_BYTE, MPI_COMM_WORLD),
        "MPI_Allgather");
    return result;
  }

  void barrier() override { check_mpi(MPI_Barrier(MPI_COMM_WORLD), "MPI_Barrier"); }

 private:
  Logger& log_;
  bool owns_mpi_ = false;
  int rank_ = 0;
  int size_ = 1;
  uint64_t sequence_ = 0;
};

}  // namespace

bool mpi_bootstrap_available() { return true; }

std::unique_ptr<Bootstrap> make_mpi_bootstrap(Logger& log) {
  return std::make_unique<MpiBootstrap>(log);
}

}  // namespace courier

#else  // !COURIER_HAVE_MPI

namespace courier {

bool mpi_bootstrap_available() { return false; }

std::unique_ptr<Bootstrap> make_mpi_bootstrap(Logger&) {
  fail(
      "bootstrap: this Courier was built without MPI support: install an MPI (Debian: "
      "libopenmpi-dev) and rebuild with -DCOURIER_WITH_MPI=ON, or use the TCP bootstrap "
      "(COURIER_BOOTSTRAP=host:port)");
}

}  // namespace courier

#endif
