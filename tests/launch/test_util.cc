// launch/util: the one UniqueFd, FileLock, atomic replacement and mix64 every library uses.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <pthread.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <csignal>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <limits>
#include <optional>
#include <regex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "launch/util/file_io.h"
#include "launch/util/format.h"
#include "launch/util/hash.h"
#include "launch/util/json_field.h"
#include "launch/util/options.h"
#include "launch/util/progress.h"
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
  // A directory where the file should go: refused before anything is written, named; nothing left behind.
  std::filesystem::create_directories(dir.file("taken/inner"));
  try {
    joule::write_file_atomically(dir.file("taken"), "x");
    FAIL() << "no error";
  } catch (const joule::IoError& e) {
    EXPECT_NE(std::string(e.what()).find("taken: is a directory; joule writes its outputs as regular files"),
              std::string::npos)
        << e.what();
  }
  EXPECT_EQ(entries(dir.path()), (std::vector<std::string>{"out", "taken"}));
}

// An output never replaces what is not a regular file: a device, a FIFO, a symbolic link (even one to a regular file)
// or a directory stays what it was, and no temporary is left beside it.
TEST(WriteFileAtomically, RefusesToReplaceAnythingButARegularFile) {
  TempDir dir;
  ASSERT_EQ(::mkfifo(dir.file("fifo").c_str(), 0600), 0);
  joule::write_file_atomically(dir.file("target"), "kept");
  std::filesystem::create_symlink(dir.file("target"), dir.file("link"));
  std::filesystem::create_directory(dir.file("directory"));
  const std::pair<std::string, std::string> cases[] = {{"/dev/full", "/dev/full: is a character device"},
                                                       {"/dev/null", "/dev/null: is a character device"},
                                                       {dir.file("fifo"), "fifo: is a FIFO"},
                                                       {dir.file("link"), "link: is a symbolic link"},
                                                       {dir.file("directory"), "directory: is a directory"},
                                                       {dir.file("directory") + "/", "directory/: is a directory"}};
  for (const auto& [path, expect] : cases) {
    try {
      joule::write_file_atomically(path, "new");
      ADD_FAILURE() << "wrote " << path;
    } catch (const joule::IoError& e) {
      EXPECT_NE(std::string(e.what()).find(expect), std::string::npos) << e.what();
    }
  }
  struct stat st {};
  ASSERT_EQ(::lstat("/dev/full", &st), 0);
  EXPECT_TRUE(S_ISCHR(st.st_mode));
  EXPECT_EQ(read_file(dir.file("target")), "kept");
  EXPECT_TRUE(std::filesystem::is_symlink(dir.file("link")));
  EXPECT_EQ(entries(dir.path()), (std::vector<std::string>{"directory", "fifo", "link", "target"}));
}

// A path read from a file stays inside the directory the file describes.
TEST(StagedDirectory, SwapsInWholeOrLeavesNothing) {
  TempDir dir;
  const std::string out = dir.file("model");
  {
    joule::StagedDirectory staged(out);
    joule::write_file_atomically(staged.path() + "/config.json", "first");
  }  // not committed: nothing left
  EXPECT_TRUE(entries(dir.path()).empty());
  for (const char* text : {"first", "second"}) {
    joule::StagedDirectory staged(out);
    staged.fill([&](const std::string& to) { joule::write_file_atomically(to + "/config.json", text); });
    staged.commit();
  }
  EXPECT_EQ(read_file(out + "/config.json"), "second");
  EXPECT_EQ(entries(dir.path()), std::vector<std::string>{"model"});
  // An error while filling names the output's file, not the temporary directory.
  joule::StagedDirectory staged(out);
  try {
    staged.fill([](const std::string& to) { throw joule::IoError(to + "/model.safetensors: write failed"); });
    FAIL() << "no error";
  } catch (const joule::IoError& e) {
    EXPECT_EQ(std::string(e.what()), out + "/model.safetensors: write failed");
  }
}

