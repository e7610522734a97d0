// End-to-end: the joule binary as a user runs it.
#include <gtest/gtest.h>

#include "test_util.h"

using joule::test::run_command;
using joule::test::TempDir;

namespace {
const std::string kJoule = JOULE_BINARY;
}

TEST(Cli, HelpListsTheCommands) {
  auto r = run_command(kJoule + " --help");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  for (const char* c : {"version", "model init", "model info", "bench model"})
    EXPECT_NE(r.output.find(c), std::string::npos) << c;
  auto none = run_command(kJoule);
  EXPECT_EQ(none.exit_code, 2);
  auto unknown = run_command(kJoule + " frobnicate");
  EXPECT_EQ(unknown.exit_code, 2);
  EXPECT_NE(unknown.output.find("unknown command 'frobnicate'"), std::string::npos) << unknown.output;
}

TEST(Cli, VersionNamesEveryLibrary) {
  auto r = run_command(kJoule + " version");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  for (const char* lib : {"joule 0.", "LibTorch ", "MPI ", "HDF5 ", "BLAS ", "Open MPI v"})
    EXPECT_NE(r.output.find(lib), std::string::npos) << lib << " in:\n" << r.output;
}

TEST(Cli, VersionWarnsLoudlyOnTheReferenceBlas) {
  const std::string reference = "/usr/lib/x86_64-linux-gnu/blas/libblas.so.3";
  if (!std::filesystem::exists(reference)) GTEST_SKIP() << "no reference BLAS installed at " << reference;
  // Preloading the netlib library makes LibTorch's sgemm_ calls resolve to it, as a wrong
  // update-alternatives choice would.
  auto r = run_command("LD_PRELOAD=" + reference + " " + kJoule + " version");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("WARNING: LibTorch's matmuls run on reference BLAS"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("update-alternatives"), std::string::npos) << r.output;
}

TEST(Cli, ModelInitThenInfo) {
  TempDir dir;
  const std::string out = dir.file("tiny");
  auto init = run_command(kJoule + " model init --config bert-tiny --seed 3 --out " + out);
  ASSERT_EQ(init.exit_code, 0) << init.output;
  auto info = run_command(kJoule + " model info " + out);
  EXPECT_EQ(info.exit_code, 0) << info.output;
  // bert-tiny: (30522+512+2)*128+256 + 2*198272 + 16512 + (16512+256+30522) + 258
  EXPECT_NE(info.output.find("4,433,468"), std::string::npos) << info.output;
  EXPECT_NE(info.output.find("model.safetensors: 46 tensors"), std::string::npos) << info.output;

  auto by_config = run_command(kJoule + " model info --config bert-large");
  EXPECT_EQ(by_config.exit_code, 0) << by_config.output;
  EXPECT_NE(by_config.output.find("336,226,108"), std::string::npos) << by_config.output;
}

TEST(Cli, BadInputIsAClearErrorAndWritesNothing) {
  TempDir dir;
  joule::test::write_file(dir.file("bad.json"), R"({"hidden_size": 10})");
  auto r = run_command(kJoule + " model init --config " + dir.file("bad.json") + " --out " + dir.file("m"));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("bad.json: missing key"), std::string::npos) << r.output;
  EXPECT_FALSE(std::filesystem::exists(dir.file("m")));

  auto missing = run_command(kJoule + " model init --out " + dir.file("m"));
  EXPECT_EQ(missing.exit_code, 2);
  EXPECT_NE(missing.output.find("--config"), std::string::npos) << missing.output;

  auto dtype = run_command(kJoule + " model init --config bert-tiny --dtype F8 --out " + dir.file("m"));
  EXPECT_EQ(dtype.exit_code, 1);
  EXPECT_NE(dtype.output.find("unsupported dtype 'F8'"), std::string::npos) << dtype.output;
}
