// Energy meters on fake sysfs trees and an NVML test double; instance profiles; cost, PUE and CO2
// arithmetic; the ledger across a resume; emissions.csv.
#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>
#include <algorithm>

#include <filesystem>
#include <fstream>
#include <regex>

#include "test_util.h"
#include "trainer/cost/accounting.h"
#include "trainer/cost/energy.h"
#include "trainer/cost/hardware.h"
#include "trainer/cost/run_summary.h"
#include "trainer/run_config.h"

namespace joule::cost {
namespace {
namespace fs = std::filesystem;
using test::TempDir;
using test::write_file;

const std::string kConfigs = JOULE_CONFIG_DIR;

InstanceProfile cpu_host(int vcpus = 4, double memory_gib = 16, const std::string& isa = "avx2,fma,avx512f",
                         int cores = 0) {
  return load_instance_profile("cpu-host", kConfigs + "/hardware",
                               {vcpus, memory_gib, joule::launch::CpuIsa::parse(isa), /*clock_ghz=*/2.0, cores});
}

// A powercap tree as the kernel lays it out: every zone at the top level.
void add_zone(const std::string& root, const std::string& id, const std::string& name, double energy_uj,
              double range_uj) {
  const std::string dir = root + "/" + id;
  fs::create_directories(dir);
  write_file(dir + "/name", name + "\n");
  write_file(dir + "/energy_uj", std::to_string(static_cast<long long>(energy_uj)) + "\n");
  write_file(dir + "/max_energy_range_uj", std::to_string(static_cast<long long>(range_uj)) + "\n");
}
void set_energy(const std::string& root, const std::string& id, double energy_uj) {
  write_file(root + "/" + id + "/energy_uj", std::to_string(static_cast<long long>(energy_uj)) + "\n");
}

MeterContext context(const std::string& powercap) {
  MeterContext c;
  c.powercap_root = powercap;
  c.profile = cpu_host();
  return c;
}

TEST(Rapl, CountsPackageAndDramDeltas) {
  TempDir t;
  add_zone(t.path(), "intel-rapl:0", "package-0", 1e6, 262143328850);
  add_zone(t.path(), "intel-rapl:0:0", "core", 5e5, 262143328850);  // inside the package: not counted again
  add_zone(t.path(), "intel-rapl:0:1", "dram", 2e6, 65712999613);
  add_zone(t.path(), "intel-rapl:1", "package-1", 3e6, 262143328850);
  auto meter = create_energy_meter("rapl", context(t.path()));
  EXPECT_EQ(meter->components(), (std::set<Component>{Component::cpu, Component::ram}));
  EnergyTotals e;
  meter->sample(1, e);  // baseline already taken at construction: nothing changed
  EXPECT_EQ(e.total(), 0);
  set_energy(t.path(), "intel-rapl:0", 1e6 + 40e6);    // +40 J
  set_energy(t.path(), "intel-rapl:1", 3e6 + 35e6);    // +35 J
  set_energy(t.path(), "intel-rapl:0:0", 5e5 + 30e6);  // core: ignored
  set_energy(t.path(), "intel-rapl:0:1", 2e6 + 6e6);   // +6 J
  meter->sample(1, e);
  EXPECT_DOUBLE_EQ(e.at(Component::cpu, Source::rapl), 75.0);
  EXPECT_DOUBLE_EQ(e.at(Component::ram, Source::rapl), 6.0);
  EXPECT_DOUBLE_EQ(e.total(), 81.0);
}

TEST(Rapl, HandlesWraparoundAtMaxEnergyRange) {
  TempDir t;
  const double range = 262143328850;
  add_zone(t.path(), "intel-rapl:0", "package-0", range - 1e6, range);
  auto meter = create_energy_meter("rapl", context(t.path()));
  EnergyTotals e;
  set_energy(t.path(), "intel-rapl:0", 2e6);  // wrapped: 1 J to the top, 2 J after
  meter->sample(1, e);
  EXPECT_DOUBLE_EQ(e.at(Component::cpu, Source::rapl), 3.0);
  set_energy(t.path(), "intel-rapl:0", 7e6);
  meter->sample(1, e);
  EXPECT_DOUBLE_EQ(e.at(Component::cpu, Source::rapl), 8.0);
}

TEST(Rapl, MissingDramDomainLeavesRamToTheModel) {
  TempDir t;
  add_zone(t.path(), "intel-rapl:0", "package-0", 0, 262143328850);
  auto meter = create_energy_meter("rapl", context(t.path()));
  EXPECT_EQ(meter->components(), std::set<Component>{Component::cpu});
  MeterContext c = context(t.path());
  c.proc_stat = "/proc/stat";
  EnergyMonitor monitor("auto", c, 60);
  EXPECT_EQ(monitor.sources(), "cpu: rapl, ram: model");
  EXPECT_TRUE(monitor.notices().empty());
}

TEST(Rapl, ACounterUnreadableMidRunIsANoticeAndTheNextReadingCatchesUp) {
  TempDir t;
  add_zone(t.path(), "intel-rapl:0", "package-0", 1e6, 262143328850);
  MeterContext c = context(t.path());
  c.proc_stat = "/proc/stat";
  EnergyMonitor monitor("rapl", c, 60);
  EXPECT_TRUE(monitor.notices().empty());
  fs::remove(t.path() + "/intel-rapl:0/energy_uj");
  monitor.totals();
  monitor.totals();
  const auto notices = monitor.notices();
  ASSERT_EQ(notices.size(), 1u);
  EXPECT_NE(notices[0].find("rapl: 2 reading(s) failed during the run (last: "), std::string::npos) << notices[0];
  EXPECT_NE(notices[0].find("energy_uj"), std::string::npos) << notices[0];
  set_energy(t.path(), "intel-rapl:0", 1e6 + 12e6);  // readable again: the counter's delta covers the gap
  EXPECT_DOUBLE_EQ(monitor.totals().at(Component::cpu, Source::rapl), 12.0);
}

TEST(Rapl, AbsentTreeIsAOneLineNoticeAndTheModel) {
  MeterContext c = context("/nonexistent/powercap");
  try {
    create_energy_meter("rapl", c);
    FAIL() << "expected MeterUnavailable";
  } catch (const MeterUnavailable& e) {
    EXPECT_NE(std::string(e.what()).find("rapl: no /nonexistent/powercap"), std::string::npos) << e.what();
  }
  EnergyMonitor monitor("auto", c, 60);
  EXPECT_EQ(monitor.sources(), "cpu: model, ram: model");
  ASSERT_EQ(monitor.notices().size(), 1u);
  EXPECT_NE(monitor.notices()[0].find("using the model"), std::string::npos);
}

// Root reads any file, so the unreadable counter is tried by an unprivileged child process.
TEST(Rapl, PermissionDeniedFallsBackWithTheReason) {
  TempDir t;
  fs::permissions(t.path(), fs::perms::owner_all | fs::perms::group_read | fs::perms::group_exec |
                                fs::perms::others_read | fs::perms::others_exec);
  add_zone(t.path(), "intel-rapl:0", "package-0", 1e6, 262143328850);
  fs::permissions(t.path() + "/intel-rapl:0/energy_uj", fs::perms::owner_read);  // root-only, as since Linux 5.10
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  const pid_t pid = fork();
  if (pid == 0) {
    close(fds[0]);
    if (getuid() == 0 && (setgid(65534) != 0 || setuid(65534) != 0)) _exit(3);
    std::string message = "no error";
    try {
      create_energy_meter("rapl", context(t.path()));
    } catch (const MeterUnavailable& e) {
      message = e.what();
    }
    (void)!write(fds[1], message.data(), message.size());
    _exit(0);
  }
  close(fds[1]);
  std::string message;
  char buf[512];
  for (ssize_t n; (n = read(fds[0], buf, sizeof buf)) > 0;) message.append(buf, n);
  close(fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  EXPECT_NE(message.find("energy_uj: permission denied (root-only since Linux 5.10"), std::string::npos) << message;
}

MeterContext gpu_context() {
  MeterContext c;
  c.nvml_library = FAKE_NVML_LIBRARY;
  c.host = false;
  c.device = 1;
  c.profile = load_instance_profile("p4d.24xlarge", kConfigs + "/hardware");
  return c;
}

TEST(Nvml, EnergyCounterDeltasFromTheLibraryLoadedAtRunTime) {
  auto meter = create_energy_meter("nvml", gpu_context());
  EXPECT_EQ(meter->name(), "nvml");
  EnergyTotals e;
  meter->sample(1, e);
  meter->sample(1, e);
  EXPECT_DOUBLE_EQ(e.at(Component::gpu, Source::nvml), 5.0);  // 2 reads x 2,500 mJ
  EnergyMonitor monitor("auto", gpu_context(), 60);
  EXPECT_EQ(monitor.sources(), "gpu: nvml");
}

// Under CUDA_VISIBLE_DEVICES=5 a rank's CUDA device 0 is NVML's device 5: the meter finds its GPU by PCI bus id.
TEST(Nvml, FindsTheGpuByItsPciBusIdNotByCudasIndex) {
  MeterContext c = gpu_context();
  c.device = 0;
  c.device_pci_bus_id = "00000000:5C:00.0";
  setenv("FAKE_NVML_NO_INDEX", "1", 1);
  auto meter = create_energy_meter("nvml", c);
  EnergyTotals e;
  meter->sample(1, e);
  EXPECT_DOUBLE_EQ(e.at(Component::gpu, Source::nvml), 2.5);
  c.device_pci_bus_id = "00000000:99:00.0";
  try {
    create_energy_meter("nvml", c);
    ADD_FAILURE() << "an unknown PCI bus id was accepted";
  } catch (const MeterUnavailable& err) {
    EXPECT_NE(std::string(err.what()).find("nvml: no device at PCI bus id 00000000:99:00.0"), std::string::npos)
        << err.what();
  }
  unsetenv("FAKE_NVML_NO_INDEX");
}

TEST(Nvml, IntegratesPowerWhenTheEnergyCounterIsUnsupported) {
  setenv("FAKE_NVML_NO_ENERGY", "1", 1);
  auto meter = create_energy_meter("nvml", gpu_context());
  unsetenv("FAKE_NVML_NO_ENERGY");
  EnergyTotals e;
  setenv("FAKE_NVML_NO_ENERGY", "1", 1);
  meter->sample(2.0, e);
  unsetenv("FAKE_NVML_NO_ENERGY");
  EXPECT_DOUBLE_EQ(e.at(Component::gpu, Source::nvml), 500.0);  // 250 W x 2 s
}

TEST(Nvml, AFailedReadIsCountedAndNamedInTheNotices) {
  EnergyMonitor monitor("nvml", gpu_context(), 3600);
  setenv("FAKE_NVML_READ_FAIL", "1", 1);
  monitor.totals();
  monitor.totals();
  unsetenv("FAKE_NVML_READ_FAIL");
  const std::vector<std::string> notices = monitor.notices();
  ASSERT_EQ(notices.size(), 1u);
  EXPECT_NE(notices[0].find("nvml: 2 reading(s) failed during the run (last: nvml: nvmlDeviceGetTotalEnergyConsumption "
                            "failed with code 15"),
            std::string::npos)
      << notices[0];
}

TEST(Nvml, MissingLibraryOrFailedInitFallsBackToTheModel) {
  MeterContext c = gpu_context();
  c.nvml_library = "/nonexistent/libnvidia-ml.so.1";
  EnergyMonitor monitor("auto", c, 60);
  EXPECT_EQ(monitor.sources(), "gpu: model");
  ASSERT_EQ(monitor.notices().size(), 1u);
  EXPECT_NE(monitor.notices()[0].find("nvml: cannot load /nonexistent/libnvidia-ml.so.1"), std::string::npos);
  setenv("FAKE_NVML_INIT_FAIL", "1", 1);
  EXPECT_THROW(create_energy_meter("nvml", gpu_context()), MeterUnavailable);
  unsetenv("FAKE_NVML_INIT_FAIL");
}

TEST(Neuron, PercentOfMaximumPowerTimesTheProfileWatts) {
  TempDir t;
  fs::create_directories(t.path() + "/neuron3/stats/power");
  write_file(t.path() + "/neuron3/stats/power/utilization", "POWER_STATUS_VALID,1764400000,10.00,80.00,50.00\n");
  MeterContext c;
  c.neuron_root = t.path();
  c.host = false;
  c.device = 3;
  c.profile = load_instance_profile("trn1.32xlarge", kConfigs + "/hardware");
  auto meter = create_energy_meter("neuron", c);
  EnergyTotals e;
  meter->sample(10, e);
  EXPECT_DOUBLE_EQ(e.at(Component::neuron, Source::neuron), 0.5 * c.profile.device_max_w * 10);
  write_file(t.path() + "/neuron3/stats/power/utilization", "garbage\n");
  EXPECT_THROW(meter->sample(1, e), MeterUnavailable);
}

TEST(ModelMeter, ProfileWattsTimesMeasuredCpuUtilization) {
  TempDir t;
  const std::string stat = t.file("stat");
  write_file(stat, "cpu  100 0 100 800 0 0 0 0 0 0\ncpu0 1 2 3\n");
  MeterContext c;
  c.proc_stat = stat;
  c.profile = cpu_host(4, 16);
  auto meter = create_energy_meter("model", c, {Component::cpu, Component::ram});
  write_file(stat, "cpu  250 0 250 900 0 0 0 0 0 0\n");  // +300 busy, +100 idle: 75 % busy
  EnergyTotals e;
  meter->sample(2, e);
  const InstanceProfile& p = c.profile;
  EXPECT_DOUBLE_EQ(e.at(Component::cpu, Source::model), (p.cpu_idle_w + 0.75 * (p.cpu_max_w - p.cpu_idle_w)) * 2);
  EXPECT_DOUBLE_EQ(e.at(Component::ram, Source::model), p.ram_w * 2);
}

TEST(ModelMeter, StealTimeIsOtherTenantsWorkNotBusy) {
  TempDir t;
  const std::string stat = t.file("stat");
  write_file(stat, "cpu  100 0 100 800 0 0 0 0 0 0\n");
  MeterContext c;
  c.proc_stat = stat;
  c.profile = cpu_host(4, 16);
  auto meter = create_energy_meter("model", c, {Component::cpu});
  // +100 user, +100 idle, +200 steal: this VM's work is 100 of 400 ticks, 25 % (not 75 %).
  write_file(stat, "cpu  200 0 100 900 0 0 0 200 0 0\n");
  EnergyTotals e;
  meter->sample(2, e);
  const InstanceProfile& p = c.profile;
  EXPECT_DOUBLE_EQ(e.at(Component::cpu, Source::model), (p.cpu_idle_w + 0.25 * (p.cpu_max_w - p.cpu_idle_w)) * 2);
}

TEST(Monitor, OnlyTheHostReaderCountsHostEnergy) {
  MeterContext c = context("/nonexistent");
  c.host = false;  // local rank 1..N-1 of a CPU run: nothing to read, nothing to count twice
  EnergyMonitor monitor("auto", c, 60);
  EXPECT_EQ(monitor.totals().total(), 0);
  EXPECT_THROW(EnergyMonitor("rapl,bogus", context("/x"), 1), joule::RunConfigError);
}

// ---- instance profiles ----------------------------------------------------------------------------------
TEST(Profiles, EveryShippedProfileLoadsAndEveryNumberHasASource) {
  const auto names = list_instance_profiles(kConfigs + "/hardware");
  for (const char* required : {"trn1.32xlarge", "trn1n.32xlarge", "p4d.24xlarge", "p5.48xlarge", "cpu-host"})
    EXPECT_NE(std::find(names.begin(), names.end(), required), names.end()) << required;
  for (const auto& n : names) {
    const InstanceProfile p = load_instance_profile(n, kConfigs + "/hardware");
    EXPECT_EQ(p.name, n);
    EXPECT_GE(p.pue, 1.0);
    EXPECT_GT(p.usd_per_hour, 0) << n;
    EXPECT_EQ(joule::test::unsourced_numbers(p.file), std::vector<std::string>{}) << "every number needs a source";
  }
  const InstanceProfile p4d = load_instance_profile("p4d.24xlarge", kConfigs + "/hardware");
  EXPECT_DOUBLE_EQ(p4d.instance_peak_tflops("bf16"), 8 * 312.0);
  EXPECT_DOUBLE_EQ(p4d.max_power_w(), 480 + 432 + 8 * 400.0);
}

TEST(Profiles, GenericHostScalesWithDetectedVcpusAndMemory) {
  const InstanceProfile p = cpu_host(8, 32);
  EXPECT_EQ(p.vcpus, 8);
  EXPECT_DOUBLE_EQ(p.cpu_max_w, 8 * 3.5);
  EXPECT_DOUBLE_EQ(p.ram_w, 32 * 0.375);
  EXPECT_DOUBLE_EQ(p.usd_per_hour, 8 * 0.0425);
  // AVX-512: 2 FMA pipes x 16 lanes x 2 FLOP at the measured 2.0 GHz (the profile's clock_ghz = 0) per core, one a
  // vCPU where the topology is unknown (cores = 0); no
  // bf16 instructions: bf16's peak is fp32's.
  EXPECT_DOUBLE_EQ(p.clock_ghz, 2.0);
  EXPECT_DOUBLE_EQ(p.instance_peak_tflops("fp32"), 8 * 0.128);
  EXPECT_DOUBLE_EQ(p.instance_peak_tflops("bf16"), 8 * 0.128);
  EXPECT_DOUBLE_EQ(cpu_host(8, 32, "avx2,fma,avx512f,avx512_bf16").instance_peak_tflops("bf16"), 8 * 0.256);
  EXPECT_DOUBLE_EQ(cpu_host(8, 32, "avx2,fma,avx512f,amx_bf16").instance_peak_tflops("bf16"), 8 * 2.048);
  EXPECT_DOUBLE_EQ(cpu_host(8, 32, "avx2,fma").instance_peak_tflops("fp32"), 8 * 0.064);
  // With SMT (8 vCPUs on 4 cores) two vCPUs share a core's FMA units: the peak is 4 cores', power and price stay per
  // vCPU; one vCPU a core where the topology says so, or says nothing.
  const InstanceProfile smt = cpu_host(8, 32, "avx2,fma,avx512f", /*cores=*/4);
  EXPECT_DOUBLE_EQ(smt.instance_peak_tflops("fp32"), 4 * 0.128);
  EXPECT_DOUBLE_EQ(smt.usd_per_hour, 8 * 0.0425);
  EXPECT_DOUBLE_EQ(cpu_host(8, 32, "avx2,fma,avx512f", /*cores=*/8).instance_peak_tflops("fp32"), 8 * 0.128);
}

// The cpu-host profile's clock is measured (clock_ghz = 0): one add per cycle on a dependency chain, in the thread's
// CPU time. Without a measurement it says which key to set.
TEST(Profiles, GenericHostClockIsMeasured) {
#if defined(__x86_64__)
  const double ghz = joule::launch::core_clock_ghz();
  EXPECT_GT(ghz, 0.8);
  EXPECT_LT(ghz, 7.0);
  EXPECT_DOUBLE_EQ(joule::launch::core_clock_ghz(), ghz);  // once per process
#endif
  try {
    load_instance_profile("cpu-host", kConfigs + "/hardware", {4, 16, joule::launch::CpuIsa::parse("avx2,fma"), 0});
    ADD_FAILURE() << "no error without a clock";
  } catch (const ProfileError& e) {
    EXPECT_NE(std::string(e.what()).find("host.clock_ghz is 0"), std::string::npos) << e.what();
  }
}

TEST(Profiles, BadFilesNameTheFileAndTheKey) {
  TempDir t;
  auto expect_error = [&](const std::string& body, const std::string& fragment) {
    write_file(t.file("x.toml"), body);
    try {
      load_instance_profile(t.file("x.toml"), t.path());
      ADD_FAILURE() << "no error for: " << body;
    } catch (const ProfileError& e) {
      EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(t.file("x.toml")), std::string::npos) << e.what();
    }
  };
  const std::string ok_host = "[host]\ncpu_idle_w = 1\ncpu_max_w = 2\nram_w = 1\nusd_per_hour = 1\npue = 1.2\n";
  expect_error("name = \"x\"\n" + ok_host + "watts = 3\n[device]\nkind = \"cpu\"\ncount = 0\n",
               "unknown key 'host.watts'");
  expect_error("name = \"x\"\n[host]\ncpu_idle_w = 1\n[device]\nkind = \"cpu\"\ncount = 0\n",
               "missing key 'host.cpu_max_w'");
  expect_error("name = \"x\"\n" + ok_host + "[device]\nkind = \"tpu\"\ncount = 0\n",
               "valid values: cpu, gpu, trainium");
  expect_error("name = \"x\"\n" + ok_host + "[device]\nkind = \"gpu\"\ncount = \"8\"\n",
               "'device.count' must be a number");
  expect_error("name = 'x\xff'\n" + ok_host, "line 1, byte 10 (0xff): not valid UTF-8 (TOML files must be UTF-8)");
  try {
    load_instance_profile("p9.large", kConfigs + "/hardware");
    ADD_FAILURE();
  } catch (const ProfileError& e) {
    EXPECT_NE(std::string(e.what()).find("known instances: cpu-host, p4d.24xlarge"), std::string::npos) << e.what();
  }
  try {
    load_grid_region("mars-1", kConfigs + "/grid-intensity.toml");
    ADD_FAILURE();
  } catch (const ProfileError& e) {
    EXPECT_NE(std::string(e.what()).find("known regions:"), std::string::npos) << e.what();
  }
}

// ---- cost, PUE, CO2 -----------------------------------------------------------------------------------
TEST(Accounting, CostEnergyAndCarbonArithmetic) {
  CostSettings c;
  c.usd_per_hour = 10;
  c.pue = 1.5;
  c.region.g_per_kwh = 400;
  EnergyTotals e;
  e.at(Component::cpu, Source::rapl) = 2.4e6;
  e.at(Component::gpu, Source::nvml) = 1.2e6;  // 1 kWh in all
  const Spent f = account(e, 1800, 4, c);
  EXPECT_DOUBLE_EQ(f.it_kwh, 1.0);
  EXPECT_DOUBLE_EQ(f.facility_kwh, 1.5);
  EXPECT_DOUBLE_EQ(f.instance_hours, 2.0);
  EXPECT_DOUBLE_EQ(f.usd, 20.0);
  EXPECT_DOUBLE_EQ(f.co2_kg, 0.6);
}

// The accounting section with its first five keys set, the rest at their defaults.
AccountingOptions accounting(const std::string& instance, double price_per_hour, double pue, const std::string& region,
                             double grid_intensity) {
  AccountingOptions o;
  o.instance = instance;
  o.price_per_hour = price_per_hour;
  o.pue = pue;
  o.region = region;
  o.grid_intensity = grid_intensity;
  return o;
}

TEST(Accounting, OverridesWinAndSayWhereEachFigureCameFrom) {
  CostSettings c = resolve_cost_settings({}, "cpu", kConfigs);
  EXPECT_EQ(c.instance, "cpu-host");
  EXPECT_EQ(c.price_source, "profile cpu-host.toml");
  EXPECT_DOUBLE_EQ(c.region.g_per_kwh, 475.0);
  c = resolve_cost_settings(accounting("trn1.32xlarge", 20.0, 1.1, "eu-north-1", 0), "cpu", kConfigs);
  EXPECT_DOUBLE_EQ(c.usd_per_hour, 20.0);
  EXPECT_EQ(c.price_source, "--price-per-hour");
  EXPECT_DOUBLE_EQ(c.pue, 1.1);
  EXPECT_EQ(c.region.country, "SWE");
  EXPECT_DOUBLE_EQ(c.region.g_per_kwh, 47.0);
  c = resolve_cost_settings(accounting("p4d.24xlarge", -1, 0, "us-east-1", 100), "cpu", kConfigs);
  EXPECT_DOUBLE_EQ(c.usd_per_hour, 32.77);
  EXPECT_DOUBLE_EQ(c.region.g_per_kwh, 100.0);
  EXPECT_EQ(c.grid_source, "--grid-intensity");
  EXPECT_THROW(resolve_cost_settings(accounting("cpu-host", -1, 0.5, "world", 0), "cpu", kConfigs), ProfileError);
}

TEST(Accounting, ProjectionOfTheRunsTargetIsSpentPlusRemaining) {
  Spent done;
  done.facility_kwh = 2;
  done.usd = 10;
  done.co2_kg = 1;
  // 1,000 sequences in 100 s (0.02 kWh, USD 0.1, 0.01 kg per second); at 10 seq/s, 9,000 more take 900 s.
  const Projection p = project_target(10000, 1000, 100, done, 10);
  EXPECT_DOUBLE_EQ(p.wall_s, 1000);
  EXPECT_DOUBLE_EQ(p.kwh, 20);
  EXPECT_DOUBLE_EQ(p.usd, 100);
  EXPECT_DOUBLE_EQ(p.co2_kg, 10);
  // done = 0: everything still to do, on top of what start-up spent.
  const Projection none = project_target(10000, 0, 100, done, 10);
  EXPECT_DOUBLE_EQ(none.wall_s, 100 + 1000);
  EXPECT_DOUBLE_EQ(none.kwh, 2 + 20);
  // done = target and done > target: exactly what was spent, nothing added.
  for (int64_t d : {10000, 12345}) {
    const Projection at = project_target(10000, d, 100, done, 10);
    EXPECT_DOUBLE_EQ(at.wall_s, 100) << d;
    EXPECT_DOUBLE_EQ(at.kwh, 2) << d;
    EXPECT_DOUBLE_EQ(at.usd, 10) << d;
    EXPECT_DOUBLE_EQ(at.co2_kg, 1) << d;
  }
}

TEST(Accounting, HypotheticalProjectionIsFromRatesAloneAndNeverCountsSpentWorkTwice) {
  // A run that trained 450M sequences itself at a steady 5,000 seq/s: 90,000 s, 900 kWh, USD 4,500, 450 kg.
  Spent spent;
  spent.facility_kwh = 900;
  spent.usd = 4500;
  spent.co2_kg = 450;
  const int64_t full = 450000000;
  const Projection p = project_hypothetical(full, 90000, spent, 5000);
  EXPECT_EQ(p.sequences, full);
  EXPECT_DOUBLE_EQ(p.wall_s, 90000);  // its own figures, not twice them
  EXPECT_DOUBLE_EQ(p.kwh, 900);
  EXPECT_DOUBLE_EQ(p.usd, 4500);
  EXPECT_DOUBLE_EQ(p.co2_kg, 450);
  // A short run (1 h, 10 kWh, USD 20, 5 kg, 1,000 seq/s): 450M sequences take 450,000 s at its average rates.
  Spent short_run;
  short_run.facility_kwh = 10;
  short_run.usd = 20;
  short_run.co2_kg = 5;
  const Projection q = project_hypothetical(full, 3600, short_run, 1000);
  EXPECT_DOUBLE_EQ(q.wall_s, 450000);
  EXPECT_DOUBLE_EQ(q.kwh, 10.0 / 3600 * 450000);
  EXPECT_DOUBLE_EQ(q.usd, 20.0 / 3600 * 450000);
  EXPECT_DOUBLE_EQ(q.co2_kg, 5.0 / 3600 * 450000);
  EXPECT_DOUBLE_EQ(project_hypothetical(full, 3600, short_run, 0).wall_s, 0);  // no throughput yet: nothing to say
}

Segment segment(int64_t from, int64_t to, double wall, double joules, const std::string& status) {
  Segment g;
  g.start_step = from;
  g.end_step = to;
  g.sequences = (to - from) * 32;
  g.wall_s = wall;
  g.ranks = 2;
  g.nodes = 1;
  g.status = status;
  g.ended_utc = "2026-11-29T12:00:00Z";
  g.cost.instance = "cpu-host";
  g.cost.usd_per_hour = 0.36;
  g.cost.pue = 1.5;
  g.cost.region.name = "world";
  g.cost.region.g_per_kwh = 500;
  g.energy.at(Component::cpu, Source::model) = joules;
  return g;
}

// One CSV line's fields, with RFC 4180 quoting ("a, b" is one field; "" inside quotes is one quote).
std::vector<std::string> csv_fields(const std::string& line) {
  std::vector<std::string> fields(1);
  bool quoted = false;
  for (size_t i = 0; i < line.size(); ++i) {
    const char c = line[i];
    if (quoted && c == '"' && i + 1 < line.size() && line[i + 1] == '"')
      fields.back() += '"', ++i;
    else if (c == '"')
      quoted = !quoted;
    else if (c == ',' && !quoted)
      fields.emplace_back();
    else
      fields.back() += c;
  }
  return fields;
}

TEST(Ledger, SummaryAcrossAResumeCoversEverySegment) {
  Ledger l;
  l.run_id = new_run_id();
  EXPECT_TRUE(
      std::regex_match(l.run_id, std::regex("[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}")))
      << l.run_id;
  l.segments = {segment(0, 23, 100, 3.6e5, "preempted"), segment(23, 40, 50, 1.8e5, "finished")};
  l.add_projection({10, 320, 40, 180, 0.2, 0.02, 0.1});
  const Ledger back =
      Ledger::from_json(nlohmann::json::parse(l.to_json().dump()), "ledger");  // as a checkpoint carries it
  ASSERT_EQ(back.segments.size(), 2u);
  EXPECT_EQ(back.run_id, l.run_id);
  EXPECT_EQ(back.history.size(), 1u);
  const Spent t = back.totals();
  EXPECT_DOUBLE_EQ(t.it_kwh, 0.15);
  EXPECT_DOUBLE_EQ(t.facility_kwh, 0.225);
  EXPECT_DOUBLE_EQ(t.usd, 0.36 * 150 / 3600);
  EXPECT_DOUBLE_EQ(back.wall_s(), 150);

  RunSummary summary;
  summary.ledger = l;
  summary.host.vcpus = 2;
  summary.host.os = "Linux";
  summary.host.cpu_model = "x, y";
  // As `joule summary` reads it back from summary.json.
  summary = RunSummary::from_json(nlohmann::json::parse(summary.to_json().dump()), "summary.json");
  const std::string csv = emissions_csv(summary);
  std::vector<std::string> lines;
  std::stringstream ss(csv);
  for (std::string line; std::getline(ss, line);) lines.push_back(line);
  ASSERT_EQ(lines.size(), 3u) << csv;  // header + one row per segment
  EXPECT_NE(lines[1].find("\"x, y\""), std::string::npos) << "a comma inside a field is quoted";
  EXPECT_NE(lines[1].find(l.run_id), std::string::npos);
  // Every row has exactly the header's columns, and each named column holds its value.
  const std::vector<std::string> header = csv_fields(lines[0]);
  EXPECT_EQ(lines[0], kEmissionsCsvHeader);
  for (size_t r = 1; r < lines.size(); ++r) {
    const std::vector<std::string> row = csv_fields(lines[r]);
    ASSERT_EQ(row.size(), header.size()) << "row " << r << ": " << lines[r];
    auto column = [&](const std::string& name) {
      const auto it = std::find(header.begin(), header.end(), name);
      return it == header.end() ? std::string("<no column " + name + ">")
                                : row[static_cast<size_t>(it - header.begin())];
    };
    EXPECT_EQ(column("run_id"), l.run_id);
    EXPECT_EQ(column("cpu_model"), "x, y");
    EXPECT_EQ(column("os"), "Linux");
    EXPECT_EQ(column("sequences"), r == 1 ? "736" : "544") << lines[r];  // (end - start) x 32
  }
}

// A summary with every optional part, written and read back as `joule summary` and `joule report` do.
RunSummary full_summary() {
  RunSummary s;
  s.run_dir = "/runs/a";
  s.status = "finished";
  s.ranks = 2, s.nodes = 1, s.steps = 40, s.sequences = 1280, s.segments = 2, s.nonfinite_skipped_steps = 1,
  s.target_sequences = 1280;
  s.wall_s = 150, s.seq_per_s = 9.5, s.mfu = 0.125;
  s.workload = {"bert-tiny", "fp32", 128, 20, 32, 1.5e9};
  s.host = {"Linux-6.1", "EPYC", "", 2, 0, 23.5, nlohmann::json()};
  s.ledger.run_id = "0f0f0f0f-0000-4000-8000-000000000000";
  s.ledger.segments = {segment(0, 23, 100, 3.6e5, "preempted"), segment(23, 40, 50, 1.8e5, "finished")};
  s.ledger.segments[1].energy.at(Component::ram, Source::rapl) = 7.2e4;
  s.ledger.add_projection({10, 320, 40, 180, 0.2, 0.02, 0.1});
  s.target = {1280, 150, 0.2, 0.015, 0.1};
  s.full_pretraining = {450000000, 7.1e6, 1e4, 700, 5e3};
  s.notices = {"energy partly modelled"};
  s.eval = EvalFigures{2.5, 0.7, 3.2, 0.56, 0.61, 512};
  SimulatedFigures sim;
  sim.instance = "trn1.32xlarge", sim.nodes = 16, sim.devices = 512, sim.global_batch = 65536, sim.step_s = 1.25,
  sim.seq_per_s = 52428.8;
  s.simulated = sim;
  s.final_dir = "/runs/a/final";
  return s;
}

TEST(RunSummary, JsonRoundTripKeepsEveryFigureAndTheTable) {
  const RunSummary s = full_summary();
  const nlohmann::json j = s.to_json();
  const RunSummary back = RunSummary::from_json(nlohmann::json::parse(j.dump()), "summary.json");
  EXPECT_EQ(back.to_json().dump(), nlohmann::json::parse(j.dump()).dump());
  EXPECT_EQ(summary_table(back), summary_table(s));
  EXPECT_EQ(emissions_csv(back), emissions_csv(s));
  ASSERT_TRUE(back.eval && back.simulated && back.mfu);
  EXPECT_DOUBLE_EQ(back.eval->mlm_accuracy, 0.56);
  EXPECT_EQ(back.simulated->devices, 512);
  EXPECT_DOUBLE_EQ(back.ledger.totals().usd, s.ledger.totals().usd);
  EXPECT_DOUBLE_EQ(j["energy_kwh"].get<double>(), s.ledger.totals().facility_kwh);
  EXPECT_EQ(j["billed_wall_s"].get<double>(), 150);
  EXPECT_EQ(j["instance"]["instance"], "cpu-host");
  const std::string table = summary_table(s);
  for (const char* expected : {"cpu 150 Wh [model], ram 20 Wh [rapl]", "MFU 0.125", "segment 2", "SIMULATED cluster",
                               "nsp_acc 0.6100", "450,000,000 seq: 82.2 days, 10 MWh", "note"})
    EXPECT_NE(table.find(expected), std::string::npos) << expected << " in\n" << table;
}

TEST(RunSummary, AMissingOrMistypedKeyNamesTheFileAndTheKey) {
  nlohmann::json j = full_summary().to_json();
  j.erase("seq_per_s");
  try {
    RunSummary::from_json(j, "/runs/a/summary.json");
    FAIL() << "no error for a missing key";
  } catch (const joule::Error& e) {
    EXPECT_NE(std::string(e.what()).find("/runs/a/summary.json: missing key 'seq_per_s'"), std::string::npos)
        << e.what();
  }
  j = full_summary().to_json();
  j["segment_list"][1]["cost"]["pue"] = "high";
  try {
    RunSummary::from_json(j, "/runs/a/summary.json");
    FAIL() << "no error for a mistyped key";
  } catch (const joule::Error& e) {
    EXPECT_NE(std::string(e.what()).find("segment 2 cost: key 'pue' holds \"high\""), std::string::npos) << e.what();
  }
}

TEST(Ledger, EmissionsCsvHeaderStartsWithCodeCarbonsColumns) {
  const std::string codecarbon =
      "timestamp,project_name,run_id,duration,emissions,emissions_rate,cpu_power,gpu_power,ram_power,cpu_energy,gpu_"
      "energy,"
      "ram_energy,energy_consumed,country_iso_code,region,cloud_provider,cloud_region,os";
  EXPECT_EQ(std::string(kEmissionsCsvHeader).rfind(codecarbon, 0), 0u);
  for (const char* column : {",cpu_count,", ",gpu_count,", ",gpu_model,", ",pue,"})
    EXPECT_NE(std::string(kEmissionsCsvHeader).find(column), std::string::npos) << column;
}

TEST(Ledger, ProjectionHistoryStaysBounded) {
  Ledger l;
  for (int i = 0; i < 2000; ++i) l.add_projection({i, i * 10, 1.0 * i, 100, 1, 1, 1});
  EXPECT_LE(l.history.size(), 256u);
  EXPECT_EQ(l.history.front().step, 0);
  EXPECT_EQ(l.history.back().step, 1999);
}

}  // namespace
}  // namespace joule::cost