// SIGTERM while the thread it lands on is inside malloc: the handler removes the staged directory and the process dies
// of the signal. A handler that allocates (fdopendir's DIR) waits for the malloc lock its own thread holds, for good:
// `joule model init` stopped that way hung in e2e.doors. The child allocates blocks above tcache's sizes (those take
// the arena's lock) with a second thread alive (a single-threaded process's malloc takes no lock at all).
TEST(StagedDirectory, ASignalInsideMallocStillRemovesItAndKills) {
  for (int attempt = 0; attempt < 20; ++attempt) {
    TempDir dir;
    const std::string out = dir.file("model");
    const pid_t child = ::fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
      joule::remove_temporaries_on_signals();
      joule::StagedDirectory staged(out);
      for (const char* name : {"/config.json", "/vocab.txt", "/model.safetensors"})
        joule::write_file_atomically(staged.path() + name, "part");
      sigset_t term;
      sigemptyset(&term);
      sigaddset(&term, SIGTERM);
      pthread_sigmask(SIG_BLOCK, &term, nullptr);  // the second thread inherits the block: SIGTERM lands here
      std::thread idle([] { ::pause(); });
      idle.detach();
      pthread_sigmask(SIG_UNBLOCK, &term, nullptr);
      for (size_t size = 4096;; size = size * 3 % 100003 + 2048) {
        void* p = std::malloc(size);
        static_cast<volatile char*>(p)[0] = 1;
        std::free(p);
      }
    }
    ::usleep(50000 + 7000 * attempt);
    ::kill(child, SIGTERM);
    int status = 0;
    pid_t done = 0;
    for (int waited_ms = 0; waited_ms < 10000 && (done = ::waitpid(child, &status, WNOHANG)) == 0; waited_ms += 10)
      ::usleep(10000);
    if (done == 0) {
      ::kill(child, SIGKILL);
      ::waitpid(child, &status, 0);
      FAIL() << "attempt " << attempt << ": the process did not end within 10 s of SIGTERM (a handler deadlocked)";
    }
    ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGTERM) << "attempt " << attempt << ": status " << status;
    EXPECT_TRUE(entries(dir.path()).empty()) << "attempt " << attempt << ": the staged directory was left";
  }
}

TEST(RemoveStaleTemporaries, RemovesWhatAProcessThatIsGoneLeft) {
  TempDir dir;
  const pid_t child = ::fork();
  if (child == 0) ::_exit(0);
  ::waitpid(child, nullptr, 0);  // a process id that no longer runs
  const std::string out = dir.file("out.txt");
  joule::write_file_atomically(out + ".tmp." + std::to_string(child), "left by a killed run");
  std::filesystem::create_directory(out + ".tmp." + std::to_string(::getppid()));  // a running process's: kept
  joule::write_file_atomically(out + ".tmp.notapid", "not ours");
  joule::write_file_atomically(out, "new");
  EXPECT_EQ(entries(dir.path()),
            (std::vector<std::string>{"out.txt", "out.txt.tmp." + std::to_string(::getppid()), "out.txt.tmp.notapid"}));
}

TEST(PathsInFiles, AreReadAgainstTheFileThatHoldsThem) {
  TempDir dir;
  std::filesystem::create_directories(dir.file("runs/a"));
  std::filesystem::create_directories(dir.file("models/seq"));
  const std::string file = dir.file("runs/a/inference.json");
  const std::string written = joule::path_for_file(dir.file("models/seq"), file);
  EXPECT_EQ(written, "../../models/seq");
  EXPECT_EQ(std::filesystem::weakly_canonical(joule::path_from_file(written, file)),
            std::filesystem::weakly_canonical(dir.file("models/seq")));
  EXPECT_EQ(joule::path_for_file("bert-base", file), "bert-base");  // a preset's name
  EXPECT_EQ(joule::path_from_file("bert-base", file), "bert-base");
  EXPECT_EQ(joule::path_from_file("/abs/model", file), "/abs/model");
}

TEST(RefuseSpecialInput, AFifoIsNeverOpened) {
  TempDir dir;
  ASSERT_EQ(::mkfifo(dir.file("fifo").c_str(), 0600), 0);
  try {
    joule::read_text_file(dir.file("fifo"));  // would block for good if opened
    FAIL() << "a FIFO was read";
  } catch (const joule::IoError& e) {
    EXPECT_NE(std::string(e.what()).find("fifo: is a FIFO"), std::string::npos) << e.what();
  }
  EXPECT_THROW(joule::LineLog(dir.file("fifo")), joule::IoError);  // a run's history onto a pipe stalls the run
}

