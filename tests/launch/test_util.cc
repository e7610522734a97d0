// launch/util: the one UniqueFd, FileLock, atomic replacement and mix64 every library uses.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "launch/util/file_io.h"
#include "launch/util/hash.h"
#include "test_util.h"

namespace {

using joule::test::read_file;
using joule::test::TempDir;

bool fd_open(int fd) { return ::fcntl(fd, F_GETFD) != -1; }

// The names in `dir`, sorted: what an atomic write left behind.
std::vector<std::string> entries(const std::string& dir) {
  std::vector<std::string> names;
  for (const auto& e : std::filesystem::directory_iterator(dir)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

TEST(UniqueFd, ClosesOnceByItsLastOwner) {
  TempDir dir;
  int raw = -1;
  {
    joule::UniqueFd a = joule::open_file(dir.file("f"), O_WRONLY | O_CREAT, "open");
    raw = a.get();
    joule::UniqueFd b = std::move(a);
    EXPECT_FALSE(a.valid());
    EXPECT_EQ(b.get(), raw);
    EXPECT_TRUE(fd_open(raw));
  }
  EXPECT_FALSE(fd_open(raw));
  try {
    joule::open_file(dir.file("no/such/dir/f"), O_RDONLY, "open for reading");
    FAIL() << "no error";
  } catch (const joule::IoError& e) {
    EXPECT_NE(std::string(e.what()).find("no/such/dir/f: open for reading failed"), std::string::npos) << e.what();
  }
}

TEST(WriteFileAtomically, ReplacesTheWholeFileAndLeavesNoTemporary) {
  TempDir dir;
  const std::string path = dir.file("summary.json");
  joule::write_file_atomically(path, "first");
  joule::write_file_atomically(path, "second, longer");
  EXPECT_EQ(read_file(path), "second, longer");
  EXPECT_EQ(entries(dir.path()), std::vector<std::string>{"summary.json"});
}

TEST(WriteFileAtomically, AFailureLeavesTheOldFileAndNoTemporary) {
  TempDir dir;
  const std::string path = dir.file("out");
  joule::write_file_atomically(path, "old");
  {
    joule::AtomicFile file(path);
    file.write("half of a new");
    EXPECT_TRUE(std::filesystem::exists(file.tmp_path()));
    EXPECT_NE(file.tmp_path(), path + ".tmp");  // this process's own temporary: PATH.tmp.PID
    // destroyed without commit(): an error unwinding
  }
  EXPECT_EQ(read_file(path), "old");
  EXPECT_EQ(entries(dir.path()), std::vector<std::string>{"out"});
  // A directory where the file should go: the rename fails, named, and the temporary goes.
  std::filesystem::create_directories(dir.file("taken/inner"));
  try {
    joule::write_file_atomically(dir.file("taken"), "x");
    FAIL() << "no error";
  } catch (const joule::IoError& e) {
    EXPECT_NE(std::string(e.what()).find("taken: rename from"), std::string::npos) << e.what();
  }
  EXPECT_EQ(entries(dir.path()), (std::vector<std::string>{"out", "taken"}));
}

TEST(FileLock, ExclusiveUntilReleased) {
  TempDir dir;
  const std::string path = dir.file(".lock");
  std::optional<joule::FileLock> first = joule::FileLock::try_acquire(path);
  ASSERT_TRUE(first);
  EXPECT_TRUE(first->still_at_path());
  first->replace_text("host h pid 1\n");
  EXPECT_EQ(joule::FileLock::read_text(first->fd()), "host h pid 1");
  // POSIX record locks belong to the process: a second process must be refused.
  const pid_t child = fork();
  if (child == 0) _exit(joule::FileLock::try_acquire(path) ? 1 : 0);
  int status = 0;
  waitpid(child, &status, 0);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "another process took a held lock";
  first.reset();
  const pid_t again = fork();
  if (again == 0) _exit(joule::FileLock::try_acquire(path) ? 0 : 1);
  waitpid(again, &status, 0);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "a released lock was not free";
  std::filesystem::remove(path);
  std::optional<joule::FileLock> recreated = joule::FileLock::try_acquire(path);
  ASSERT_TRUE(recreated);
  std::filesystem::remove(path);
  EXPECT_FALSE(recreated->still_at_path());
}

// SplitMix64 (Steele, Lea, Flood 2014): the reference implementation's first outputs from state 0 (its generator adds
// the golden gamma, then mixes).
TEST(Mix64, IsSplitMix64) {
  uint64_t state = 0;
  EXPECT_EQ(joule::mix64(state += joule::kGoldenGamma), 0xe220a8397b1dcdafull);
  EXPECT_EQ(joule::mix64(state += joule::kGoldenGamma), 0x6e789e6aa1b965f4ull);
  EXPECT_EQ(joule::mix64(state += joule::kGoldenGamma), 0x06c45d188009454full);
  EXPECT_EQ(joule::fnv1a64_hex(""), "cbf29ce484222325");
  EXPECT_EQ(joule::fnv1a64_hex("a"), "af63dc4c8601ec8c");
}

}  // namespace
