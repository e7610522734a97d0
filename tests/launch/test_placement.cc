// Launcher environment detection for each launcher's variables, and threads per rank.
#include <gtest/gtest.h>
#include <sched.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "launch/cpu_isa.h"
#include "launch/placement.h"
#include "launch/runtime.h"
#include "test_util.h"

using joule::launch::detect_placement;
using joule::launch::LaunchError;
using joule::launch::Placement;

namespace {
Placement from(const std::map<std::string, std::string>& vars) {
  return detect_placement([&](const char* name) -> const char* {
    auto it = vars.find(name);
    return it == vars.end() ? nullptr : it->second.c_str();
  });
}
}  // namespace

TEST(Placement, NoLauncherIsOneProcess) {
  Placement p = from({});
  EXPECT_EQ(p.launcher, "none");
  EXPECT_EQ(p.world_size, 1);
  EXPECT_EQ(p.local_size, 1);
  EXPECT_EQ(p.node_count, 1);
}

TEST(Placement, OpenMpi) {
  Placement p = from({{"OMPI_COMM_WORLD_RANK", "5"},
                      {"OMPI_COMM_WORLD_SIZE", "8"},
                      {"OMPI_COMM_WORLD_LOCAL_RANK", "1"},
                      {"OMPI_COMM_WORLD_LOCAL_SIZE", "4"}});
  EXPECT_EQ(p.launcher, "openmpi");
  EXPECT_EQ(p.rank, 5);
  EXPECT_EQ(p.world_size, 8);
  EXPECT_EQ(p.local_rank, 1);
  EXPECT_EQ(p.local_size, 4);
  EXPECT_EQ(p.node_count, -1);  // MPI tells once it runs
}

TEST(Placement, SlurmSrunTask) {
  Placement p = from({{"SLURM_PROCID", "37"},
                      {"SLURM_STEP_ID", "0"},
                      {"SLURM_NTASKS", "512"},
                      {"SLURM_LOCALID", "5"},
                      {"SLURM_TASKS_PER_NODE", "32(x16)"},
                      {"SLURM_NODEID", "1"},
                      {"SLURM_NNODES", "16"}});
  EXPECT_EQ(p.launcher, "slurm");
  EXPECT_EQ(p.rank, 37);
  EXPECT_EQ(p.world_size, 512);
  EXPECT_EQ(p.local_rank, 5);
  EXPECT_EQ(p.local_size, 32);
  EXPECT_EQ(p.node, 1);
  EXPECT_EQ(p.node_count, 16);
  // The batch script itself (no step id) is not a task.
  EXPECT_EQ(from({{"SLURM_PROCID", "0"}, {"SLURM_NNODES", "16"}}).launcher, "none");
}

TEST(Placement, PmixAndHydra) {
  Placement x = from({{"PMIX_RANK", "3"}, {"PMIX_SIZE", "4"}, {"PMIX_LOCAL_RANK", "3"}, {"PMIX_LOCAL_SIZE", "4"}});
  EXPECT_EQ(x.launcher, "pmix");
  EXPECT_EQ(x.rank, 3);
  EXPECT_EQ(x.local_size, 4);
  Placement h = from({{"PMI_RANK", "2"}, {"PMI_SIZE", "6"}, {"MPI_LOCALRANKID", "0"}, {"MPI_LOCALNRANKS", "3"}});
  EXPECT_EQ(h.launcher, "pmi");
  EXPECT_EQ(h.world_size, 6);
  EXPECT_EQ(h.local_size, 3);
}

TEST(Placement, BadValuesNameTheVariable) {
  try {
    from({{"OMPI_COMM_WORLD_RANK", "two"}, {"OMPI_COMM_WORLD_SIZE", "4"}});
    FAIL();
  } catch (const LaunchError& e) {
    EXPECT_NE(std::string(e.what()).find("OMPI_COMM_WORLD_RANK=\"two\" is not an integer"), std::string::npos)
        << e.what();
  }
  EXPECT_THROW(from({{"OMPI_COMM_WORLD_RANK", "4"}, {"OMPI_COMM_WORLD_SIZE", "4"}}), LaunchError);  // rank >= size
  EXPECT_THROW(from({{"PMI_RANK", "-1"}}), LaunchError);
}