TEST(PathInside, RefusesEntriesThatLeadOutNamingTheFileAndEntry) {
  TempDir dir;
  const std::string root = dir.file("ck");
  std::filesystem::create_directories(root + "/sub");
  joule::test::write_file(root + "/sub/a.bin", "a");
  joule::test::write_file(dir.file("outside.bin"), "x");
  std::filesystem::create_symlink(dir.file("outside.bin"), root + "/escape.bin");
  std::filesystem::create_symlink("sub/a.bin", root + "/inner_link.bin");
  EXPECT_EQ(joule::path_inside(root, "sub/a.bin", "manifest.json"), root + "/sub/a.bin");
  EXPECT_EQ(joule::path_inside(root, "inner_link.bin", "manifest.json"), root + "/inner_link.bin");
  EXPECT_EQ(joule::path_inside(root, "not_yet.bin", "manifest.json"), root + "/not_yet.bin");
  EXPECT_EQ(joule::path_inside(root + "/", "sub/a.bin", "manifest.json"), root + "/sub/a.bin");
  const std::pair<std::string, std::string> refused[] = {
      {"", "entry \"\" is empty"},
      {"/etc/passwd", "entry \"/etc/passwd\" is an absolute path"},
      {"../outside.bin", "entry \"../outside.bin\" climbs out with \"..\""},
      {"sub/../../outside.bin", "entry \"sub/../../outside.bin\" climbs out"},
      {"escape.bin", "entry \"escape.bin\" resolves to " + dir.file("outside.bin") + ", outside it"}};
  for (const auto& [entry, expect] : refused) {
    try {
      joule::path_inside(root, entry, "ck/manifest.json");
      ADD_FAILURE() << "accepted " << entry;
    } catch (const joule::IoError& e) {
      EXPECT_NE(std::string(e.what()).find("ck/manifest.json: " + expect), std::string::npos) << e.what();
    }
  }
}

// A log whose writer was killed mid-line is cut back to its last complete line when opened again, and says how much.
TEST(LineLog, CutsAPartialLastLineAndAppendsAfterTheLastCompleteOne) {
  TempDir dir;
  const std::string path = dir.file("metrics.jsonl");
  joule::test::write_file(path, "{\"step\": 1}\n{\"step\": 2}\n{\"st");
  {
    joule::LineLog log(path);
    EXPECT_EQ(log.cut_bytes(), 4);
    log.write_line("{\"step\": 3}");
  }
  EXPECT_EQ(read_file(path), "{\"step\": 1}\n{\"step\": 2}\n{\"step\": 3}\n");
  EXPECT_EQ(joule::LineLog(path).cut_bytes(), 0);          // whole lines: nothing cut
  joule::test::write_file(path, std::string(10000, 'x'));  // no newline at all, longer than one read block
  EXPECT_EQ(joule::LineLog(path).cut_bytes(), 10000);
  EXPECT_EQ(read_file(path), "");
  EXPECT_EQ(joule::LineLog(dir.file("new.jsonl")).cut_bytes(), 0);
}

