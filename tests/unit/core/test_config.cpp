// Config: defaults, valid values, and a clear error naming the variable and
// the accepted range for every bad value.
#include <doctest/doctest.h>

#include <map>

#include "core/config.hpp"
#include "courier/error.hpp"

using namespace courier;

namespace {
EnvLookup env_of(std::map<std::string, std::string, std::less<>> vars) {
  return [vars = std::move(vars)](std::string_view name) -> std::optional<std::string> {
    auto it = vars.find(name);
    if (it == vars.end()) return std::nullopt;
    return it->second;
  };
}

std::string error_of(std::map<std::string, std::string, std::less<>> vars) {
  try {
    Config::load(env_of(std::move(vars)));
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}
}  // namespace

TEST_CASE("defaults follow the documented knob table") {
  Config c = Config::load(env_of({}));
  CHECK(c.fifo_depth == 1024);
  CHECK(c.max_inflight == 256);
  CHECK(c.nic_window == 0);
  CHECK(c.proxy_threads == 4);
  CHECK(c.channels == 8);
  CHECK(c.drain_batch == 32);
  CHECK(c.atomics == AtomicsMode::automatic);
  CHECK(c.timeout_s == 60);
  CHECK(c.log_level == LogLevel::warn);
  CHECK(c.job.world_size == 1);
  CHECK(c.job.rank == 0);
  CHECK(c.job.launcher == "single");
}

TEST_CASE("valid values are taken and reported as coming from the environment") {
  Config c = Config::load(env_of({{"COURIER_FIFO_DEPTH", "8192"},
                                  {"COURIER_MAX_INFLIGHT", "8192"},
                                  {"COURIER_NIC_WINDOW", "64"},
                                  {"COURIER_ATOMICS", "imm"},
                                  {"COURIER_LOG_LEVEL", "debug"}}));
  CHECK(c.fifo_depth == 8192);
  CHECK(c.max_inflight == 8192);
  CHECK(c.nic_window == 64);
  CHECK(c.atomics == AtomicsMode::imm);
  CHECK(c.log_level == LogLevel::debug);
  bool found = false;
  for (const ConfigEntry& e : c.entries) {
    if (e.name == "COURIER_FIFO_DEPTH") {
      found = true;
      CHECK(e.value == "8192");
      CHECK(e.source == "environment");
    }
  }
  CHECK(found);
}

TEST_CASE("bad values name the variable and the accepted range") {
  std::string e = error_of({{"COURIER_FIFO_DEPTH", "1000"}});
  CHECK(e.find("COURIER_FIFO_DEPTH='1000'") != std::string::npos);
  CHECK(e.find("power of two") != std::string::npos);
  CHECK(e.find("[8, 8192]") != std::string::npos);

  e = error_of({{"COURIER_FIFO_DEPTH", "16384"}});
  CHECK(e.find("COURIER_FIFO_DEPTH") != std::string::npos);

  e = error_of({{"COURIER_PROXY_THREADS", "four"}});
  CHECK(e.find("COURIER_PROXY_THREADS='four'") != std::string::npos);
  CHECK(e.find("[1, 64]") != std::string::npos);

  e = error_of({{"COURIER_PROXY_THREADS", "3x"}});
  CHECK(e.find("COURIER_PROXY_THREADS") != std::string::npos);

  e = error_of({{"COURIER_TIMEOUT_S", ""}});
  CHECK(e.find("COURIER_TIMEOUT_S") != std::string::npos);

  e = error_of({{"COURIER_ATOMICS", "fast"}});
  CHECK(e.find("COURIER_ATOMICS='fast'") != std::string::npos);
  CHECK(e.find("auto, hw, imm, provider") != std::string::npos);

  e = error_of({{"COURIER_LOG_LEVEL", "verbose"}});
  CHECK(e.find("COURIER_LOG_LEVEL") != std::string::npos);

  e = error_of({{"COURIER_FIFO_DEPTH", "64"}, {"COURIER_MAX_INFLIGHT", "128"}});
  CHECK(e.find("COURIER_MAX_INFLIGHT=128") != std::string::npos);
  CHECK(e.find("COURIER_FIFO_DEPTH=64") != std::string::npos);

  e = error_of({{"COURIER_MAX_INFLIGHT", "0"}});
  CHECK(e.find("COURIER_MAX_INFLIGHT='0'") != std::string::npos);

  e = error_of({{"COURIER_NIC_WINDOW", "100000"}});
  CHECK(e.find("COURIER_NIC_WINDOW='100000'") != std::string::npos);
}

TEST_CASE("launchers: courier-run, torchrun, mpirun, srun") {
  Config c = Config::load(env_of({{"COURIER_RANK", "1"},
                                  {"COURIER_WORLD_SIZE", "2"},
                                  {"COURIER_BOOTSTRAP", "127.0.0.1:4000"},
                                  {"COURIER_JOB_TOKEN", "secret"}}));
  CHECK(c.job.launcher == "courier-run");
  CHECK(c.job.rank == 1);
  CHECK(c.job.world_size == 2);
  CHECK(c.job.bootstrap_host == "127.0.0.1");
  CHECK(c.job.bootstrap_port == 4000);
  for (const ConfigEntry& e : c.entries) {
    if (e.name == "COURIER_JOB_TOKEN") CHECK(e.value == "(set)");  // never shown
  }

  c = Config::load(env_of({{"RANK", "3"},
                           {"WORLD_SIZE", "4"},
                           {"LOCAL_RANK", "1"},
                           {"LOCAL_WORLD_SIZE", "2"},
                           {"MASTER_ADDR", "node0"},
                           {"MASTER_PORT", "29500"},
                           {"COURIER_JOB_TOKEN", "t"}}));
  CHECK(c.job.launcher == "torchrun");
  CHECK(c.job.rank == 3);
  CHECK(c.job.local_rank == 1);
  CHECK(c.job.bootstrap_host == "node0");
  CHECK(c.job.bootstrap_port == 29501);  // torch's store owns MASTER_PORT

  c = Config::load(env_of({{"SLURM_PROCID", "5"},
                           {"SLURM_NTASKS", "8"},
                           {"COURIER_BOOTSTRAP", "head:1234"},
                           {"COURIER_JOB_TOKEN", "t"}}));
  CHECK(c.job.launcher == "srun");
  CHECK(c.job.rank == 5);
  CHECK(c.job.world_size == 8);

  // Without --ntasks-per-node, srun describes the layout per node.
  c = Config::load(env_of({{"SLURM_PROCID", "5"},
                           {"SLURM_NTASKS", "7"},
                           {"SLURM_LOCALID", "1"},
                           {"SLURM_TASKS_PER_NODE", "2(x2),3"},
                           {"SLURM_NODEID", "2"},
                           {"COURIER_BOOTSTRAP", "head:1234"},
                           {"COURIER_JOB_TOKEN", "t"}}));
  CHECK(c.job.local_size == 3);
  CHECK(c.job.local_rank == 1);
  c = Config::load(env_of({{"SLURM_PROCID", "1"},
                           {"SLURM_NTASKS", "7"},
                           {"SLURM_TASKS_PER_NODE", "2(x2),3"},
                           {"SLURM_NODEID", "0"},
                           {"COURIER_BOOTSTRAP", "head:1234"},
                           {"COURIER_JOB_TOKEN", "t"}}));
  CHECK(c.job.local_size == 2);

  c = Config::load(env_of({{"OMPI_COMM_WORLD_RANK", "0"},
                           {"OMPI_COMM_WORLD_SIZE", "2"},
                           {"COURIER_BOOTSTRAP", "head:1234"},
                           {"COURIER_JOB_TOKEN", "t"}}));
  CHECK(c.job.launcher == "mpirun");
}

TEST_CASE("a Context given a joined job places the rank without a rendezvous") {
  // torchrun with a process group as the bootstrap: no COURIER_JOB_TOKEN, and
  // MASTER_ADDR/PORT are torch's alone.
  const std::map<std::string, std::string, std::less<>> torchrun = {
      {"RANK", "1"}, {"WORLD_SIZE", "2"}, {"LOCAL_RANK", "1"}, {"LOCAL_WORLD_SIZE", "2"}};
  Config c = Config::load(env_of(torchrun), /*need_job=*/true, /*need_rendezvous=*/false);
  CHECK(c.job.launcher == "torchrun");
  CHECK(c.job.rank == 1);
  CHECK(c.job.local_rank == 1);
  CHECK(c.job.bootstrap_port == 0);
  // Joining through the rendezvous still needs MASTER_ADDR/PORT and the token.
  CHECK(error_of(torchrun).find("MASTER_ADDR") != std::string::npos);
}

TEST_CASE("launcher errors name the variable") {
  std::string e = error_of({{"COURIER_RANK", "2"}, {"COURIER_WORLD_SIZE", "2"}});
  CHECK(e.find("COURIER_RANK='2'") != std::string::npos);
  CHECK(e.find("[0, 1]") != std::string::npos);

  e = error_of({{"COURIER_RANK", "0"}});
  CHECK(e.find("COURIER_WORLD_SIZE") != std::string::npos);

  e = error_of({{"COURIER_RANK", "0"}, {"COURIER_WORLD_SIZE", "2"}, {"COURIER_JOB_TOKEN", "t"}});
  CHECK(e.find("COURIER_BOOTSTRAP") != std::string::npos);

  e = error_of({{"COURIER_RANK", "0"},
                {"COURIER_WORLD_SIZE", "2"},
                {"COURIER_BOOTSTRAP", "127.0.0.1:4000"}});
  CHECK(e.find("COURIER_JOB_TOKEN") != std::string::npos);

  e = error_of({{"COURIER_RANK", "0"},
                {"COURIER_WORLD_SIZE", "2"},
                {"COURIER_BOOTSTRAP", "nohostport"},
                {"COURIER_JOB_TOKEN", "t"}});
  CHECK(e.find("COURIER_BOOTSTRAP='nohostport'") != std::string::npos);

  e = error_of({{"COURIER_RANK", "0"},
                {"COURIER_WORLD_SIZE", "2"},
                {"COURIER_BOOTSTRAP", "h:99999"},
                {"COURIER_JOB_TOKEN", "t"}});
  CHECK(e.find("COURIER_BOOTSTRAP port") != std::string::npos);

  e = error_of({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"COURIER_JOB_TOKEN", "t"}});
  CHECK(e.find("MASTER_ADDR") != std::string::npos);
}

