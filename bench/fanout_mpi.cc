// The fanout bench's MPI_Bcast baseline: Open MPI's mpirun in the root
// namespace launches one rank per test-bed host through an rsh agent script
// that runs each daemon inside its host's namespace (testbed.sh exec), with
// the TCP BTL only (no shared memory between the "hosts") on the bed's subnet.
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "fanout_topology.h"

namespace wsbench {
namespace {

// A private directory for the hostfile and the agent, removed at scope exit.
struct TempDir {
  std::string path;
  TempDir() {
    char pattern[] = "/tmp/ws-fanout-mpi-XXXXXX";
    if (::mkdtemp(pattern)) path = pattern;
  }
  ~TempDir() {
    if (path.empty()) return;
    for (const char* f : {"/hostfile", "/agent.sh"}) ::unlink((path + f).c_str());
    ::rmdir(path.c_str());
  }
};

}  // namespace

FanoutRow measure_mpi_bcast(const TopologyRun& run, std::vector<std::string>* commands) {
  const FanoutConfig& c = *run.config;
  TestBed& bed = *run.bed;
  FanoutRow row;
  row.size = run.size;
  row.topology = "baseline:mpi";
  row.note =
      "Open MPI MPI_Bcast, one rank per host, btl tcp,self, pml ob1, default (tuned) algorithm; "
      "last rank's end - rank 0's start";
  if (c.mpi_exe.empty()) {
    row.error =
        "not built: weightsync-mpi-bcast needs MPI (apt-get install openmpi-bin libopenmpi-dev, then "
        "reconfigure)";
    return row;
  }
  TempDir dir;
  if (dir.path.empty()) {
    row.error = "cannot make a temporary directory";
    return row;
  }
  const auto& hosts = bed.hosts();
  {
    std::ofstream hostfile(dir.path + "/hostfile");
    for (const auto& h : hosts) hostfile << h.address << " slots=1\n";
    // mpirun calls: agent [options] HOST COMMAND... (ssh-style: the words form one shell command).
    std::ofstream agent(dir.path + "/agent.sh");
    agent << "#!/bin/sh\n"
             "# rsh agent for mpirun: runs the command in the test-bed host whose address is the host name\n"
             "while [ $# -gt 0 ]; do case \"$1\" in -*) shift ;; *) break ;; esac; done\n"
             "host=\"$1\"; shift\n"
             "case \"$host\" in\n";
    for (const auto& h : hosts) agent << "  " << h.address << ") i=" << h.index << " ;;\n";
    agent << "  *) echo \"agent: unknown host $host\" >&2; exit 1 ;;\n"
             "esac\n"
             "exec '"
          << c.testbed_script << "' exec '" << bed.name() << "' \"$i\" sh -c \"$*\"\n";
  }
  ::chmod((dir.path + "/agent.sh").c_str(), 0700);
  const std::string subnet = bed.subnet();
  std::vector<std::string> argv = {"mpirun",
                                   "--allow-run-as-root",
                                   "--hostfile",
                                   dir.path + "/hostfile",
                                   "-np",
                                   std::to_string(hosts.size()),
                                   "--map-by",
                                   "node",
                                   "--mca",
                                   "plm_rsh_agent",
                                   dir.path + "/agent.sh",
                                   "--mca",
                                   "plm_rsh_no_tree_spawn",
                                   "1",
                                   "--mca",
                                   "pml",
                                   "ob1",
                                   "--mca",
                                   "btl",
                                   "tcp,self",
                                   "--mca",
                                   "btl_tcp_if_include",
                                   subnet,
                                   "--mca",
                                   "oob_tcp_if_include",
                                   subnet,
                                   c.mpi_exe,
                                   std::to_string(run.size),
                                   std::to_string(c.runs)};
  // OMPI_MCA_* in this environment reach mpirun and every rank (e.g. a forced bcast algorithm): recorded.
  std::string mca_env;
  for (char** e = environ; *e; ++e) {
    if (std::string(*e).rfind("OMPI_MCA_", 0) == 0) mca_env += std::string(*e) + " ";
  }
  if (!mca_env.empty()) row.note += "; with " + mca_env;
  commands->push_back("OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 " + mca_env +
                      shell_join(argv));
  ::setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 1);
  ::setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 1);
  const double link = c.rate == "none" ? 100e6 : bytes_per_second_of_rate(c.rate);
  const double timeout =
      120 + (c.runs + 1) * 4.0 * static_cast<double>(hosts.size()) * static_cast<double>(run.size) / link;
  std::string output;
  const int rc = run_captured(argv, timeout, &output);
  std::istringstream in(output);
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream words(line);
    std::string tag;
    int rep = 0;
    long long bytes = 0;
    double seconds = 0, wtime = 0;
    if (words >> tag >> rep >> bytes >> seconds >> wtime && tag == "BCAST") {
      row.times_s.push_back(seconds);
      std::printf("  mpi %s #%d: %.3f s (max MPI_Wtime %.3f s)\n", run.size_label.c_str(), rep, seconds,
                  wtime);
    }
  }
  std::fflush(stdout);
  if (rc != 0 || static_cast<int>(row.times_s.size()) != c.runs) {
    row.error = "mpirun failed (exit " + std::to_string(rc) + "): " + output.substr(0, 2000);
    std::fprintf(stderr, "fanout: mpi %s: %s\n", run.size_label.c_str(), row.error.c_str());
  }
  fanout_summarize(&row);
  return row;
}

}  // namespace wsbench