TEST(ParseNumbers, TheWholeTextOrNothingAndNeverAWrapAround) {
  EXPECT_EQ(joule::parse_integer_text("42"), 42);
  EXPECT_EQ(joule::parse_integer_text("-7"), -7);
  EXPECT_EQ(joule::parse_integer_text("450e6"), 450000000);
  EXPECT_EQ(joule::parse_integer_text("1e9"), 1000000000);
  EXPECT_EQ(joule::parse_integer_text("9223372036854775807"), INT64_MAX);
  for (const char* bad : {"", " 1", "1 ", "12abc", "0x10", "1.5", "9223372036854775808", "5000000000000000000000",
                          "1e30", "inf", "nan", "+"})
    EXPECT_FALSE(joule::parse_integer_text(bad)) << bad;
  EXPECT_EQ(joule::parse_number_text("0.15"), 0.15);
  EXPECT_EQ(joule::parse_number_text("450e6"), 450e6);
  EXPECT_TRUE(std::isinf(*joule::parse_number_text("inf")));  // parsed; every range refuses it
  for (const char* bad : {"", "0.5x", "1e400", "one", "1,5"}) EXPECT_FALSE(joule::parse_number_text(bad)) << bad;
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

// A document's field table writes it and reads it back: required keys refused when absent (naming the file and the
// key), optional ones keeping their default, omit_default ones left out at their default.
namespace {
struct Doc {
  std::string name;
  int64_t count = 0;
  int threads = 0;
  double rate = 1.5;
  bool done = false;
  std::string note;
};
const std::vector<joule::JsonField<Doc>> kDocFields = {{"name", &Doc::name},
                                                       {"count", &Doc::count},
                                                       {"threads", &Doc::threads, joule::JsonPresence::optional},
                                                       {"rate", &Doc::rate, joule::JsonPresence::optional},
                                                       {"done", &Doc::done},
                                                       {"note", &Doc::note, joule::JsonPresence::omit_default}};
}  // namespace

TEST(JsonFields, OneTableWritesAndReadsADocument) {
  Doc d{"run", 7, 3, 2.25, true, ""};
  nlohmann::json j = nlohmann::json::object();
  joule::write_json_fields(d, kDocFields, j);
  EXPECT_EQ(j.dump(), R"({"count":7,"done":true,"name":"run","rate":2.25,"threads":3})");
  d.note = "kept";
  j = nlohmann::json::object();
  joule::write_json_fields(d, kDocFields, j);
  Doc back;
  joule::read_json_fields(j, kDocFields, back, "doc.json");
  EXPECT_EQ(back.name, "run");
  EXPECT_EQ(back.count, 7);
  EXPECT_EQ(back.threads, 3);
  EXPECT_EQ(back.rate, 2.25);
  EXPECT_TRUE(back.done);
  EXPECT_EQ(back.note, "kept");

  Doc defaults;  // an older file without the optional keys
  joule::read_json_fields(nlohmann::json{{"name", "x"}, {"count", 1}, {"done", false}}, kDocFields, defaults,
                          "old.json");
  EXPECT_EQ(defaults.rate, 1.5);
  EXPECT_EQ(defaults.threads, 0);
  for (const auto& [doc, expected] : std::vector<std::pair<nlohmann::json, std::string>>{
           {{{"name", "x"}, {"done", false}}, "doc.json: missing key 'count'"},
           {{{"name", "x"}, {"count", "seven"}, {"done", false}}, "doc.json: key 'count' holds \"seven\""},
           {{{"name", "x"}, {"count", 1}, {"done", false}, {"rate", "fast"}}, "doc.json: key 'rate' holds \"fast\""}}) {
    Doc d2;
    try {
      joule::read_json_fields(doc, kDocFields, d2, "doc.json");
      ADD_FAILURE() << doc.dump() << " was read";
    } catch (const joule::JsonFileError& e) {
      EXPECT_EQ(std::string(e.what()).rfind(expected, 0), 0u) << e.what();
    }
  }
}

// A required figure that is not finite is refused when written (JSON would write null, which every reader refuses).
TEST(JsonFields, AWriterNeverWritesNullForARequiredNumber) {
  // A number and a name, as the structs written this way hold (a lone double made GCC 12 warn of reading a string
  // member the struct does not have: the visitor is instantiated for every member type).
  struct Figure {
    double co2_kg = 0;
    std::string region;
  };
  const std::vector<joule::JsonField<Figure>> fields = {{"region", &Figure::region}, {"co2_kg", &Figure::co2_kg}};
  nlohmann::json j = nlohmann::json::object();
  Figure f{std::numeric_limits<double>::infinity(), "eu-west-1"};
  try {
    joule::write_json_fields(f, fields, j);
    FAIL() << "wrote " << j.dump();
  } catch (const joule::InternalError& e) {
    EXPECT_NE(std::string(e.what()).find("'co2_kg' is inf"), std::string::npos) << e.what();
  }
}

using joule::duration_text;
using joule::energy_text;
using joule::grouped;
using joule::mass_text;
using joule::Progress;
using joule::readable;
using joule::usd_text;

// Figures as people read them: thousands separated, no exponent, never an SI prefix glued to a unit ("4.85k h").
TEST(Readable, FiguresReadAsPeopleWriteThem) {
  EXPECT_EQ(grouped(2091), "2,091");
  EXPECT_EQ(grouped(-1234567.25, 1), "-1,234,567.2");
  EXPECT_EQ(grouped(999), "999");
  EXPECT_EQ(readable(0.000137), "0.000137");
  EXPECT_EQ(readable(5.98), "5.98");
  EXPECT_EQ(readable(9.996), "10");
  EXPECT_EQ(readable(38509.4), "38,509");
  EXPECT_EQ(readable(1e-12), "0");
  EXPECT_EQ(readable(std::nan("")), "?");
  EXPECT_EQ(duration_text(16.7), "16.7 s");
  EXPECT_EQ(duration_text(1800), "30 min");
  EXPECT_EQ(duration_text(27.2 * 3600), "27.2 h");
  EXPECT_EQ(duration_text(47 * 3600), "47 h");
  EXPECT_EQ(duration_text(100 * 3600), "4.17 days");
  EXPECT_EQ(energy_text(0.000001), "3.6 J");
  EXPECT_EQ(energy_text(0.0598), "59.8 Wh");
  EXPECT_EQ(energy_text(154), "154 kWh");
  EXPECT_EQ(energy_text(4.85e6), "4,850 MWh");
  EXPECT_EQ(usd_text(0.000746), "USD 0.000746");
  EXPECT_EQ(usd_text(8.5), "USD 8.50");
  EXPECT_EQ(usd_text(1820.4), "USD 1,820");
  EXPECT_EQ(mass_text(0.103), "103 g");
  EXPECT_EQ(mass_text(2500), "2.5 t");
  for (double v : {1e-7, 3e-4, 0.5, 12.0, 4850.0, 1e7, 4.5e8})
    for (const std::string& t : {readable(v), duration_text(v), energy_text(v), usd_text(v), mass_text(v)}) {
      EXPECT_FALSE(std::regex_search(t, std::regex("[0-9]e[-+]?[0-9]"))) << t;
      EXPECT_EQ(t.find("k "), std::string::npos) << t;
    }
}

namespace {

// What a Progress wrote to a temporary file, one entry a line ('\r' starts a terminal's update).
std::string progress_output(const std::function<void(Progress&)>& work, Progress::Style style, int64_t total,
                            bool quiet = false) {
  std::FILE* f = std::tmpfile();
  {
    Progress p("data create", Progress::Unit::bytes, total, quiet, style, f);
    work(p);
  }
  std::fflush(f);
  std::rewind(f);
  std::string text;
  for (int c = std::fgetc(f); c != EOF; c = std::fgetc(f)) text += static_cast<char>(c);
  std::fclose(f);
  return text;
}

}  // namespace

// In a log: one line at each tenth of the work, then the last line with the whole and its rate.
TEST(Progress, ALogGetsALineAtEachTenthAndTheLastLine) {
  const std::string log = progress_output(
      [](Progress& p) {
        for (int64_t done = 1; done <= 1'000'000; done += 1000) p.set(done);
        p.set(1'000'000);
        p.finish();
      },
      Progress::Style::log, 1'000'000);
  std::vector<std::string> lines;
  for (size_t at = 0, end; (end = log.find('\n', at)) != std::string::npos; at = end + 1)
    lines.push_back(log.substr(at, end - at));
  ASSERT_EQ(lines.size(), 10u) << log;  // 10 %, ..., 90 %, and done
  EXPECT_EQ(lines[0].rfind("data create: ", 0), 0u) << lines[0];
  EXPECT_NE(lines[0].find(" of 1 MB (10 %)"), std::string::npos) << lines[0];
  EXPECT_NE(lines[8].find("(90 %)"), std::string::npos) << lines[8];
  EXPECT_EQ(lines[9].rfind("data create: done, 1 MB in ", 0), 0u) << lines[9];
  EXPECT_EQ(log.find('\r'), std::string::npos);
}

// On a terminal: one line updated in place (carriage return, erase), ended by the last line; quiet: nothing at all.
TEST(Progress, ATerminalLineUpdatesInPlaceAndQuietSaysNothing) {
  auto work = [](Progress& p) {
    p.set(10);
    usleep(300'000);  // past the quarter second between a terminal's updates
    p.set(500);
    p.finish();
  };
  const std::string terminal = progress_output(work, Progress::Style::terminal, 1000);
  EXPECT_EQ(terminal.rfind("\r\033[Kdata create: 500 bytes of 1 kB (50 %)", 0), 0u) << terminal;
  EXPECT_NE(terminal.find("\r\033[Kdata create: done, 500 bytes in "), std::string::npos) << terminal;
  EXPECT_EQ(terminal.back(), '\n');
  EXPECT_EQ(progress_output(work, Progress::Style::terminal, 1000, /*quiet=*/true), "");
  EXPECT_EQ(progress_output(work, Progress::Style::log, 0, /*quiet=*/true), "");
  // Unknown total: no share and no time left, only what is done and the rate.
  Progress unknown("infer", Progress::Unit::lines, 0, false, Progress::Style::log);
  const std::string t = unknown.text(1200, 2);
  EXPECT_EQ(t, "1,200 lines, 600 lines/s");
}