TEST_CASE("unknown COURIER_ variables are reported as likely typos") {
  std::vector<std::string> unknown = Config::unknown_variables(
      {"PATH", "COURIER_FIFO_DEPTH", "COURIER_FIFO_DEPHT", "COURIER_OFI_PROVIDER"},
      {"COURIER_OFI_PROVIDER"});
  REQUIRE(unknown.size() == 1);
  CHECK(unknown[0] == "COURIER_FIFO_DEPHT");
}

TEST_CASE("COURIER_FAULTS and COURIER_RETRY_COUNT: defaults, values, errors") {
  Config c = Config::load(env_of({}));
  CHECK_FALSE(c.faults.active());
  CHECK(c.retry_count == 7);

  c = Config::load(env_of({{"COURIER_FAULTS", "reorder=0.3,delay_us=50,fail=0.01,seed=7"},
                           {"COURIER_RETRY_COUNT", "64"}}));
  CHECK(c.faults.active());
  CHECK(c.faults.reorder == doctest::Approx(0.3));
  CHECK(c.faults.delay_us == 50);
  CHECK(c.faults.fail == doctest::Approx(0.01));
  CHECK(c.faults.seed == 7);
  CHECK(c.retry_count == 64);
  bool listed = false;
  for (const ConfigEntry& e : c.entries) {
    if (e.name == "COURIER_FAULTS") {
      listed = true;
      CHECK(e.value == "reorder=0.3,delay_us=50,fail=0.01,seed=7");
      CHECK(e.source == "environment");
    }
  }
  CHECK(listed);
  CHECK(Config::load(env_of({{"COURIER_RETRY_COUNT", "0"}})).retry_count == 0);

  std::string e = error_of({{"COURIER_FAULTS", "reorder=2"}});
  CHECK(e.find("COURIER_FAULTS='reorder=2': reorder must be a probability in [0, 1]") == 0);
  e = error_of({{"COURIER_FAULTS", "reorder=0.1,bogus=1"}});
  CHECK(e.find("COURIER_FAULTS='reorder=0.1,bogus=1': unknown key 'bogus'") == 0);
  e = error_of({{"COURIER_FAULTS", "delay_us"}});
  CHECK(e.find("COURIER_FAULTS='delay_us': 'delay_us' is not a key=value pair") == 0);

  e = error_of({{"COURIER_RETRY_COUNT", "65"}});
  CHECK(e.find("COURIER_RETRY_COUNT='65'") != std::string::npos);
  CHECK(e.find("[0, 64]") != std::string::npos);
  e = error_of({{"COURIER_RETRY_COUNT", "-1"}});
  CHECK(e.find("COURIER_RETRY_COUNT='-1'") != std::string::npos);

  CHECK(Config::unknown_variables({"COURIER_FAULTS", "COURIER_RETRY_COUNT"}, {}).empty());
}

TEST_CASE("COURIER_COALESCE_BYTES: a default, 0 turns merging off, the 24-bit length bounds it") {
  const Config defaults = Config::load(env_of({}));
  CHECK(defaults.coalesce_bytes == 262144);
  bool listed = false;
  for (const ConfigEntry& e : defaults.entries) {
    if (e.name == "COURIER_COALESCE_BYTES") {
      listed = true;
      CHECK(e.value == std::to_string(defaults.coalesce_bytes));  // the table matches the field
      CHECK(e.source == "default");
    }
  }
  CHECK(listed);
  CHECK(Config::load(env_of({{"COURIER_COALESCE_BYTES", "0"}})).coalesce_bytes == 0);
  CHECK(Config::load(env_of({{"COURIER_COALESCE_BYTES", "16777215"}})).coalesce_bytes == 16777215);
  for (const char* bad : {"16777216", "-1", "64k", ""}) {
    CAPTURE(bad);
    const std::string e = error_of({{"COURIER_COALESCE_BYTES", bad}});
    CHECK(e.find(std::string("COURIER_COALESCE_BYTES='") + bad + "'") != std::string::npos);
    CHECK(e.find("[0, 16777215]") != std::string::npos);
  }
}