TEST(Placement, ThreadsPerRankAndOversubscription) {
  using joule::launch::CoreView;
  using joule::launch::threads_per_rank;
  std::string warning;
  EXPECT_EQ(threads_per_rank(CoreView{32, 32}, 8, 0, &warning), 4);  // unbound: a share of the node each
  EXPECT_TRUE(warning.empty());
  EXPECT_EQ(threads_per_rank(CoreView{2, 2}, 2, 0, &warning), 1);  // mpirun --bind-to none on 2 cores
  EXPECT_TRUE(warning.empty());
  EXPECT_EQ(threads_per_rank(CoreView{1, 2}, 2, 0, &warning), 1);  // mpirun's default binding: a core each
  EXPECT_TRUE(warning.empty()) << "one rank's mask is not the node's cores: " << warning;
  EXPECT_EQ(threads_per_rank(CoreView{4, 8}, 2, 0, &warning), 4);  // --map-by slot:PE=4
  EXPECT_TRUE(warning.empty());
  EXPECT_EQ(threads_per_rank(CoreView{2, 2}, 4, 0, &warning), 1);
  EXPECT_NE(warning.find("4 rank(s) x 1 thread(s) on this node oversubscribe its 2 core(s)"), std::string::npos)
      << warning;
  EXPECT_EQ(threads_per_rank(CoreView{2, 2}, 1, 4, &warning), 4);  // asked for: honoured, but warned
  EXPECT_FALSE(warning.empty());
  EXPECT_EQ(threads_per_rank(CoreView{1, 2}, 2, 1, &warning), 1);
  EXPECT_TRUE(warning.empty());
  EXPECT_EQ(threads_per_rank(CoreView{1, 4}, 2, 2, &warning), 2);  // more threads than the rank's bound core
  EXPECT_NE(warning.find("the launcher binds each rank to 1 core(s)"), std::string::npos) << warning;
}

// The cores a peak FLOP/s multiplies, on a sysfs tree written here: 8 CPUs on 4 cores (siblings N and N + 4), the
// way two dies with repeating core ids lay them out; each set of siblings counts once.
TEST(Placement, CoresCountSmtSiblingsOnce) {
  using joule::launch::cores_behind;
  using joule::launch::cores_online;
  joule::test::TempDir t;
  const std::string root = t.path();
  for (int cpu = 0; cpu < 8; ++cpu) {
    const std::string dir = root + "/cpu" + std::to_string(cpu) + "/topology";
    std::filesystem::create_directories(dir);
    joule::test::write_file(dir + "/thread_siblings_list",
                            std::to_string(cpu % 4) + "," + std::to_string(cpu % 4 + 4) + "\n");
  }
  EXPECT_EQ(cores_behind({0, 1, 2, 3, 4, 5, 6, 7}, root), 4);
  EXPECT_EQ(cores_behind({0, 4}, root), 1);  // one core's two threads
  EXPECT_EQ(cores_behind({0, 1}, root), 2);
  EXPECT_EQ(cores_behind({0, 9}, root), 0);  // cpu9 has no topology: unknown, not a guess
  EXPECT_EQ(cores_online(root), 0);          // no online file
  joule::test::write_file(root + "/online", "0-7\n");
  EXPECT_EQ(cores_online(root), 4);
  joule::test::write_file(root + "/online", "0-2,4\n");
  EXPECT_EQ(cores_online(root), 3);
  joule::test::write_file(root + "/online", "0-x\n");
  EXPECT_EQ(cores_online(root), 0);
}

// This process's own: between 1 and its CPUs, and one core when the affinity is narrowed to one CPU.
TEST(Placement, CoresBehindTheAffinity) {
  const std::vector<int> cpus = joule::launch::affinity_cpus();
  ASSERT_FALSE(cpus.empty());
  EXPECT_GE(joule::launch::cores_behind_affinity(), 1);
  EXPECT_LE(joule::launch::cores_behind_affinity(), joule::launch::physical_cores());
  struct Restore {  // the thread's affinity as it was, whatever the checks below do
    cpu_set_t all;
    ~Restore() { sched_setaffinity(0, sizeof all, &all); }
  } restore{};
  ASSERT_EQ(sched_getaffinity(0, sizeof restore.all, &restore.all), 0);
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(cpus.front(), &one);
  ASSERT_EQ(sched_setaffinity(0, sizeof one, &one), 0);
  EXPECT_EQ(joule::launch::cores_behind_affinity(), 1);
}

TEST(Placement, KernelCpuLists) {
  using joule::launch::parse_cpu_list;
  EXPECT_EQ(parse_cpu_list("0"), std::vector<int>({0}));
  EXPECT_EQ(parse_cpu_list("0-3,8,10-11"), std::vector<int>({0, 1, 2, 3, 8, 10, 11}));
  EXPECT_EQ(parse_cpu_list("0,64"), std::vector<int>({0, 64}));
  for (const char* bad : {"", "a", "1-", "3-1", "0-1x", "-1", "0-2147483647"})
    EXPECT_TRUE(parse_cpu_list(bad).empty()) << bad;
}
